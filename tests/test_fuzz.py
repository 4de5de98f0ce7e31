"""Property-based fuzz of the delivery endpoint against a real `runonce serve` process.

Hypothesis builds requests from a valid delivery and then breaks it: identity headers at the
edges of their types (years 1 and 9999 with offsets, counters past 64 bits, every script's
digits), arbitrary bytes in any header, query parameters and route names, and bodies of every
JSON kind and none (non-finite numbers, lone surrogates, invalid UTF-8, deep nesting, duplicate
keys, huge integers). The audit, backfill and status endpoints get durations of every shape, numbers
of thousands of digits among them. Every answer must be a JSON row of the status table
(docs/concepts/run-protocol.md), and after the run the store holds a record for exactly the
requests that were answered 200.

A third property sends tokens of every shape (any JSON as header or claims, claims of the wrong
type, signed with the real key or not) to a server with RUNONCE_AUTH=oidc.

Budget: RUNONCE_FUZZ_EXAMPLES (default 3000) requests on SQLite, a third of that for the body cases
on the Firestore emulator, a sixth for the tokens. RUNONCE_FUZZ_SEED replays a run; the seed is
printed either way.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import sqlite3
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_from_bytes

import httpx
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.procs import REPO, ServerProcess, start_server
from tests.support.stores import FIRESTORE_PROJECT

if TYPE_CHECKING:
    from tests.support import oidc

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("RUNONCE_FUZZ_EXAMPLES", "3000"))
SEED = int(os.environ.get("RUNONCE_FUZZ_SEED") or random.SystemRandom().randrange(2**32))

ROUTES = {
    "routes": {
        "etl": {"target": {"type": "log"}, "namespace": {"project": "fuzz-project", "location": "europe-west1"}},
        "bare": {"target": {"type": "log"}},
        "snap": {
            "target": {"type": "log"},
            "schedule": "0 * * * *",
            "time_zone": "Europe/London",
            "missing_schedule_time": "snap",
            "forced_runs": "reject",
        },
        "dedupe": {"target": {"type": "log"}, "forced_runs": "dedupe"},
    }
}
JOB, TIME = "X-CloudScheduler-JobName", "X-CloudScheduler-ScheduleTime"
QUEUE, TASK = "X-CloudTasks-QueueName", "X-CloudTasks-TaskName"
RETRIES, EXECUTIONS = "X-CloudTasks-TaskRetryCount", "X-CloudTasks-TaskExecutionCount"
OTHER_HEADERS = ["Content-Type", "traceparent", "X-Cloud-Trace-Context", "Authorization", "User-Agent", "X-Fuzz"]


def status_table() -> set[tuple[int, str]]:
    """(HTTP status, `status`) of every row of the table of answers in docs/concepts/run-protocol.md."""
    readme = (REPO / "docs" / "concepts" / "run-protocol.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| (\d{3})[^|]* \| `(\w+)` \|", readme, flags=re.MULTILINE)
    return {(int(code), status) for code, status in rows}


# -- strategies ------------------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1, max_size=30)
junk = st.one_of(st.binary(max_size=80), st.text(max_size=40).map(lambda text: text.encode("utf-8", "surrogatepass")))


def header_value(raw: bytes) -> bytes:
    """What HTTP/1.1 can carry in a header value (no controls, no surrounding whitespace)."""
    return bytes(b for b in raw if (b >= 0x20 and b != 0x7F) or b == 0x09).strip(b" \t")


def rfc3339(wall: datetime, offset_minutes: int | None) -> str:
    text = f"{wall.year:04d}-{wall.month:02d}-{wall.day:02d}T{wall.hour:02d}:{wall.minute:02d}:{wall.second:02d}" + (
        f".{wall.microsecond:06d}" if wall.microsecond else ""
    )
    if offset_minutes is None:
        return text + "Z"
    sign = "-" if offset_minutes < 0 else "+"
    return text + f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"


valid_schedule_times = st.datetimes(datetime(1970, 1, 2), datetime(2100, 1, 1)).map(lambda wall: rfc3339(wall, None))
schedule_times = st.one_of(
    valid_schedule_times,
    st.builds(rfc3339, st.datetimes(), st.none() | st.integers(-1439, 1439)),  # years 1 to 9999, any offset
    st.builds(
        rfc3339,
        st.datetimes(datetime(9999, 12, 30), datetime.max) | st.datetimes(datetime.min, datetime(1, 1, 2)),
        st.none() | st.integers(-1439, 1439),
    ),
    st.text(alphabet="0123456789٠١٢٣٤٥٦٧٨٩²-:TZz.+ ", max_size=35),  # noqa: RUF001 - other scripts' digits, on purpose
)
counters = st.one_of(
    st.integers(0, 2**70).map(str),
    st.text(alphabet="0123456789²³¹٠١٢٣٤٥٦٧٨٩۰０１ -+.", min_size=1, max_size=25),  # noqa: RUF001 - on purpose
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=15,
)


def dump(value: object, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.just(b""),
    st.builds(dump, st.dictionaries(st.text(max_size=10), json_values, max_size=5), st.booleans()),
    st.builds(dump, json_values, st.booleans()),
    st.binary(max_size=200),
    st.sampled_from([b"1e400", b"-1e999", b"NaN", b"Infinity", b'"\\ud800"', b"9" * 30, b"9" * 5000]).map(
        lambda literal: b'{"x": ' + literal + b"}"
    ),
    st.integers(1, 32_000).map(lambda depth: b"[" * depth),
    st.integers(1, 3000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
    st.builds(
        lambda key, a, b: b'{"%s": %d, "%s": %d}' % (key, a, key, b),
        names.map(str.encode),
        st.integers(),
        st.integers(),
    ),
    st.sampled_from([b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00", b"\x00", b'{"s": "\xc3"}']),
)
query_values = st.one_of(
    st.sampled_from(["fuzz-other", "us-central1", "example.com:my-project", ""]),
    st.text(max_size=30).map(lambda text: quote(text.encode("utf-8", "surrogatepass"), safe="")),
    st.binary(max_size=30).map(lambda raw: quote_from_bytes(raw, safe="")),
)
queries = st.lists(
    st.tuples(
        st.sampled_from(["project", "location"]) | st.text(max_size=10).map(lambda k: quote(k, safe="")), query_values
    ),
    max_size=3,
).map(lambda pairs: "&".join(f"{key}={value}" for key, value in pairs))
route_paths = st.one_of(
    st.sampled_from(sorted(ROUTES["routes"])),
    st.text(max_size=40).map(lambda text: quote(text.encode("utf-8", "surrogatepass"), safe="")),
    st.binary(max_size=40).map(lambda raw: quote_from_bytes(raw, safe="")),
)


@st.composite
def identity_headers(draw: st.DrawFn) -> dict[str, bytes]:
    """A Scheduler or Cloud Tasks delivery (or both, or neither), each header then maybe broken."""
    headers: dict[str, bytes] = {}
    kind = draw(st.sampled_from(["scheduler", "scheduler", "tasks", "both", "none"]))
    if kind in ("scheduler", "both"):
        headers[JOB] = draw(names).encode()
        if draw(st.integers(0, 5)):
            headers[TIME] = draw(schedule_times).encode()
    if kind in ("tasks", "both"):
        headers[QUEUE], headers[TASK] = draw(names).encode(), draw(names).encode()
        for counter in (RETRIES, EXECUTIONS):
            if draw(st.booleans()):
                headers[counter] = draw(counters).encode()
    if not draw(st.integers(0, 2)):
        for name in draw(
            st.lists(st.sampled_from([JOB, TIME, QUEUE, TASK, RETRIES, EXECUTIONS, *OTHER_HEADERS]), max_size=3)
        ):
            headers[name] = draw(junk)
    return {name: header_value(value) for name, value in headers.items()}


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[str, dict[str, bytes], bytes]:
    route = draw(st.sampled_from(sorted(ROUTES["routes"]))) if draw(st.integers(0, 4)) else draw(route_paths)
    path = f"/v1/routes/{route}:run"
    query = draw(queries) if not draw(st.integers(0, 2)) else ""
    return (f"{path}?{query}" if query else path), draw(identity_headers()), draw(bodies)


@st.composite
def body_deliveries(draw: st.DrawFn) -> tuple[str, dict[str, bytes], bytes]:
    """A valid Scheduler delivery with a fuzzed body: the cases that reach the store."""
    headers = {JOB: draw(names).encode(), TIME: draw(valid_schedule_times).encode()}
    return "/v1/routes/etl:run", headers, draw(bodies)


# -- the property ----------------------------------------------------------------------------------


class Fuzz:
    """Sends each drawn request, checks its answer, and keeps what the store must end up holding."""

    def __init__(self, server: ServerProcess):
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30)
        self.table = status_table()
        self.statuses: Counter[int] = Counter()
        self.accepted: set[str] = set()

    def send(self, request: tuple[str, dict[str, bytes], bytes]) -> None:
        target, headers, body = request
        response = self.http.post(target, headers=list(headers.items()), content=body)
        self.statuses[response.status_code] += 1
        assert response.headers.get("content-type") == "application/json", (response.status_code, response.text)
        answer = response.json()
        assert (response.status_code, answer.get("status")) in self.table, (response.status_code, answer)
        if response.status_code == 200:
            self.accepted.add(answer["run_id"])
        elif response.status_code == 400:
            assert answer["error"]["field"], answer

    def run(self, strategy: st.SearchStrategy, examples: int) -> float:
        @seed(SEED)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def property(request: tuple[str, dict[str, bytes], bytes]) -> None:
            self.send(request)

        started = time.monotonic()
        property()
        return time.monotonic() - started

    def report(self, capsys: pytest.CaptureFixture, name: str, seconds: float) -> None:
        with capsys.disabled():
            print(
                f"\nfuzz {name}: {sum(self.statuses.values())} requests in {seconds:.1f}s, seed {SEED} "
                f"(RUNONCE_FUZZ_SEED={SEED} replays, RUNONCE_FUZZ_EXAMPLES={EXAMPLES} sets the budget); "
                f"answers {dict(sorted(self.statuses.items()))}"
            )

    def session(self, strategy: st.SearchStrategy, examples: int, capsys: pytest.CaptureFixture, name: str) -> None:
        """Run `examples` requests, report them, then stop the server (whose log must hold no traceback)."""
        seconds = 0.0
        try:
            seconds = self.run(strategy, examples)
        finally:
            self.report(capsys, name, seconds)
            self.server.stop()
            self.close()

    def close(self) -> None:
        self.http.close()
        log = self.server.output()
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


def stored_run_ids(db: Path) -> set[str]:
    """The run_ids in a SQLite store, read-only (a store that was never written to is empty)."""
    if not db.exists():
        return set()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {row[0] for row in conn.execute("SELECT run_id FROM runs")}


def serve(tmp_path: Path, store_env: dict[str, str]) -> ServerProcess:
    env = {"RUNONCE_AUTH": "none", "RUNONCE_ROUTES": json.dumps(ROUTES), "RUNONCE_LOG_FORMAT": "json", **store_env}
    return start_server(env, tmp_path)


def test_any_request_gets_a_json_answer_from_the_table_and_only_accepted_ones_leave_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    db = tmp_path / "runs.db"
    server = serve(tmp_path, {"RUNONCE_STORE": f"sqlite:///{db}"})
    fuzz = Fuzz(server)
    seconds = 0.0
    try:
        seconds = fuzz.run(deliveries(), EXAMPLES)
    finally:
        fuzz.report(capsys, "sqlite", seconds)
        server.stop()
        fuzz.close()
    assert stored_run_ids(db) == fuzz.accepted


def test_fuzzed_bodies_on_firestore_get_table_answers_and_rejected_ones_leave_no_record(
    firestore_emulator, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from runonce.stores.firestore import FirestoreStore

    collection = f"fuzz_{uuid.uuid4().hex[:8]}"
    server = serve(
        tmp_path,
        {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": collection,
            "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        },
    )
    fuzz = Fuzz(server)
    seconds = 0.0
    try:
        seconds = fuzz.run(body_deliveries(), max(10, EXAMPLES // 3))
    finally:
        fuzz.report(capsys, "firestore bodies", seconds)
        server.stop()
        fuzz.close()

    async def stored() -> set[str]:
        store = FirestoreStore(project=FIRESTORE_PROJECT, collection=collection, timeout_seconds=10)
        try:
            now = datetime.now(UTC)
            return {record.run_id for record in await store.list(now, limit=100_000)}
        finally:
            await store.close()

    assert asyncio.run(stored()) == fuzz.accepted


# -- tokens: RUNONCE_AUTH=oidc ---------------------------------------------------------------------

AUDIENCE = "https://runonce.example"
CALLER = "scheduler@fuzz-project.iam.gserviceaccount.com"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@st.composite
def bearer_tokens(draw: st.DrawFn, key: oidc.SigningKey) -> bytes:
    """Tokens from well-formed and Google-signed to garbage: any JSON as header or claims (claims of
    the wrong types, non-finite or huge times), signed with the real key or not."""
    now = int(time.time())
    header: object = {"alg": "RS256", "kid": key.kid, "typ": "JWT"}
    if not draw(st.integers(0, 3)):
        header = draw(
            st.fixed_dictionaries(
                {
                    "alg": st.sampled_from(["RS256", "none", "HS256"]) | st.text(max_size=8),
                    "kid": st.just(key.kid) | json_values,
                }
            )
            | json_values
        )
    good = {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 3600,
        "email": CALLER,
        "email_verified": True,
        "sub": "1",
    }
    claims: object = dict(good)
    for name in draw(st.lists(st.sampled_from(sorted(good)), max_size=3)):
        if draw(st.booleans()):
            claims.pop(name, None)
        else:
            claims[name] = draw(json_leaves | st.sampled_from([1e400, -1e400, 2**70, [AUDIENCE], "now"]))
    if not draw(st.integers(0, 5)):
        claims = draw(json_values)
    signing_input = f"{b64(dump(header, True))}.{b64(dump(claims, True).replace(b'Infinity', b'1e400'))}"
    signature = b64(key.signer.sign(signing_input.encode())) if draw(st.integers(0, 3)) else draw(st.text(max_size=20))
    token = f"{signing_input}.{signature}" if draw(st.integers(0, 5)) else draw(st.text(max_size=60))
    scheme = "Bearer" if draw(st.integers(0, 5)) else draw(st.sampled_from(["bearer", "Basic", ""]))
    return header_value(f"{scheme} {token}".encode("utf-8", "surrogatepass"))


def test_any_token_gets_a_json_answer_from_the_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tests.support import oidc

    key = oidc.make_key()
    db = tmp_path / "runs.db"
    with oidc.CertsServer([key]) as certs:
        server = start_server(
            {
                "RUNONCE_AUTH": "oidc",
                "RUNONCE_AUDIENCE": AUDIENCE,
                "RUNONCE_ALLOWED_CALLERS": CALLER,
                "RUNONCE_OIDC_CERTS_URL": certs.url,
                "RUNONCE_ROUTES": json.dumps(ROUTES),
                "RUNONCE_STORE": f"sqlite:///{db}",
                "RUNONCE_LOG_FORMAT": "json",
            },
            tmp_path,
        )
        fuzz = Fuzz(server)
        seconds = 0.0
        requests = st.builds(
            lambda job, token, header: (
                "/v1/routes/etl:run",
                {JOB: job.encode(), TIME: b"2026-10-16T12:00:00Z", header: token},
                b"",
            ),
            names,
            bearer_tokens(key),
            st.sampled_from(["Authorization", "X-Serverless-Authorization"]),
        )
        try:
            seconds = fuzz.run(requests, max(10, EXAMPLES // 6))
        finally:
            fuzz.report(capsys, "oidc tokens", seconds)
            server.stop()
            fuzz.close()
    assert stored_run_ids(db) == fuzz.accepted


# -- the audit and backfill endpoints --------------------------------------------------------------

MISSED_ROUTES = {
    "routes": {
        name: {
            "target": {"type": "log"},
            "job": f"{name}-job",
            "schedule": schedule,
            "time_zone": zone,
            "namespace": {"project": "fuzz-project", "location": "europe-west1"},
            "body": {"mode": "full"},
            **extra,
        }
        for name, schedule, zone, extra in (
            ("mins", "*/7 * * * *", "Europe/London", {"catch_up": "latest", "catch_up_window_seconds": 3600}),
            ("hourly", "0 * * * *", "America/New_York", {"catch_up": "all", "max_concurrent_dispatches": 2}),
            ("plain", "30 2 * * *", "Asia/Kolkata", {}),
        )
    }
}


def stamp_offset(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Times around now (past, just past, not due yet, far either side), and anything else.
instants = st.one_of(
    st.floats(-3 * 86400, 3 * 86400).map(stamp_offset),
    st.sampled_from([-90000.0, -3600.0, -301.0, -1.0, 0.0, 1.0, 3120.0, 10**7]).map(stamp_offset),
    schedule_times,
    json_leaves,
)
good_durations = st.sampled_from(["10m", "1h", "6h", "1d", "2s", "90s", "1h30m", "3650d"])
# Numbers past any range, up to past Python's int() limit (4,300 digits): refused before conversion.
oversized_numbers = st.builds(
    lambda digits, unit: digits + unit,
    st.one_of(st.integers(13, 64), st.integers(4290, 6000)).map(lambda n: "9" * n),
    st.sampled_from(["", "s", "m", "h", "d", "d1h", "h30m"]),
)
durations = st.one_of(
    good_durations,
    good_durations,
    st.sampled_from(["30d", "0", "-5m", "", "²m", "1e3", "3651d"]),
    oversized_numbers,
    st.integers(-5, 10**12).map(lambda n: f"{n}{'' if n % 3 else 's'}"),
    st.text(alphabet="0123456789dhms ٠١", max_size=8),  # noqa: RUF001 - other scripts' digits, on purpose
    json_leaves,
)


def object_body(fields: dict) -> bytes:
    return json.dumps(fields).encode()


@st.composite
def missed_requests(draw: st.DrawFn) -> tuple[str, dict[str, bytes], bytes]:
    """An audit delivery (a schedule time around now, force runs' future ones included) or a
    backfill of a route's range, each then maybe broken. (Hypothesis draws small integers and the
    first branches of one_of most: the right cases come first.)"""
    if draw(st.booleans()):
        near = st.floats(-3 * 86400, 3 * 86400).map(stamp_offset)
        time_header = draw(near) if draw(st.integers(0, 3)) < 3 else draw(instants.filter(lambda v: isinstance(v, str)))
        headers = {JOB: b"runonce-audit", TIME: header_value(time_header.encode("utf-8", "surrogatepass"))}
        if draw(st.integers(0, 4)) == 4:
            headers = draw(identity_headers())
        fields = {"since": draw(durations)} if draw(st.integers(0, 3)) < 3 else {}
        if draw(st.integers(0, 5)) == 5:
            fields[draw(st.text(max_size=6))] = draw(json_values)
        body = object_body(fields) if draw(st.integers(0, 5)) < 5 else draw(bodies)
        namespace = "project=fuzz-project&location=europe-west1"
        query = namespace if draw(st.integers(0, 4)) < 4 else draw(queries)
        return f"/v1/audit:run?{query}", headers, body
    known = st.sampled_from(sorted(MISSED_ROUTES["routes"]))
    odd = st.text(max_size=40).map(lambda text: quote(text.encode("utf-8", "surrogatepass"), safe=""))
    route = draw(known) if draw(st.integers(0, 9)) < 9 else draw(odd)
    good = st.builds(  # a range that is mostly right: past, a few fire times
        lambda end, length: {"from": stamp_offset(end - length), "to": stamp_offset(end)},
        st.floats(-86000, 0),
        st.floats(0, 6 * 3600),
    )
    odd_range = st.fixed_dictionaries({"from": instants, "to": instants})
    fields = draw(good) if draw(st.integers(0, 3)) < 3 else draw(odd_range)
    for name, values in (("dry_run", st.booleans() | json_leaves), ("timeout", durations)):
        if draw(st.integers(0, 2)) == 2:
            fields[name] = draw(values)
    if draw(st.integers(0, 5)) == 5:
        fields[draw(st.text(max_size=6))] = draw(json_values)
    body = object_body(fields) if draw(st.integers(0, 6)) < 6 else draw(bodies)
    return f"/v1/routes/{route}:backfill", {}, body


class MissedFuzz(Fuzz):
    """Every answer is JSON from the table; a backfill's 200 lists one row per fire time, each an
    outcome a delivery of it could have, none of a fire time after the answer; an audit's 200 catches
    up nothing after now. Keeps the run_ids each answer says it left recorded."""

    OUTCOMES = frozenset({"processed", "duplicate", "skipped", "not_started"})

    def __init__(self, server: ServerProcess):
        super().__init__(server)
        self.audits_done: set[str] = set()
        self.ran: dict[str, str] = {}  # backfill and catch-up run_id -> its outcome

    def send(self, request: tuple[str, dict[str, bytes], bytes]) -> None:
        target, headers, body = request
        response = self.http.post(target, headers=list(headers.items()), content=body)
        answered_at = datetime.now(UTC)
        self.statuses[response.status_code] += 1
        assert response.headers.get("content-type") == "application/json", (response.status_code, response.text)
        answer = response.json()
        if response.status_code == 200 and target.startswith("/v1/routes/"):
            assert set(answer) == {"route", "dry_run", "runs"}, answer
            for row in answer["runs"]:
                assert "why" not in row, row
                assert datetime.fromisoformat(row["schedule_time"]) <= answered_at, row  # never a time not due
                if answer["dry_run"]:
                    continue
                outcome = row["outcome"]
                assert outcome in self.OUTCOMES | {s for _, s in self.table}, row
                self.ran[row["run_id"]] = outcome
            return
        assert (response.status_code, answer.get("status")) in self.table, (response.status_code, answer)
        if response.status_code == 400:
            assert answer["error"]["field"], answer
        if response.status_code == 200:  # the audit
            self.audits_done.add(answer["run_id"])
            for row in answer.get("caught_up", []):
                assert datetime.fromisoformat(row["schedule_time"]) <= answered_at, row
                self.ran[row["run_id"]] = row["outcome"]


def serve_missed_routes(tmp_path: Path, db: Path) -> ServerProcess:
    """`runonce serve` with MISSED_ROUTES on a SQLite store at `db`."""
    env = {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES": json.dumps(MISSED_ROUTES),
        "RUNONCE_LOG_FORMAT": "json",
        "RUNONCE_STORE": f"sqlite:///{db}",
    }
    return start_server(env, tmp_path)


def stored_records(db: Path) -> dict[str, tuple[str, str]]:
    """run_id -> (route, status) in a SQLite store, read-only."""
    if not db.exists():
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute("SELECT run_id, route, status FROM runs")}


def test_the_audit_and_backfill_endpoints_answer_from_the_table_and_agree_with_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every audit run recorded completed was answered 200 (the endpoint refuses before claiming),
    every backfill or catch-up run answered processed or duplicate is recorded completed, and
    nothing else is recorded."""
    db = tmp_path / "runs.db"
    fuzz = MissedFuzz(serve_missed_routes(tmp_path, db))
    fuzz.session(missed_requests(), max(10, EXAMPLES // 6), capsys, "audit and backfill")
    records = stored_records(db)
    audits = {run_id for run_id, (route, status) in records.items() if route == "_audit" and status == "completed"}
    assert audits <= fuzz.audits_done, sorted(audits - fuzz.audits_done)[:3]
    for run_id, outcome in fuzz.ran.items():
        if outcome in ("processed", "duplicate"):
            assert records.get(run_id, (None, None))[1] == "completed", (run_id, outcome, records.get(run_id))
    unaccounted = {r for r, (route, _) in records.items() if route != "_audit"} - set(fuzz.ran)
    assert not unaccounted, sorted(unaccounted)[:3]


# -- the status endpoint ---------------------------------------------------------------------------


@st.composite
def status_queries(draw: st.DrawFn) -> str:
    """`GET /v1/status` with a `since` of any size and shape (durations, oversized numbers, any
    text) and maybe a `route`, known or not."""
    params = []
    if draw(st.integers(0, 4)) < 4:
        since = draw(st.one_of(durations.filter(lambda v: isinstance(v, str)), st.text(max_size=30)))
        params.append("since=" + quote(since.encode("utf-8", "surrogatepass"), safe=""))
    if draw(st.booleans()):
        route = draw(st.one_of(st.sampled_from(sorted(MISSED_ROUTES["routes"])), st.text(max_size=20)))
        params.append("route=" + quote(route.encode("utf-8", "surrogatepass"), safe=""))
    return "/v1/status?" + "&".join(params)


class StatusFuzz(Fuzz):
    """A 200 is the status report; anything else is a row of the table, a 400 naming its field."""

    def send(self, request: str) -> None:  # type: ignore[override]
        response = self.http.get(request)
        self.statuses[response.status_code] += 1
        assert response.headers.get("content-type") == "application/json", (response.status_code, response.text)
        answer = response.json()
        if response.status_code == 200:
            assert isinstance(answer.get("routes"), (list, dict)), answer
            return
        assert (response.status_code, answer.get("status")) in self.table, (request[:200], answer)
        if response.status_code == 400:
            assert answer["error"]["field"] in ("since", "route"), answer


def test_the_status_endpoint_answers_any_since_from_the_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fuzz = StatusFuzz(serve_missed_routes(tmp_path, tmp_path / "runs.db"))
    fuzz.session(status_queries(), max(10, EXAMPLES // 10), capsys, "status")
    assert fuzz.statuses[400] > 0 and fuzz.statuses[200] > 0, fuzz.statuses
