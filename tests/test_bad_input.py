"""Bad input gets one line naming where, what and why, at every entry point, and changes nothing.

The routes file (`runonce serve` and every command that reads it), the settings, the store URL,
the delivery's identity headers and every command-line number.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runonce.cli import main
from runonce.routes import ROUTE_PATTERN_WORDS, RoutesConfig, parse_routes
from runonce.run.delivery import IDENTITY_HEADERS
from runonce.settings import ConfigError
from tests.support.api import JOB, Harness

LOG = "target: {type: log}"

# What a routes file may say that YAML or JSON accepts and runonce must refuse, with a word of the reason.
BAD_ROUTES = {
    "lateness 1e30": ("routes: {a: {target: {type: log}, max_lateness_seconds: 1e30}}", "whole number"),
    "lateness 10^21": (
        "routes: {a: {target: {type: log}, max_lateness_seconds: 1000000000000000000000}}",
        "beyond 64 bits",
    ),
    "lateness 2^62": (
        "routes: {a: {target: {type: log}, max_lateness_seconds: 4611686018427387904}}",
        "less than or equal to 315360000",
    ),
    "lateness inf": ("routes: {a: {target: {type: log}, max_lateness_seconds: .inf}}", "whole number"),
    "lateness in JSON": ('{"routes": {"a": {"target": {"type": "log"}, "max_lateness_seconds": 1e30}}}', "whole"),
    "window 1e300": (
        "routes: {a: {target: {type: log}, catch_up_window_seconds: 1.0e+300, catch_up: all}}",
        "whole number",
    ),
    "dispatches 10^18": (
        "routes: {a: {target: {type: log}, max_concurrent_dispatches: 1000000000000000000}}",
        "less than or equal to 10000",
    ),
    "lateness as text": ("routes: {a: {target: {type: log}, max_lateness_seconds: '60'}}", "whole number"),
    "lateness 1_000": ("routes: {a: {target: {type: log}, max_lateness_seconds: 1_000}}", "whole number"),
    "lateness 1:30": ("routes: {a: {target: {type: log}, max_lateness_seconds: 1:30}}", "whole number"),
    "lateness 0x10": ("routes: {a: {target: {type: log}, max_lateness_seconds: 0x10}}", "whole number"),
    "lateness !!int 0x10": ("routes: {a: {target: {type: log}, max_lateness_seconds: !!int 0x10}}", "decimal"),
    "lateness !!float 1_0": ("routes: {a: {target: {type: log}, max_lateness_seconds: !!float 1_0}}", "decimal"),
    "a 5000-digit integer": (f"routes: {{a: {{target: {{type: log}}, body: {{n: {'9' * 5000}}}}}}}", "64 bits"),
    "YAML nested 5000 deep": ("routes: " + "[" * 5000 + "]" * 5000, "nested more than"),
    "JSON nested 5000 deep": ('{"routes": ' + "[" * 5000 + "]" * 5000 + "}", "nested more than"),
    "body nested 100 deep": ("routes: {a: {target: {type: log}, body: " + "{a: " * 100 + "1" + "}" * 102, "nested"),
    "an alias to itself": ("routes: {a: {target: {type: log}, body: &b {x: [*b]}}}", "nested more than"),
    "aliases a billion deep": (
        "x: &a [1,1,1,1,1,1,1,1,1,1]\n"
        + "".join(f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i > 1 else '*a'] * 10)}]\n" for i in range(1, 10))
        + "routes: {a: {target: {type: log}}}\n",
        "more than",
    ),
    "a route twice": ("routes:\n  a:\n    target: {type: log}\n  a:\n    target: {type: http}\n", "'a' is given twice"),
    "a field twice": ("routes:\n  a:\n    target: {type: log}\n    overlap: skip\n    overlap: allow\n", "twice"),
    "a target field twice": ("routes: {a: {target: {type: log, type: http}}}", "'type' is given twice"),
    "routes twice in JSON": ('{"routes": {"a": {"target": {"type": "log"}}}, "routes": {}}', "given twice"),
    "a body key twice in JSON": ('{"routes": {"a": {"target": {"type": "log"}, "body": {"k": 1, "k": 2}}}}', "twice"),
    "a project number": (
        "routes: {a: {target: {type: log}, namespace: {project: '123456789012', location: us-central1}}}",
        "is a project number; use the project id",
    ),
    "an unknown target type": ("routes: {a: {target: {type: nosuch}}}", "unknown type 'nosuch'; use one of: 'log'"),
    "a target without type": ("routes: {a: {target: {url: 'https://x'}}}", "needs a type: one of 'log'"),
    "a NUL character": ("routes: {a: {target: {type: log}}}\x00", "not valid YAML or JSON"),
    "a lone surrogate": ("routes: {a: {target: {type: log}, body: {k: '\udcff'}}}", "not valid YAML or JSON"),
    "a set, which has no order": (
        "routes: {a: {target: {type: log}, body: {flags: !!set {--alpha, --beta}}}}",
        "field 'body.flags': line 1, column 49: this value reads as a set but cannot be built (a set has no order",
    ),
    "a key that is a newline, over a date that is none": ("? '\n\n  '\n: 0000-00-00\n", "at '\\n': line 4, column 3"),
    "a tab in indentation": ("routes:\n\ta:\n\t\ttarget: {type: log}\n", "not valid YAML or JSON"),
    # a key whose lines are commented out is null: refused, never taken for the default
    "an empty lateness limit": (
        "routes:\n  a:\n    target: {type: log}\n    max_lateness_seconds:\n    # 3600\n",
        "route 'a': max_lateness_seconds: is empty (null); a value is needed here: give it a value",
    ),
    "an empty namespace": (
        "routes: {a: {target: {type: log}, namespace: }}",
        "route 'a': namespace: is empty (null)",
    ),
    "an empty namespace location": (
        "routes: {a: {target: {type: log}, namespace: {project: my-project, location: }}}",
        "route 'a': field 'namespace': location: is empty (null); a value is needed here: give it a value (an "
        "empty key in YAML is null)",
    ),
}


@pytest.mark.parametrize("name", list(BAD_ROUTES))
def test_a_bad_routes_file_is_refused_in_one_line(name: str) -> None:
    text, reason = BAD_ROUTES[name]
    with pytest.raises(ConfigError) as refused:
        parse_routes(text, "routes file r.yaml")
    message = str(refused.value)
    assert message.startswith("routes file r.yaml: ") and "\n" not in message and reason in message, message


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_bytes(b"routes:\n  a:\n    target: {type: log}\n    body: {city: \xe9vry}\n")
    result = invoke(["key", "--route", "a", "--job", "j", "--schedule-time", "2026-01-01T00:00:00Z"], path)
    assert (
        one_line_error(result)
        == f"Error: routes file {path}: not UTF-8 text (byte 0xe9 at offset 54); save it as UTF-8"
    )


def test_numbers_mean_what_they_say_in_decimal() -> None:
    """YAML 1.1 reads 017 as octal 15 and 1:30 as 90; runonce reads them as JSON and YAML 1.2 do."""
    routes = parse_routes("routes: {a: {target: {type: log}, max_lateness_seconds: 017, body: {t: 1:30}}}", "r")
    assert routes["a"].max_lateness_seconds == 17 and routes["a"].body == {"t": "1:30"}
    assert parse_routes("routes: {a: {target: {type: log}, body: {f: 1e3, g: -2.5}}}", "r")["a"].body == {
        "f": 1000.0,
        "g": -2.5,
    }


def test_a_yaml_merge_is_not_a_repeated_key() -> None:
    text = (
        "routes:\n  a: &base {target: {type: log}, overlap: allow}\n  b:\n    <<: *base\n    max_lateness_seconds: 9\n"
    )
    assert parse_routes(text, "r")["b"].max_lateness_seconds == 9


def invoke(args: list[str], routes: Path | None, **env: str) -> Result:
    environment = {"RUNONCE_AUTH": "none", "RUNONCE_STORE": "sqlite:///unused-by-this-test.db", **env}
    if routes is not None:
        environment["RUNONCE_ROUTES_FILE"] = str(routes)
    return CliRunner().invoke(main, args, env=environment)


def one_line_error(result: Result) -> str:
    """The command's whole output, which must be one error line and no traceback."""
    assert result.exit_code in (1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


COMMANDS_THAT_READ_ROUTES = [
    ["serve", "--port", "0"],
    ["key", "--route", "a", "--job", "j", "--schedule-time", "2026-01-01T00:00:00Z"],
    ["audit", "--since", "1h"],
    ["backfill", "a", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T01:00:00Z", "--dry-run"],
]


@pytest.mark.parametrize("command", COMMANDS_THAT_READ_ROUTES, ids=lambda c: c[0])
@pytest.mark.parametrize("name", ["lateness 10^21", "YAML nested 5000 deep", "a route twice", "a project number"])
def test_every_command_that_reads_routes_refuses_a_bad_file_in_one_line(
    command: list[str], name: str, tmp_path: Path
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(BAD_ROUTES[name][0])
    line = one_line_error(invoke(command, path))
    assert line.startswith(f"Error: routes file {path}: ") and BAD_ROUTES[name][1] in line, line


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["runs", "list"], ["store", "init"]], ids=str)
@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("RUNONCE_LEASE_SECONDS", "1e30", "RUNONCE_LEASE_SECONDS: Input should be less than or equal to"),
        ("RUNONCE_LEASE_SECONDS", "1_000", "must be a number in ASCII digits"),
        ("RUNONCE_DISPATCH_TIMEOUT_SECONDS", "٣٠", "must be a number in ASCII digits"),
        ("RUNONCE_STORE_TIMEOUT_SECONDS", "nan", "must be a number in ASCII digits"),
        ("RUNONCE_OIDC_CLOCK_SKEW_SECONDS", "\uff11\uff10", "must be a number in ASCII digits"),
        ("RUNONCE_STORE", "sqlite://relative.db", "sqlite:////var/lib/runonce.db an absolute path"),
        ("RUNONCE_STORE", "redis://h:\uff16\uff13\uff17\uff19/0", "the port in a redis:// URL must be a number"),
        ("RUNONCE_STORE", "redis://h/٣", "database number in a redis:// URL must be an integer"),
    ],
)
def test_bad_settings_are_one_line_at_every_command(
    command: list[str], variable: str, value: str, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes: {{a: {{{LOG}}}}}")
    line = one_line_error(invoke(command, path, **{variable: value}))
    assert line.startswith("Error: bad settings: ") and reason in line, line


def test_spanner_without_credentials_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    result = invoke(
        ["runs", "list"],
        None,
        RUNONCE_STORE="spanner://projects/my-project/instances/i1/databases/d1",
        GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "absent.json"),
    )
    line = one_line_error(result)
    assert (
        line.startswith("Error: RUNONCE_STORE=spanner://… found no Google credentials")
        and "SPANNER_EMULATOR_HOST" in line
    )


