"""Google's own groc evaluator (App Engine SDK, shipped with the Google Cloud CLI) as a test oracle.

Run as a script in a subprocess, so the SDK's `google` package never shadows `google.auth` in the
test process: it reads JSON cases on stdin, one a line, `{"expr", "tz", "start", "n"}` (start in
epoch seconds), and answers one JSON line each: `{"matches": [epoch seconds…]}` or `{"error": …}`.
`run_oracle(cases)` does the plumbing and fails with install instructions when the SDK is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SDK = os.environ.get("APPENGINE_SDK", "/usr/lib/google-cloud-sdk/platform/google_appengine")
INSTALL = (
    "The groc oracle needs Google's App Engine SDK from the Google Cloud CLI "
    f"(expected at {SDK}; set APPENGINE_SDK to another path) and the test extras six and pytz: "
    "apt-get install google-cloud-cli (or google-cloud-sdk) and pip install -e '.[test]'."
)


def run_oracle(cases: list[dict]) -> list[dict]:
    if not os.path.exists(os.path.join(SDK, "google", "appengine", "cron", "groctimespecification.py")):
        raise RuntimeError(INSTALL)
    lines = "\n".join(json.dumps(case) for case in cases) + "\n"
    proc = subprocess.run(
        [sys.executable, __file__],
        input=lines,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "APPENGINE_SDK": SDK},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"groc oracle failed ({proc.returncode}): {proc.stderr[-2000:]}\n{INSTALL}")
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _serve() -> None:  # pragma: no cover - runs in the subprocess
    import datetime

    sys.path.append(os.path.join(SDK, "lib", "py3_antlr3"))  # append: never shadow google.auth
    sys.path.append(SDK)
    import pytz
    from google.appengine.cron import groctimespecification

    for line in sys.stdin:
        case = json.loads(line)
        try:
            spec = groctimespecification.GrocTimeSpecification(case["expr"], case.get("tz") or None)
            start = datetime.datetime.fromtimestamp(case["start"], pytz.utc)
            matches = [m.timestamp() for m in spec.GetMatches(start, case["n"])] if case["n"] else []
            print(json.dumps({"matches": matches}))
        except Exception as exc:  # noqa: BLE001 - the oracle's verdict: rejected
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    _serve()
