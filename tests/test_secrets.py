"""Credentials in RUNONCE_STORE never leave the process: not in a log line, an error, an answer of
/healthz, /readyz or /metrics, nor a command's output.

Every store URL form is covered (sqlite, firestore, spanner, redis, rediss; user:password@,
password only, a user alone, a token in the query, unescaped `/ ? # @` in a password), against the
real redis-server where a connection is made. The last test plants random secrets (Hypothesis;
RUNONCE_SECRETS_EXAMPLES, default 40; the seed is printed) and scans everything a run produces.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

from runonce.api.main import create_app
from runonce.cli import main
from runonce.settings import ConfigError, Settings, load_settings
from runonce.stores import check_store_url, open_store, parse_redis_url, redact_store_url
from runonce.targets.scripted import ScriptedTarget
from tests.support.api import JOB, ROUTES
from tests.support.backends import Server

SECRET = "s3cr3t-Hunter2"


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record's message and every attribute (the access log's fields travel as extras)."""
    return "\n".join(f"{record.getMessage()} {record.__dict__!r}" for record in caplog.records)


def error_of(url: str) -> str:
    try:
        load_settings(store=url)
    except ConfigError as exc:
        return str(exc)
    raise AssertionError(f"{url} was accepted")


@pytest.mark.parametrize(
    "url",
    [
        f"sqlite://user:{SECRET}@host/runs.db",
        f"sqlite:///runs.db?token={SECRET}",
        f"firestore://user:{SECRET}@project",
        f"firestore?token={SECRET}",
        f"spanner://user:{SECRET}@projects/my-project/instances/i1/databases/d1",
        f"spanner://projects/my-project/instances/i1/databases/d1?token={SECRET}",
        f"spanner://projects/my-project/instances/i1/databases/d1?table=runs&password={SECRET}",
        f"redis://:{SECRET}@host:port/0",
        f"redis://:{SECRET}@host:6379/db",
        f"redis://user:{SECRET}@host/0?token={SECRET}",
        f"redis://host/0?{SECRET}",
        f"redis://:{SECRET}@host/0?wait_replicas={SECRET}",
        f"redis://:pa/{SECRET}@host:6379/0?wait_replicas=99",  # an unescaped / in the password
        f"redis://:pa:{SECRET}@host:99999/0",
        f"redis://:{SECRET}?x@host:1_0/0",  # an unescaped ? in the password, a bad port
        f"rediss://user:{SECRET}@host:6380/0?ca_file=/ca.pem&token={SECRET}",
        f"redis2://user:{SECRET}@host",
        f"http://user:{SECRET}@host",
    ],
)
def test_a_refused_store_url_is_named_without_its_secrets(url: str) -> None:
    message = error_of(url)
    assert SECRET not in message and "RUNONCE_STORE" in message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:///runs.db", "sqlite:///runs.db"),
        ("sqlite:////var/lib/runonce/runs.db", "sqlite:////var/lib/runonce/runs.db"),
        ("firestore", "firestore"),
        (
            "spanner://projects/my-project/instances/i1/databases/d1?table=runs",
            "spanner://projects/my-project/instances/i1/databases/d1?table=runs",
        ),
        (f"redis://:{SECRET}@10.0.0.3:6379/0", "redis://***@10.0.0.3:6379/0"),
        (f"redis://default:{SECRET}@10.0.0.3/1?wait_replicas=1", "redis://***@10.0.0.3/1?wait_replicas=1"),
        (f"redis://{SECRET}@10.0.0.3", "redis://***@10.0.0.3"),
        (f"redis://:p@ss/{SECRET}?#@10.0.0.3:6379/0", "redis://***@10.0.0.3:6379/0"),
        (
            f"rediss://user:{quote(SECRET + '@:/', safe='')}@redis.internal:6380/0?ca_file=/etc/ca.pem",
            "rediss://***@redis.internal:6380/0?ca_file=/etc/ca.pem",
        ),
        (f"redis://10.0.0.3/0?token={SECRET}&wait_replicas=1", "redis://10.0.0.3/0?token=***&wait_replicas=1"),
    ],
)
def test_a_store_url_is_shown_with_its_credentials_and_unknown_options_hidden(url: str, shown: str) -> None:
    assert redact_store_url(url) == shown