# -- every pattern and tagged union in words ------------------------------------------------------


def _walk(schema: Any) -> Any:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _walk(value)


def test_every_pattern_of_the_routes_file_has_words() -> None:
    """A pattern a new field adds must say in words what it accepts, or its errors show the expression."""
    schema = RoutesConfig.model_json_schema()
    patterns = {node["pattern"] for node in _walk(schema) if isinstance(node.get("pattern"), str)}
    assert patterns and patterns <= set(ROUTE_PATTERN_WORDS), patterns - set(ROUTE_PATTERN_WORDS)


def test_every_tagged_union_names_its_allowed_values() -> None:
    schema = RoutesConfig.model_json_schema()
    unions = [node for node in _walk(schema) if "discriminator" in node]
    assert unions
    for union in unions:
        tag = union["discriminator"]["propertyName"]
        assert tag == "type"  # the one union the messages name (routes.py `_in_words`)
    with pytest.raises(ConfigError) as refused:
        parse_routes("routes: {a: {target: {type: nosuch}}}", "r")
    message = str(refused.value)
    assert "Input tag" not in message and "'cloud_run_job'" in message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("routes: {Etl: {target: {type: log}}}", "is not a route name"),
        ("routes: {a: {target: {type: log}, allowed_callers: [nobody]}}", "is not an email address"),
        ("routes: {a: {target: {type: log}, namespace: {project: My_Project, location: l}}}", "is not a project id"),
        ("routes: {a: {target: {type: log}, namespace: {project: my-project, location: US}}}", "is not a location"),
        ("routes: {a: {target: {type: log}, job: 'a b'}}", "is not an id of letters, digits"),
    ],
)
def test_each_pattern_mistake_says_what_is_wrong_in_words(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_routes(text, "r")
    message = str(refused.value)
    assert reason in message and "does not match" not in message and "^" not in message, message


# -- deliveries --------------------------------------------------------------------------------

TASK = {"X-CloudTasks-QueueName": "exports", "X-CloudTasks-TaskName": "t-1", "X-CloudTasks-TaskRetryCount": "0"}


@pytest.mark.parametrize("header", IDENTITY_HEADERS)
async def test_a_repeated_identity_header_is_refused_naming_it(api: Harness, header: str) -> None:
    base = TASK | {"X-CloudTasks-TaskExecutionCount": "0"} if header.startswith("X-CloudTasks") else JOB
    value = base[header]
    headers = [(name, text) for name, text in base.items()] + [(header.lower(), value)]
    answer = await api.deliver(headers=headers)  # type: ignore[arg-type]
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["field"] == header and "more than once" in answer.json()["error"]["message"]
    assert api.target.dispatched == [] and await api.store.list(api.clock()) == []


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("project=123456789012", "is a project number; use the project id"),
        ("project=My_Project", "is not a project id"),
        ("location=US", "is not a location"),
    ],
)
async def test_a_bad_namespace_is_explained_in_words(api: Harness, query: str, reason: str) -> None:
    answer = await api.client.post(f"/v1/routes/etl:run?{query}", headers=JOB)
    message = answer.json()["error"]["message"]
    assert answer.status_code == 400 and reason in message and "^" not in message, message


