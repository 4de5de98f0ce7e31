"""gRPC calls per fresh run on the Spanner store, counted at the channel, against the real emulator.

    .venv/bin/python bench/store_rpcs.py

Warms the session pool with one run first, then prints the calls of one claim and one finish.
"""

import asyncio
import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grpc._channel as ch
calls = collections.Counter()
for cls in (ch._UnaryUnaryMultiCallable, ch._UnaryStreamMultiCallable):
    for name in ("__call__", "with_call", "future"):
        orig = getattr(cls, name, None)
        if orig is None: continue
        def wrap(orig=orig):
            def f(self, *a, **k):
                m = self._method.decode() if isinstance(self._method, bytes) else self._method
                calls[m.rsplit('/', 1)[-1]] += 1
                return orig(self, *a, **k)
            return f
        setattr(cls, name, wrap())
from tests.support.backends import start_spanner_emulator, create_spanner_database
from app.stores import open_store, Finish
from tests.support.runs import claim, new_run, T0
emu = start_spanner_emulator(Path(tempfile.mkdtemp()))
try:
    url = create_spanner_database("rpcs")
    async def go():
        store = open_store(url)
        warm = await claim(store, run=new_run(run_id="0"*64))  # sessions, channel
        await store.finish(warm, Finish("completed", target={"type": "log", "resource": "x"}), T0)
        calls.clear()
        first = await claim(store)
        print("claim", dict(calls)); calls.clear()
        await store.finish(first, Finish("completed", target={"type": "log", "resource": "x"}), T0)
        print("finish", dict(calls))
        await store.close()
    asyncio.run(go())
finally:
    emu.stop()