def test_a_password_with_unescaped_delimiters_is_taken_whole() -> None:
    """Everything up to the last @ is the user-info, so no part of the password is read as a host,
    port, database or option (and so none can appear in a message about them)."""
    parsed = parse_redis_url(f"redis://user:p/a?s#s@{SECRET}@10.0.0.3:6380/2")
    assert (parsed.host, parsed.port, parsed.db) == ("10.0.0.3", 6380, 2)
    assert (parsed.username, parsed.password) == ("user", f"p/a?s#s@{SECRET}")
    assert SECRET not in repr(parsed)
    assert parse_redis_url(f"redis://:{quote(SECRET + ':@', safe='')}@h/0").password == SECRET + ":@"


def test_settings_never_print_the_store_url() -> None:
    settings = Settings(store=f"redis://:{SECRET}@10.0.0.3:6379/0")
    assert SECRET not in repr(settings) and SECRET not in str(settings)


def test_an_unreachable_store_is_reported_without_its_secrets() -> None:
    """The driver's own error (connection refused) reaches the caller scrubbed."""
    url = f"redis://runonce:{SECRET}@127.0.0.1:1/0"
    check_store_url(url)
    result = CliRunner().invoke(main, ["runs", "list"], env={"RUNONCE_STORE": url})
    assert result.exit_code == 1 and "claim store unavailable" in result.output
    assert SECRET not in result.output


@pytest.fixture
def redis_user(redis_server: Server) -> Iterator[tuple[str, str]]:
    """A user on the real redis-server that needs `SECRET`-based password: (name, password)."""
    name, password = f"runonce-{uuid.uuid4().hex[:8]}", f"{SECRET}-{uuid.uuid4().hex[:6]}"
    with redis.Redis(host="127.0.0.1", port=redis_server.port) as client:
        client.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*", "+@all")
        yield name, password
        client.execute_command("ACL", "DELUSER", name)


@asynccontextmanager
async def serving(url: str) -> Any:
    settings = Settings(routes=ROUTES, auth="none", store=url)
    target = ScriptedTarget()
    app = create_app(settings, targets={"etl": target, "bare": target})
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        yield client


async def answers_of(client: httpx.AsyncClient) -> list[httpx.Response]:
    """A delivery, its replay, a bad one, and every unauthenticated endpoint."""
    return [
        await client.post("/v1/routes/etl:run", headers=JOB),
        await client.post("/v1/routes/etl:run", headers=JOB),
        await client.post("/v1/routes/etl:run", headers={"X-CloudScheduler-JobName": "nightly"}),
        await client.get("/healthz"),
        await client.get("/readyz"),
        await client.get("/metrics"),
    ]


def shown(responses: list[httpx.Response]) -> str:
    return "\n".join(f"{r.status_code} {r.headers!r} {r.text}" for r in responses)


@pytest.mark.parametrize("form", ["user:password", "password only"])
async def test_a_redis_store_with_credentials_serves_and_shows_none_of_them(
    redis_user: tuple[str, str], redis_server: Server, caplog: pytest.LogCaptureFixture, form: str
) -> None:
    """`password only` authenticates the default user, which on the test server takes any password."""
    caplog.set_level(logging.DEBUG)
    name, password = redis_user
    user = name if form == "user:password" else ""
    url = f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{redis_server.port}/0"
    async with serving(url) as client:
        responses = await answers_of(client)
    assert [r.status_code for r in responses] == [200, 200, 400, 200, 200, 200]
    logged = everything_logged(caplog)
    assert f"store redis://***@127.0.0.1:{redis_server.port}/0" in logged  # the start-up line
    assert password not in logged and password not in shown(responses)


@pytest.mark.parametrize("form", ["wrong password", "unreachable"])
async def test_a_redis_store_that_refuses_or_is_down_answers_503_and_shows_no_secret(
    redis_user: tuple[str, str], redis_server: Server, caplog: pytest.LogCaptureFixture, form: str
) -> None:
    caplog.set_level(logging.DEBUG)
    name, _ = redis_user
    where = f"127.0.0.1:{redis_server.port}" if form != "unreachable" else "127.0.0.1:1"
    url = f"redis://{name}:{SECRET}@{where}/0"
    async with serving(url) as client:
        responses = await answers_of(client)
    assert [r.status_code for r in responses[:2]] == [503, 503]
    assert responses[4].status_code == 503 and responses[4].json() == {"status": "unavailable"}
    assert responses[3].json() == {"status": "ok"}
    assert SECRET not in everything_logged(caplog) and SECRET not in shown(responses)
    assert "not ready" in everything_logged(caplog)  # the reason is logged, for the operator