async def test_a_bad_job_header_is_explained_in_words(api: Harness) -> None:
    answer = await api.deliver(headers=JOB | {"X-CloudScheduler-JobName": "a.b"})
    assert answer.status_code == 400 and "letters, digits, hyphens and underscores" in answer.json()["error"]["message"]


def test_key_refuses_a_queue_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes: {{a: {{{LOG}}}}}")
    result = invoke(["key", "--route", "a", "--queue", "exports\n", "--task", "t"], path)
    assert result.exit_code == 2 and "--queue" in result.output


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "reason"),
    [
        ("--lease-seconds", "-5", "--lease-seconds: Input should be greater than 0"),
        ("--lease-seconds", "0", "--lease-seconds: Input should be greater than 0"),
        ("--lease-seconds", "nan", "--lease-seconds: must be a number in ASCII digits"),
        ("--lease-seconds", "inf", "--lease-seconds: must be a number in ASCII digits"),
        ("--lease-seconds", "1e30", "--lease-seconds: Input should be less than or equal to"),
        ("--lease-seconds", "10", "--lease-seconds (10) must be at least RUNONCE_DISPATCH_TIMEOUT_SECONDS"),
        ("--retention-seconds", "\u0663", "--retention-seconds: must be a number in ASCII digits"),
        ("--retention-seconds", "100", "--retention-seconds (100) must be above RUNONCE_LEASE_SECONDS (300)"),
    ],
)
def test_lint_validates_its_lease_and_retention_as_the_server_does(
    flag: str, value: str, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes: {{a: {{{LOG}}}}}")
    result = invoke(["lint", str(path), f"{flag}={value}"], None)
    assert result.exit_code == 2 and reason in result.output and "Traceback" not in result.output, result.output


def test_lint_says_when_its_flag_and_the_setting_disagree(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes: {{a: {{{LOG}}}}}")
    result = CliRunner().invoke(
        main, ["lint", str(path), "--lease-seconds", "120"], env={"RUNONCE_LEASE_SECONDS": "100"}
    )
    assert result.exit_code == 0, result.output
    assert "--lease-seconds 120 differs from RUNONCE_LEASE_SECONDS (100, set here)" in result.output
    agreeing = CliRunner().invoke(main, ["lint", str(path), "--lease-seconds", "300"], env={})
    assert agreeing.exit_code == 0 and "differs" not in agreeing.output


@pytest.mark.parametrize("content", ["tables", "not sqlite", "empty"])
@pytest.mark.parametrize("args", [["runs", "list"], ["runs", "show", "a" * 64], ["runs", "release", "a" * 64]], ids=str)
def test_runs_commands_refuse_a_file_that_is_not_a_runonce_store_and_change_nothing(
    tmp_path: Path, content: str, args: list[str]
) -> None:
    import sqlite3

    path = tmp_path / "app.db"
    if content == "tables":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        conn.close()
    elif content == "not sqlite":
        path.write_text("name,amount\nx,1\n")
    else:
        path.write_bytes(b"")
    before = path.read_bytes()
    names_before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, args, env={"RUNONCE_STORE": f"sqlite:///{path}"})
    line = one_line_error(result)
    assert line.startswith(f"Error: {path} is not a runonce store") and "nothing was changed" in line, line
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == names_before


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--after", "9999-06-01T00:00:00Z"], "runonce schedules nothing at or after 9999-01-01T00:00:00Z"),
        (["--after", "9999-12-31T00:00:00Z"], "runonce schedules nothing at or after 9999-01-01T00:00:00Z"),
    ],
)
def test_schedule_next_refuses_a_start_past_the_last_scheduled_instant(args: list[str], reason: str) -> None:
    result = CliRunner().invoke(main, ["schedule", "next", "0 0 * * *", *args])
    assert result.exit_code == 2 and reason in result.output


