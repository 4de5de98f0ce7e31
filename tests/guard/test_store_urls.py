"""One reading of a store URL: the server and runonce-guard accept the same URLs (the guard less
SQLite), refuse the rest with the same words, read the same parts, and never show a password.

Both import `runonce_store_url` (guard/runonce_store_url/); these tests hold them to it from the
outside, through each side's own entry points: the server's settings and commands (`serve`,
`lint`, `store init`, `status`) and the guard's settings and command line.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from runonce.cli import main as runonce_main
from runonce.settings import ConfigError, load_settings
from runonce.stores import parse_redis_url as server_parse_redis
from runonce_guard import GuardSettings
from runonce_guard.cli import main as guard_main
from runonce_guard.errors import GuardConfigError
from runonce_guard.stores.urls import parse_redis_url as guard_parse_redis

SECRET = "pW9-Hunter2-x"
SPANNER = "spanner://projects/my-project/instances/main/databases/jobs"

CORPUS = [
    # every scheme, well formed
    "firestore",
    "sqlite:///runs.db",
    "sqlite:////var/lib/runonce/runs.db",
    SPANNER,
    f"{SPANNER}?table=steps_2",
    "redis://10.0.0.3:6379/0",
    "redis://localhost",
    "rediss://redis.internal:6380/1?ca_file=/etc/ca.pem&wait_replicas=1",
    # passwords with unencoded delimiters, users, percent signs
    "redis://:p/a#s?s@10.0.0.3:6379/0",
    "redis://user:p@ss@word@10.0.0.3/2",
    "redis://:100%sure@10.0.0.3/0",
    "redis://:pa%2Fss@10.0.0.3/0",
    "redis://default:a?b=c&d@10.0.0.3:6379/0?wait_replicas=2",
    "rediss://user:#hash#@redis.internal:6380/0?ca_file=/ca.pem",
    "redis://justauser@10.0.0.3",
    # IPv6 hosts
    "redis://[::1]:6379/0",
    "redis://:pw@[2001:db8::7]/3",
    "redis://[::1/0",
    "redis://[::1]:port/0",
    # refused: every rule, every scheme
    "memory",
    "memory://",
    "postgres://db/runs",
    "FIRESTORE",
    "firestore://project",
    "firestore?x=1",
    "sqlite://runs.db",
    "sqlite:///",
    "sqlite:///runs.db?mode=ro",
    "spanner://projects/p/instances/i",
    f"{SPANNER}?table=1x",
    f"{SPANNER}?tabel=x",
    f"{SPANNER}#frag",
    "redis:///0",
    "redis://h:0/0",
    "redis://h:65536/0",
    "redis://h:\uff16\uff13\uff17\uff19/0",
    "redis://h/\u0663",
    "redis://h:6379/0?ca_file=/x",
    "redis://h:6379/0?wait_replicas=17",
    "redis://h:6379/0#frag",
    "redis:/:pw@h:6379/0",
    "redis:pw@h",
    "redis//:pw@h",
    "REDIS://h",
    "redis://h:" + "9" * 5000 + "/0",
    "redis://h/" + "9" * 5000,
    "redis://h/0?wait_replicas=" + "9" * 5000,
    "x" * 5000,
    "redis://h]:6379/0",
]


def server_answer(url: str) -> str | None:
    """None when the server takes `url`, else its refusal without the setting's prefix."""
    try:
        load_settings(store=url)
    except ConfigError as exc:
        return str(exc).removeprefix("bad settings: RUNONCE_STORE: ")
    return None


def guard_answer(url: str) -> str | None:
    try:
        GuardSettings.from_env({"RUNONCE_STORE": url})
    except GuardConfigError as exc:
        return str(exc).removeprefix("RUNONCE_STORE: ")
    return None


@pytest.mark.parametrize("url", CORPUS, ids=range(len(CORPUS)))
def test_the_server_and_the_guard_accept_and_refuse_alike_with_the_same_words(url: str) -> None:
    server, guard = server_answer(url), guard_answer(url)
    if url.startswith("sqlite:") and server is None:
        assert guard is not None and "not a store the guard can use" in guard
        return
    assert server == guard
    if server is not None:
        assert "Traceback" not in server and "\n" not in server and len(server) < 400, server