def test_store_init_and_runs_commands_show_no_secret(redis_user: tuple[str, str], redis_server: Server) -> None:
    name, password = redis_user
    for url in (
        f"redis://{name}:{password}@127.0.0.1:{redis_server.port}/0",
        f"redis://{name}:wrong-{password}@127.0.0.1:{redis_server.port}/0",
    ):
        for args in (["store", "init"], ["runs", "list"], ["runs", "show", "a" * 64]):
            result = CliRunner().invoke(main, args, env={"RUNONCE_STORE": url})
            assert password not in result.output, (args, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


# -- the planted secret ------------------------------------------------------------------------

SECRETS_EXAMPLES = int(os.environ.get("RUNONCE_SECRETS_EXAMPLES", "40"))
SECRETS_SEED = int(os.environ.get("RUNONCE_SECRETS_SEED", random.randrange(2**32)))

secret_text = st.text(st.characters(codec="ascii", exclude_characters="\x00\r\n"), min_size=8, max_size=24).filter(
    lambda s: s.strip() == s and len(set(s)) > 3
)


BASELINE_SECRET = "Qz7~k4Vx!w"
"""The secret of each URL form's baseline transcript (text every run shows, secret or not)."""


def placed(secret: str, form: int, port: int, escape: bool) -> str:
    """`secret` in one of a store URL's places (`escape`: percent-encoded, as a careful user writes it)."""
    written = quote(secret, safe="") if escape else secret
    return [
        f"redis://runonce:{written}@127.0.0.1:{port}/0",
        f"redis://:{written}@127.0.0.1:{port}/0",
        f"rediss://user:{written}@127.0.0.1:{port}/0?ca_file=/nonexistent.pem",
        f"redis://127.0.0.1:{port}/0?token={quote(secret, safe='')}",
        f"spanner://projects/my-project/instances/i1/databases/d1?token={quote(secret, safe='')}",
        f"sqlite://user:{written}@host/runs.db",
        f"firestore://:{written}@x",
    ][form]


def test_a_planted_secret_never_appears_in_any_line_or_answer(
    redis_server: Server, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No Google credentials, found at once (the metadata server is not asked): Spanner's one line.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    print(f"secrets fuzz: RUNONCE_SECRETS_SEED={SECRETS_SEED} examples={SECRETS_EXAMPLES}")
    handler = _Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    previous = root.level
    root.setLevel(logging.DEBUG)

    def transcript(url: str) -> str:
        """Every line logged and every message, answer and output shown for a store URL."""
        handler.lines.clear()
        seen = [redact_store_url(url)]
        try:
            settings = load_settings(store=url, routes=ROUTES, auth="none")
        except ConfigError as exc:
            seen.append(str(exc))
        else:
            seen.append(repr(settings))
            try:
                store = open_store(url, timeout_seconds=1)
            except Exception as exc:  # noqa: BLE001 - whatever it is, its words are scanned
                seen.append(f"{type(exc).__name__}: {exc}")
            else:
                seen.append(repr(store))
                try:
                    asyncio.run(_ping_and_close(store))
                except Exception as exc:  # noqa: BLE001
                    seen.append(f"{type(exc).__name__}: {exc}")
            for args in (["runs", "list"], ["store", "init"]):
                seen.append(CliRunner().invoke(main, args, env={"RUNONCE_STORE": url}).output)
            if url.startswith("redis://"):  # serve it: start-up, deliveries and every probe

                async def serve() -> None:
                    async with serving(url) as client:
                        seen.append(shown(await answers_of(client)))

                asyncio.run(serve())
        return "\n".join(seen + handler.lines)

    baselines: dict[tuple[int, bool, bool], str] = {}

    @seed(SECRETS_SEED)
    @settings(
        max_examples=SECRETS_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(secret=secret_text, form=st.integers(0, 6), escape=st.booleans(), down=st.booleans())
    def check(secret: str, form: int, escape: bool, down: bool) -> None:
        port = 1 if down else redis_server.port
        # What the same URL shows with another secret: a secret that is a piece of it anyway
        # ("retentio", of retention_seconds) proves nothing either way.
        if (form, escape, down) not in baselines:
            baselines[(form, escape, down)] = transcript(placed(BASELINE_SECRET, form, port, escape))
        baseline = baselines[(form, escape, down)]
        assume(secret not in baseline and quote(secret, safe="") not in baseline)
        url = placed(secret, form, port, escape)
        text = transcript(url)
        for leaked in {secret, quote(secret, safe="")}:
            assert leaked not in text, (url, text)

    try:
        check()
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


async def _ping_and_close(store: Any) -> None:
    try:
        await store.ping()
    finally:
        await store.close()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()} {record.__dict__!r}")
