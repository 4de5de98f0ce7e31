"""Property-based fuzz of `runonce-guard`'s command line and environment.

Hypothesis draws flags (steps, run_ids, task indexes, durations and exit codes from the ordinary to
thousands of digits) and an environment (every job runner's task variables, well formed or not,
`CLUSTER_SPEC`/`TF_CONFIG` of any JSON, durations, and `RUNONCE_STORE` URLs of every scheme with a
password planted in them). Every store answers from 127.0.0.1:1 (nothing listens), so a run that
gets as far as the store ends with exit 69. The wrapper must exit with one of its codes, say why in
one short line, and never show the planted password or a traceback.

Budget: RUNONCE_FUZZ_GUARD_EXAMPLES (default 100); RUNONCE_FUZZ_GUARD_SEED replays a run; the seed
is printed either way.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
from collections import Counter
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runonce_guard.cli import main

EXAMPLES = int(os.environ.get("RUNONCE_FUZZ_GUARD_EXAMPLES", "100"))
SEED = int(os.environ.get("RUNONCE_FUZZ_GUARD_SEED") or random.SystemRandom().randrange(2**32))
SECRET = "Pl4nted-Secret"
EXIT_CODES = {0, 1, 64, 69, 75, 78, 127}  # 127: CMD not found (run --allow-missing -- /nonexistent)
LONGEST_LINE = 400

# What an environment variable can hold: any text but NUL and lone surrogates.
env_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
numbers = st.one_of(
    st.integers(0, 20).map(str),
    st.sampled_from(["-1", "0.5", "1e3", "nan", "inf", "\u0663", "1_0", " 1", "1\n", ""]),
    st.one_of(st.integers(10, 40), st.integers(4290, 6000)).map(lambda n: "9" * n),
    st.text(env_chars, max_size=10),
)
urls = st.one_of(
    st.just("firestore"),
    st.sampled_from(["redis", "rediss", "sqlite", "memory", "postgres", "REDIS"]).flatmap(
        lambda scheme: st.builds(
            lambda sep, user, password, port, path, tail: f"{scheme}{sep}{user}:{password}@127.0.0.1{port}{path}{tail}",
            st.sampled_from(["://", ":/", ":", "//"]),
            st.sampled_from(["", "u", SECRET]),
            st.sampled_from([SECRET, f"a/{SECRET}", f"{SECRET}#?@", f"%{SECRET}%zz"]),
            st.sampled_from([":1", ":99999", ":" + "9" * 5000, ""]),
            st.sampled_from(["/0", "/", "/x", "/" + "9" * 5000, ""]),
            st.sampled_from(["", f"?token={SECRET}", "?wait_replicas=1", f"#{SECRET}", "?ca_file=/c"]),
        )
    ),
    st.sampled_from(
        [
            "spanner://projects/my-project/instances/i/databases/d",
            f"spanner://projects/my-project/instances/i/databases/d?password={SECRET}",
            f"spanner://u:{SECRET}@projects/my-project/instances/i/databases/d",
        ]
    ),
)
json_specs = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(env_chars, max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(env_chars, max_size=8), inner, max_size=3),
    max_leaves=8,
)
cluster_specs = st.one_of(
    st.builds(
        lambda pools, pool, index: json.dumps(
            {
                "cluster": {p: [f"h{i}:2222" for i in range(n)] for p, n in pools.items()},
                "task": {"type": pool, "index": index},
            }
        ),
        st.dictionaries(st.sampled_from(["workerpool0", "workerpool1", "chief", "worker"]), st.integers(0, 3)),
        st.sampled_from(["workerpool0", "workerpool1", "chief", "worker", "nope"]),
        st.one_of(st.integers(-1, 4), st.just(10**400), st.text(env_chars, max_size=3)),
    ),
    json_specs.map(json.dumps),
    st.text(env_chars, max_size=20),
)
ENV_NUMBERS = [
    "CLOUD_RUN_TASK_INDEX",
    "CLOUD_RUN_TASK_COUNT",
    "CLOUD_RUN_TASK_ATTEMPT",
    "BATCH_TASK_INDEX",
    "BATCH_TASK_COUNT",
    "BATCH_TASK_RETRY_ATTEMPT",
    "RUNONCE_LEASE_SECONDS",
    "RUNONCE_RETENTION_SECONDS",
]


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    env = {
        "RUNONCE_STORE": draw(urls),
        "RUNONCE_STORE_TIMEOUT_SECONDS": "0.3",
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
        "SPANNER_EMULATOR_HOST": "127.0.0.1:1",
        "RUNONCE_FIRESTORE_PROJECT": "fuzz-project",
    }
    for name in draw(st.lists(st.sampled_from(ENV_NUMBERS), max_size=4, unique=True)):
        env[name] = draw(numbers)
    for name in draw(st.lists(st.sampled_from(["CLUSTER_SPEC", "TF_CONFIG", "SPARK_EXECUTOR_ID"]), max_size=2)):
        env[name] = draw(cluster_specs)
    if draw(st.integers(0, 3)) < 3:
        env["IDEMPOTENCY_KEY"] = draw(st.sampled_from(["a" * 64, "run-1", "bad run", "x" * 300]))
    return env


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    verb = draw(st.sampled_from(["run", "run", "status", "store"]))
    if verb == "store":
        return ["store", draw(st.sampled_from(["init", "drop"]))]
    argv = [verb, "--step", draw(st.sampled_from(["export", "a/b", "x" * 101]) | st.text(max_size=6))]
    for flag in draw(st.lists(st.sampled_from(["--task", "--run-id", "--no-task"]), max_size=2, unique=True)):
        argv += [flag] if flag == "--no-task" else [flag, draw(numbers)]
    if verb == "run":
        for flag in draw(
            st.lists(st.sampled_from(["--wait-seconds", "--lease-seconds", "--keep-on-exit"]), max_size=3)
        ):
            argv += [flag, draw(numbers)]
        argv += draw(st.sampled_from([["--allow-missing"], [], ["--on-busy", "raise"], ["--on-busy", "x"]]))
        argv += draw(st.sampled_from([["--", "true"], ["--", "/nonexistent/cmd"], []]))
    return argv


@pytest.mark.subprocess
def test_the_guard_exits_with_its_codes_in_one_line_and_never_shows_the_password() -> None:
    print(f"\nguard fuzz: RUNONCE_FUZZ_GUARD_SEED={SEED} RUNONCE_FUZZ_GUARD_EXAMPLES={EXAMPLES}")
    codes: Counter[int] = Counter()

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(argv=argvs(), env=environments())
    def check(argv: list[str], env: dict[str, str]) -> None:
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("RUNONCE_", "CLOUD_RUN_", "BATCH_"))}
        err = io.StringIO()
        with mock.patch.dict(os.environ, kept | env, clear=True), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exited:  # argparse's usage errors
                code = exited.code if isinstance(exited.code, int) else 1
        codes[code] += 1
        said = err.getvalue()
        assert code in EXIT_CODES, (argv[:6], code, said[-400:])
        assert "Traceback" not in said and SECRET not in said, said[-600:]
        lines = said.strip().splitlines()
        assert all(len(line) <= LONGEST_LINE for line in lines), max(lines, key=len)[:300]
        if code in (64, 69, 75, 78):
            assert lines and lines[-1].startswith("runonce-guard: "), said[-400:]

    check()
    print(f"guard fuzz: exit codes {dict(sorted(codes.items()))}")
    assert codes[78] > 0 and codes[64] > 0
