"""Store requests per fresh run, per store, counted where they leave the process (Firestore and
Redis on the store's client, Spanner's gRPC calls at the channel, SQLite's statements), against the
real emulators / redis-server. A warm-up run first (connections, sessions, scripts).

    .venv/bin/python bench/store_rpcs.py [--stores sqlite,firestore,spanner,redis]

Prints, per store, the claim + finish of one fresh run (the store protocol) and one whole fresh
scheduled delivery through the Runner (which also reads the force run's record beside the claim).
"""

import argparse
import asyncio
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_stores import GRPC_CALLS, STORES, Backends, count_round_trips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default=",".join(STORES))
    stores = [s for s in parser.parse_args().stores.split(",") if s]
    with ExitStack() as stack:
        backends = Backends(Path(tempfile.mkdtemp(prefix="runonce-rpcs-")), stack)
        for store in stores:
            trips = asyncio.run(count_round_trips(store, backends))
            detail = f"  gRPC of claim+finish: {dict(GRPC_CALLS)}" if store == "spanner" else ""
            print(f"{store:9} claim+finish {trips['claim+finish']}, whole delivery {trips['delivery']}{detail}")


if __name__ == "__main__":
    main()