@pytest.mark.parametrize("expr", ["0 0 * * *", "0 0 29 2 *", "every 24 hours"])
def test_schedule_next_stops_at_the_last_scheduled_instant_and_says_so(expr: str) -> None:
    result = CliRunner().invoke(main, ["schedule", "next", expr, "--after", "9990-01-01T00:00:00Z", "--count", "10000"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    fires = [line for line in result.stdout.splitlines() if line and not line.startswith("#")]
    assert fires and all(line < "9999" for line in fires), fires[-3:]
    assert "the end of the times runonce schedules" in result.stderr


def test_schedule_next_starts_at_1970_and_says_so() -> None:
    result = CliRunner().invoke(
        main, ["schedule", "next", "0 0 1 1 *", "--after", "1900-01-01T00:00:00Z", "--count", "1"]
    )
    assert result.stdout.strip() == "1970-01-01T00:00:00+00:00" and "starting there" in result.stderr


def test_the_command_line_window_is_the_delivery_parsers() -> None:
    from runonce.run.delivery import EARLIEST_SCHEDULE_TIME, LATEST_SCHEDULE_TIME
    from runonce.schedules.cli import FIRST_SCHEDULED, LAST_SCHEDULED

    assert (FIRST_SCHEDULED, LAST_SCHEDULED) == (EARLIEST_SCHEDULE_TIME, LATEST_SCHEDULE_TIME)


# Every number a user types: Python's int()/float() take other scripts' digits, fullwidth digits
# and underscores; runonce takes ASCII digits only.
NOT_ASCII = ["\u0665", "\uff15", "\u00b2", "1_0", "\u0661\u0660"]


@pytest.mark.parametrize("digits", NOT_ASCII)
@pytest.mark.parametrize(
    "args",
    [
        ["schedule", "next", "{} * * * *"],
        ["schedule", "next", "*/{} * * * *"],
        ["schedule", "next", "every {} minutes"],
        ["schedule", "next", "0 0 * * *", "--count", "{}"],
        ["runs", "list", "--limit", "{}"],
        ["serve", "--port", "{}"],
        ["serve", "--workers", "{}"],
        ["audit", "--since", "{}h"],
        ["lint", "routes.yaml", "--lease-seconds", "{}00"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_every_number_on_the_command_line_is_ascii_digits(digits: str, args: list[str], tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(
        "routes: {a: {target: {type: log}, job: j, schedule: '* * * * *',"
        " namespace: {project: my-project, location: l}}}"
    )
    filled = [arg.replace("{}", digits).replace("routes.yaml", str(path)) for arg in args]
    result = invoke(filled, path)
    assert result.exit_code in (1, 2), (filled, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


@pytest.mark.parametrize("digits", NOT_ASCII)
def test_a_retry_after_in_other_digits_is_ignored(digits: str) -> None:
    from runonce.targets.base import parse_retry_after

    assert parse_retry_after(digits) is None


@pytest.mark.parametrize("header", IDENTITY_HEADERS)
def test_a_repeated_identity_header_is_refused_in_httpx_headers_too(header: str) -> None:
    """The parser takes Starlette's headers (getlist) and httpx's (get_list) alike."""
    import httpx

    from runonce.errors import InvalidDelivery
    from runonce.run.delivery import parse_delivery

    base = TASK | {"X-CloudTasks-TaskExecutionCount": "0"} if header.startswith("X-CloudTasks") else JOB
    headers = httpx.Headers([*base.items(), (header.upper(), base[header])])
    with pytest.raises(InvalidDelivery) as refused:
        parse_delivery("etl", headers, ("", ""), datetime(2026, 10, 16, 12, tzinfo=UTC), timedelta(0))
    assert refused.value.field == header and "more than once" in refused.value.reason
    parse_delivery("etl", httpx.Headers(base), ("", ""), datetime(2026, 10, 16, 12, tzinfo=UTC), timedelta(0))


async def test_a_bad_queue_names_both_accepted_forms(api: Harness) -> None:
    answer = await api.deliver(headers=TASK | {"X-CloudTasks-QueueName": "a.b"})
    message = answer.json()["error"]["message"]
    assert answer.status_code == 400 and "a queue id: letters, digits and hyphens" in message
    assert "(projects/PROJECT/locations/LOCATION/queues/QUEUE)" in message


@pytest.mark.parametrize("count", ["\u0663", "1_0", "-1", "99999999999999999999"])
async def test_a_tasks_counter_in_anything_but_ascii_digits_is_refused(api: Harness, count: str) -> None:
    answer = await api.deliver(headers=TASK | {"X-CloudTasks-TaskRetryCount": count.encode()})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].endswith("must be a count of ASCII digits from 0 to 9223372036854775807")


async def test_a_bad_part_of_a_queue_resource_name_is_explained_in_words(api: Harness) -> None:
    queue = "projects/my-project/locations/US/queues/q"
    answer = await api.deliver("bare", headers=TASK | {"X-CloudTasks-QueueName": queue})
    message = answer.json()["error"]["message"]
    assert answer.status_code == 400 and "the location in the queue's resource name is not a location" in message