@pytest.mark.parametrize("url", [u for u in CORPUS if u.startswith(("redis", "rediss")) and server_answer(u) is None])
def test_both_read_the_same_parts(url: str) -> None:
    assert server_parse_redis(url) == guard_parse_redis(url)
    for field in ("host", "port", "db", "username", "password", "tls", "ca_file", "wait_replicas"):
        assert getattr(server_parse_redis(url), field) == getattr(guard_parse_redis(url), field), field


def test_a_password_with_delimiters_is_read_whole_by_both() -> None:
    """The issue the guard had: a password holding / # ? refused as "a host is required"."""
    url = f"redis://:{SECRET}/a#b?c@10.0.0.3:6379/4"
    for parse in (server_parse_redis, guard_parse_redis):
        parsed = parse(url)
        assert (parsed.host, parsed.port, parsed.db, parsed.password) == ("10.0.0.3", 6379, 4, f"{SECRET}/a#b?c")
    assert guard_answer(url) is None and server_answer(url) is None


# A secret planted in each position of a URL that is then refused: user, password (with and
# without delimiters, percent-encoded), host, path, query, fragment; every scheme; mistyped ones.
PLANTED = {
    "user": [f"redis://{SECRET}:pw@h:99999/0", f"sqlite://{SECRET}:pw@h/x", f"postgres://{SECRET}:pw@db/x"],
    "password": [
        f"redis://:{SECRET}@h:6379/zero",
        f"redis://:a/{SECRET}#x?y@h:1_0/0",
        f"rediss://u:{quote(SECRET + '@/', safe='')}@h:6380/0?ca_file=/c&token=1",
        f"redis:/:{SECRET}@h:6379/0",
        f"redis//:{SECRET}@h",
        f"REDIS://:{SECRET}@h",
        f"spanner://u:{SECRET}@projects/my-project/instances/i/databases/d",
        f"firestore://u:{SECRET}@p",
        f"memory://:{SECRET}@",
    ],
    "host": [f"redis://:pw@{SECRET}:port/0", f"postgres://{SECRET}/x", f"redis:/{SECRET}", f"mysql://{SECRET}"],
    "path": [f"redis://h/{SECRET}", f"spanner://projects/{SECRET}/x", f"sqlite:///{SECRET}?x=1", f"http://h/{SECRET}"],
    "query": [f"redis://h/0?token={SECRET}", f"{SPANNER}?password={SECRET}", f"firestore?token={SECRET}"],
    "fragment": [f"redis://h:6379/0#{SECRET}", f"{SPANNER}#{SECRET}", f"sqlite:///x#{SECRET}", f"redis://h/x#{SECRET}"],
}
PLANTED_URLS = [(position, url) for position, urls in PLANTED.items() for url in urls]


@pytest.mark.parametrize(("position", "url"), PLANTED_URLS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(PLANTED_URLS)])
def test_a_refused_url_never_shows_a_secret_in_any_position(
    position: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    server, guard = server_answer(url), guard_answer(url)
    assert server is not None and guard is not None, (server, guard)
    assert SECRET not in server and SECRET not in guard

    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  r:\n    target: {type: log}\n")
    env = {"RUNONCE_STORE": url, "RUNONCE_ROUTES_FILE": str(routes)}
    for command in (["serve"], ["lint", str(routes)], ["store", "init"], ["status"]):
        result = CliRunner().invoke(runonce_main, command, env=env)
        assert result.exit_code != 0 and SECRET not in result.output, (command, result.output[-300:])
        assert "Traceback" not in result.output

    for name in [k for k in os.environ if k.startswith("RUNONCE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RUNONCE_STORE", url)
    monkeypatch.setenv("IDEMPOTENCY_KEY", "run-1")
    for argv in (["store", "init"], ["status", "--step", "s"], ["run", "--step", "s", "--", "true"]):
        assert guard_main(argv) == 78
        captured = capsys.readouterr()
        assert SECRET not in captured.err + captured.out and captured.err.count("\n") == 1, captured.err
