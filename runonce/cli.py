"""`runonce` command line: serve, inspect and release runs, compute run_ids."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

import click
import httpx

from runonce import __version__
from runonce.errors import InvalidDelivery
from runonce.logs import configure_logging, uvicorn_log_config
from runonce.routes import Route, load_routes
from runonce.run.delivery import check_run_id, parse_delivery, parse_namespace
from runonce.run.sources import parse_event
from runonce.schedules.cli import AsciiIntRange, InstantType, schedule
from runonce.settings import ConfigError, Settings, load_settings
from runonce.status import status_command
from runonce.stores import StoreUnavailable, backend_for, open_store
from runonce.stores.memory import MemoryStore

T = TypeVar("T")


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _no_store(settings: Settings) -> str | None:
    """Why there is nothing to read: the SQLite file named by RUNONCE_STORE does not exist (nothing
    has run, and reading must not create it). None when the store may be opened."""
    path = settings.store.removeprefix("sqlite:///")
    if settings.store.startswith("sqlite:///") and not os.path.exists(path):
        return f"no store at {path} yet (nothing has run with RUNONCE_STORE={settings.store})"
    return None


def _not_a_store(settings: Settings) -> str | None:
    """Why the existing SQLite file named by RUNONCE_STORE is not runonce's (no `runs` table, or not
    SQLite at all), or None. Read only: opening it as a store would create the tables in it."""
    path = settings.store.removeprefix("sqlite:///")
    if not settings.store.startswith("sqlite:///") or not os.path.isfile(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)) as conn:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
    except sqlite3.Error as exc:
        return f"{path} is not a runonce store ({exc}): check RUNONCE_STORE; nothing was changed"
    if found is None:
        return f"{path} is not a runonce store (it has no runs table): check RUNONCE_STORE; nothing was changed"
    return None


def _with_store(settings: Settings, use: Callable[[Any], Awaitable[T]], *, create: bool = False) -> T:
    """Run `use(store)` on the configured store, which must already exist unless `create` (a SQLite
    file is created only by `store init`: `runs` commands read, or release what exists)."""

    missing = None if create else _no_store(settings) or _not_a_store(settings)
    if missing:
        raise click.ClickException(missing)

    async def go() -> T:
        store = open_store(
            settings.store,
            timeout_seconds=settings.store_timeout_seconds,
            firestore_project=settings.firestore_project,
            firestore_database=settings.firestore_database,
            firestore_collection=settings.firestore_collection,
        )
        try:
            return await use(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except StoreUnavailable as exc:
        raise click.ClickException(f"claim store unavailable: {exc}") from exc
    except ConfigError as exc:  # e.g. Firestore without credentials
        raise click.ClickException(str(exc)) from exc


def _now() -> datetime:
    return datetime.now(UTC)


@click.group()
@click.version_option(__version__, prog_name="runonce")  # runonce/__init__.py: the one place it is written
def main() -> None:
    """runonce: one downstream execution per scheduled run."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=AsciiIntRange(0, 65535), default=None, help="Port to listen on  [default: $PORT or 8080]")
@click.option("--workers", type=AsciiIntRange(min=1), default=1, show_default=True, help="Worker processes.")
def serve(host: str, port: int | None, workers: int) -> None:
    """Run the proxy (uvicorn)."""
    with _collector_paused_for_start_up():
        import uvicorn  # deferred (tests/test_cold_start.py)

        from runonce.api.server import DrainingServer  # deferred (tests/test_cold_start.py)

        app, options = _start_up(host, port, workers)
    if workers > 1:  # each worker drains its connections; dispatches get uvicorn's timeout only
        uvicorn.run(app, workers=workers, factory=True, **options)
        return
    DrainingServer(uvicorn.Config(app, **options), on_exit=app.state.drain).run()


def _start_up(host: str, port: int | None, workers: int) -> tuple[Any, dict[str, Any]]:
    """The app (or, with several workers, its factory's name) and uvicorn's options."""
    from runonce.api.main import checked_routes, create_app  # deferred (tests/test_cold_start.py)
    from runonce.auth.callers import check_auth_config  # deferred (tests/test_cold_start.py)

    settings = _settings()
    configure_logging(settings.log_format)
    port = port if port is not None else _port_from_environment()
    try:
        if workers == 1:
            app: Any = create_app(settings)
        else:
            # fail here, once, rather than in every worker process
            routes = checked_routes(settings)
            check_auth_config(settings, {name: route.allowed_callers for name, route in routes.items()})
            app = "runonce.api.main:app_from_environment"
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_config": uvicorn_log_config(settings.log_format),
        "access_log": False,  # runonce writes its own access line (runonce/api/access_log.py)
        # after the grace, uvicorn cancels what is left; Cloud Run sends SIGKILL 10 s after SIGTERM
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds + 1,
    }
    return app, options


@contextmanager
def _collector_paused_for_start_up() -> Iterator[None]:
    """Start-up makes ~100,000 objects (modules, routes, models) that live as long as the process,
    and ~2,000 of garbage. Scanning them as they are made, then once more before freezing them,
    cost ~0.1 s of a cold start's 0.55 s (bench/README.md). So: no collection while they are made; then
    freeze them all out of the collector's scans (the little garbage among them stays), and let the
    young generation grow before a pass, since a delivery leaves little cyclic garbage (-0.1 ms CPU
    per delivery, `bench/bench_variant.py`). If start-up fails, the collector is back as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    except BaseException:
        if was_enabled:
            gc.enable()
        raise
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    if was_enabled:
        gc.enable()


def _port_from_environment() -> int:
    """$PORT (Cloud Run sets it), else 8080."""
    text = os.environ.get("PORT", "8080")
    if not (re.fullmatch(r"[0-9]{1,5}", text) and 1 <= int(text) <= 65535):
        shown = repr(text) if len(text) <= 20 else f"a value of {len(text)} characters"
        raise click.ClickException(f"PORT must be a port number from 1 to 65535, got {shown}")
    return int(text)


@main.group()
def runs() -> None:
    """Inspect and release run records in the configured store."""


@runs.command("show")
@click.argument("run_id")
def runs_show(run_id: str) -> None:
    """Print one run record as JSON."""
    _check_run_id(run_id)
    record = _with_store(_settings(), lambda store: store.get(run_id, _now()))
    if record is None:
        raise click.ClickException(f"no run {run_id} (never seen, or past its retention)")
    click.echo(json.dumps(record.to_json(), indent=2))


@runs.command("list")
@click.option("--route", help="Only runs of this route.")
@click.option(
    "--status", type=click.Choice(["in_progress", "completed", "failed", "skipped"]), help="Only runs in this state."
)
@click.option("--limit", type=AsciiIntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
def runs_list(route: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """List recent runs, newest first."""
    settings = _settings()
    if route is not None and (settings.routes_file or settings.routes):
        # A misspelt route would list nothing, as if it never ran. Without routes configured (the
        # store read from elsewhere than the service) the records alone say which routes there are.
        _configured_route(settings, route)
    missing = _no_store(settings)
    if missing:
        click.echo(missing, err=True)  # an empty list, said so: not an error
        return
    records = _with_store(settings, lambda store: store.list(_now(), route=route, status=status, limit=limit))
    if not as_json:
        click.echo(_row("RUN_ID", "STATUS", "ROUTE", "JOB", "SCHEDULE_TIME/TASK", "RESOURCE"))
    for record in records:
        if as_json:
            click.echo(json.dumps(record.to_json()))
        else:
            resource = (record.target or {}).get("resource") or "-"
            when = record.schedule_time or record.task or "-"
            click.echo(_row(record.run_id, record.status, record.route, record.job, when, resource))


@main.group()
def store() -> None:
    """Set up the claim store named by RUNONCE_STORE."""


@store.command("init")
def store_init() -> None:
    """Create what the store needs (idempotent: a second run changes nothing), or say what to do."""

    settings = _settings()
    scheme = backend_for(settings.store).scheme
    if scheme == "firestore":
        from runonce.stores.firestore import index_commands  # deferred: only a Firestore store loads its client

        project = settings.firestore_project or "PROJECT"
        where = f"--database='{settings.firestore_database}' --project={project}"
        click.echo(
            "firestore: documents need no schema; nothing to create. Old runs are deleted only with a TTL "
            f"policy on expire_at, once per collection:\n  gcloud firestore fields ttls update expire_at "
            f"--collection-group={settings.firestore_collection} --enable-ttl {where}"
        )
        click.echo(
            "Listing a route's newest runs (the overlap guard, `runonce runs list`) reads through composite "
            "indexes, once per collection (terraform/indexes.tf declares them; until they are built, lists "
            "read every record of the route):"
        )
        for command in index_commands(settings.firestore_collection):
            click.echo(f"  {command} {where}")
        return
    if scheme in ("redis", "rediss"):
        _with_store(settings, lambda s: s.reindex(click.echo))
        click.echo(f"{scheme}: reachable; nothing else to create (each run key carries its own TTL)")
        return
    if scheme == "sqlite":
        path = settings.store.removeprefix("sqlite:///")
        existed = os.path.exists(path)
        _with_store(settings, lambda s: s.ping(), create=True)  # opening creates the file, schema and WAL
        click.echo(f"sqlite: {path} {'exists; schema and indexes checked' if existed else 'created, with its indexes'}")
        return
    if scheme == "spanner":
        _with_store(settings, lambda s: asyncio.to_thread(s.init, click.echo))
        return
    raise click.ClickException(f"store init: nothing known about {scheme}")


def _row(run_id: str, status: str, route: str, job: str, when: str, resource: str) -> str:
    return f"{run_id:<64}  {status:<11}  {route:<20}  {job:<20}  {when:<27}  {resource}"


def _check_run_id(run_id: str) -> None:

    try:
        check_run_id(run_id)
    except InvalidDelivery as exc:
        raise click.BadParameter(exc.reason, param_hint="RUN_ID") from exc


def _configured_route(settings: Settings, route: str) -> Route:
    """The route named by --route, from the routes the proxy reads; exit 2 naming the routes there are."""
    try:
        routes = load_routes(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if route not in routes:
        origin = settings.routes_file or "RUNONCE_ROUTES"
        raise click.UsageError(f"--route: no route {route!r} in {origin}; it has {', '.join(sorted(routes)) or 'none'}")
    return routes[route]


@runs.command("release")
@click.argument("run_id")
def runs_release(run_id: str) -> None:
    """End the lease of an in_progress run now: the next delivery takes over and reconciles."""
    _check_run_id(run_id)
    record = _with_store(_settings(), lambda store: store.release(run_id, _now()))
    if record is None:
        raise click.ClickException(f"run {run_id} holds no live lease (absent, expired, completed or failed)")
    click.echo(f"released {run_id}: the next delivery takes over (attempt {record.attempts + 1})")


_KEY_FLAGS = {
    "X-CloudScheduler-JobName": "--job",
    "X-CloudScheduler-ScheduleTime": "--schedule-time",
    "X-CloudTasks-QueueName": "--queue",
    "X-CloudTasks-TaskName": "--task",
    "query.project": "--project",
    "query.location": "--location",
    "subscription": "--subscription",
    "message.messageId": "--message-id",
}
"""The flag of `runonce key` that stands for each part of a delivery, to name it in errors."""


def _key_error(field: str | None, reason: str) -> click.UsageError:
    """A parse error of `runonce key` in terms of its flags (header names only mean something over HTTP)."""
    for name, flag in _KEY_FLAGS.items():
        reason = reason.replace(name, flag)
    return click.UsageError(f"{_KEY_FLAGS.get(field, field) if field else field}: {reason}")


@main.command()
@click.option(
    "--route", required=True, help="Route name, as in the routes file (RUNONCE_ROUTES_FILE or RUNONCE_ROUTES)."
)
@click.option("--job", help="Scheduler job ID (X-CloudScheduler-JobName).")
@click.option("--schedule-time", help="X-CloudScheduler-ScheduleTime, RFC 3339.")
@click.option("--forced", is_flag=True, help="Key of a force run (source scheduler-forced).")
@click.option(
    "--queue",
    help="Cloud Tasks queue (X-CloudTasks-QueueName): its id, or projects/P/locations/L/queues/Q "
    "(which sets the namespace).",
)
@click.option("--task", help="Cloud Tasks task (X-CloudTasks-TaskName).")
@click.option(
    "--project", default="", help="Namespace project (as the query parameter)  [default: the route's namespace]"
)
@click.option("--location", default="", help="Namespace location  [default: the route's namespace]")
@click.option("--subscription", help="Pub/Sub: the push subscription (projects/P/subscriptions/S).")
@click.option("--message-id", help="Pub/Sub: the message's messageId.")
@click.option(
    "--body",
    "body_file",
    type=click.File("rb"),
    help="Pub/Sub or CloudEvents: the request body as delivered (an envelope, an event, or a binary-mode "
    "event's data); - for stdin. A Cloud Storage event's identity is in it.",
)
@click.option(
    "--header",
    "header_lines",
    multiple=True,
    metavar="NAME:VALUE",
    help="CloudEvents binary mode: a header as delivered (ce-id, ce-source, ce-type, ce-specversion, "
    "Content-Type); repeat it.",
)
@click.option("--canonical", is_flag=True, help="Also print the canonical string that is hashed.")
def key(
    route: str,
    job: str | None,
    schedule_time: str | None,
    forced: bool,
    queue: str | None,
    task: str | None,
    project: str,
    location: str,
    subscription: str | None,
    message_id: str | None,
    body_file: Any,
    header_lines: tuple[str, ...],
    canonical: bool,
) -> None:
    """Compute the run_id of a delivery, as the proxy would, from the routes the proxy reads: a
    Scheduler or Tasks delivery from its headers' values, an event from its body and headers."""

    settings = _settings()
    config = _configured_route(settings, route)
    query = {name: [value] for name, value in (("project", project), ("location", location)) if value}
    if config.events is not None:
        scheduler_flags = {"--job": job, "--schedule-time": schedule_time, "--forced": forced or None, "--queue": queue}
        given = [flag for flag, value in {**scheduler_flags, "--task": task}.items() if value is not None]
        if given:
            raise click.UsageError(
                f"{given[0]}: route {route!r} takes {config.source} deliveries: give --body (and --header), or "
                "--subscription and --message-id"
            )
        delivery = _event_key(
            route, config.events, query, config.namespace, subscription, message_id, body_file, header_lines
        )
        click.echo(delivery.run_id)
        if canonical:
            click.echo(delivery.canonical)
        return
    event_flags = {"--subscription": subscription, "--message-id": message_id, "--body": body_file}
    given = [flag for flag, value in {**event_flags, "--header": header_lines or None}.items() if value is not None]
    if given:
        raise click.UsageError(
            f"{given[0]}: route {route!r} takes Cloud Scheduler or Cloud Tasks deliveries (source: scheduler)"
        )
    if forced and config.forced_runs == "reject":
        raise click.UsageError(
            f"--forced: route {route!r} refuses force runs (forced_runs: reject), so they have no run_id"
        )
    headers = httpx.Headers()
    if job is not None:
        headers["x-cloudscheduler-jobname"] = job
    if schedule_time is not None:
        headers["x-cloudscheduler-scheduletime"] = schedule_time
    if queue is not None:
        headers["x-cloudtasks-queuename"] = queue
    if task is not None:
        headers["x-cloudtasks-taskname"] = task
    try:
        namespace = parse_namespace(query, config.namespace)
        delivery = parse_delivery(route, headers, namespace, _now(), timedelta(0))
        if delivery.source != "tasks":
            # The receipt time is not known here: the flag says which key is wanted, as the route would.
            separate = forced and config.forced_runs == "separate"
            delivery = replace(delivery, source="scheduler-forced" if separate else "scheduler")
    except InvalidDelivery as exc:
        raise _key_error(exc.field, exc.reason) from exc
    click.echo(delivery.run_id)
    if canonical:
        click.echo(delivery.canonical)


def _event_key(
    route: str,
    policy: Any,
    query: dict[str, list[str]],
    default_namespace: Any,
    subscription: str | None,
    message_id: str | None,
    body_file: Any,
    header_lines: tuple[str, ...],
) -> Any:
    """The delivery of an event route's request, from `runonce key`'s flags, through the proxy's parser."""
    if (subscription is None) != (message_id is None):
        raise click.UsageError("--subscription and --message-id go together (a Pub/Sub message's identity)")
    if subscription is not None and body_file is not None:
        raise click.UsageError("--body: give the envelope, or --subscription and --message-id, not both")
    raw = body_file.read() if body_file is not None else b""
    if subscription is not None:
        envelope = {"message": {"messageId": message_id}, "subscription": subscription}
        raw = json.dumps(envelope).encode()
    headers = httpx.Headers()
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise click.UsageError(f"--header: {line!r} is not NAME:VALUE")
        headers[name.strip()] = value.strip()
    try:
        namespace = parse_namespace(query, default_namespace)
        delivery, _, _ = parse_event(policy, route, headers, raw, namespace)
    except InvalidDelivery as exc:
        raise _key_error(exc.field, exc.reason) from exc
    return delivery


def _routes(settings: Settings) -> dict[str, Any]:

    try:
        return load_routes(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _range_error(exc: Any) -> click.UsageError:
    """A `RangeRefused` in terms of the flags."""
    flags = {"from": "--from", "to": "--to", "since": "--since", "range": "--from/--to", "timeout": "--timeout"}
    flag = flags.get(exc.field, exc.field)
    return click.UsageError(f"{flag}: {exc.reason}")


class _Progress:
    """Progress of a long command on stderr: a bar on a terminal; else (a log, CI) plain lines, one
    per step told with a `line`, and otherwise one each tenth of the way."""

    def __init__(self, label: str, unit: str, total: int | None = None):
        self.label, self.unit = label, unit
        self.tty = sys.stderr.isatty()
        self.total, self.done, self.shown = total, 0, 0
        self.bar: Any = None

    def __enter__(self) -> _Progress:
        if self.total is not None:
            self.start(self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.render_finish()

    def start(self, total: int) -> None:
        """The work is `total` steps."""
        self.total = total
        if self.tty:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.render_progress()

    def advance(self, steps: int = 1, line: str | None = None) -> None:
        self.done += steps
        if self.bar is not None:
            self.bar.update(steps)
            if line is not None and self.bar.is_hidden:  # pragma: no cover - a hidden bar on a terminal
                click.echo(line, err=True)
            return
        total = self.total or 0
        tenth = max(1, total // 10)
        if line is not None:
            click.echo(f"{self.label}: {self.done}/{total} {line}", err=True)
        elif self.done // tenth > self.shown // tenth or self.done == total:
            click.echo(f"{self.label}: {self.done}/{total} {self.unit}", err=True)
        self.shown = self.done

    def note(self, line: str) -> None:
        """A line that is no step (a run that waits)."""
        click.echo(("\n" if self.bar is not None else "") + f"{self.label}: {line}", err=True)


class _CountingStore:
    """The store, telling `advance` how many runs each read looked up (the audit's progress)."""

    def __init__(self, store: Any, advance: Callable[[int], None]):
        self.store, self.advance = store, advance

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def get(self, run_id: str, now: datetime) -> Any:
        found = await self.store.get(run_id, now)
        self.advance(1)
        return found

    async def get_many(self, run_ids: Any, now: datetime) -> Any:
        run_ids = list(run_ids)
        found = await self.store.get_many(run_ids, now)
        self.advance(len(run_ids))
        return found


def _counting(store: Any, advance: Callable[[int], None]) -> Any:
    """`store`, counting its reads (typed as the store it stands for)."""
    return _CountingStore(store, advance)


@main.command("audit")
@click.option("--route", help="Only this route  [default: every route that names its Scheduler job]")
@click.option("--since", help="Audit back this far from now: 90m, 6h, 1d, 1h30m.")
@click.option("--from", "start", type=InstantType(), help="Start of the range (RFC 3339), inclusive.")
@click.option("--to", "end", type=InstantType(), help="End of the range (RFC 3339), exclusive  [default: now]")
@click.option("--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def audit_command(
    route: str | None, since: str | None, start: datetime | None, end: datetime | None, output: str
) -> None:
    """List scheduled runs that did not run (missed: no record, or `failed`): one line each.

    Every fire time of every route that names its `job` (+ `schedule`, `namespace`) in the range,
    except those within the lease of now (Scheduler may still deliver them), is looked up in the
    store by the run_id Scheduler's delivery would have. Exit 1 if any run was missed, else 0.
    """
    from runonce.missed.audit import (  # deferred (tests/test_cold_start.py)
        AuditReport,
        RangeRefused,
        audit,
        auditable,
        parse_duration,
    )

    report: AuditReport

    if (since is None) == (start is None):
        raise click.UsageError("give --since DURATION, or --from T [--to T]")
    if since is not None and end is not None:
        raise click.UsageError("--to goes with --from, not with --since")
    settings = _settings()
    every = _routes(settings)
    routes = auditable(every) if route is None else {route: _audited_route(every, route, "--route")}
    if not routes:
        raise click.ClickException(
            "no route names its Scheduler 'job' (with 'schedule' and 'namespace'): nothing to audit"
        )
    now = _now()
    lease, retention = timedelta(seconds=settings.lease_seconds), timedelta(seconds=settings.retention_seconds)
    try:
        first = now - parse_duration(since, "since") if since is not None else start
        assert first is not None  # pragma: no mutate - one of the two is given (checked above)
        last = end if end is not None else now
        field = "since" if since is not None else "from"
        missing = _no_store(settings)
        if missing:  # nothing has ever run here: every fire time due is missed
            click.echo(missing, err=True)

            report = asyncio.run(
                audit(MemoryStore(), routes, first, last, now, lease=lease, retention=retention, start_field=field)
            )
        else:
            with _Progress("audit", "fire times looked up") as progress:
                report = _with_store(
                    settings,
                    lambda store: audit(
                        _counting(store, progress.advance),
                        routes,
                        first,
                        last,
                        now,
                        lease=lease,
                        retention=retention,
                        start_field=field,
                        progress=progress.start,
                    ),
                )
    except RangeRefused as exc:
        raise _range_error(exc) from exc
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        for run in report.missed:
            click.echo(run.line())
        click.echo(
            f"{len(report.missed)} missed of {report.checked} fire time(s) of {len(report.routes)} route(s) from "
            f"{report.start:%Y-%m-%dT%H:%M:%SZ} to {report.end:%Y-%m-%dT%H:%M:%SZ}",
            err=True,
        )
    sys.exit(1 if report.missed else 0)


def _audited_route(routes: dict[str, Any], name: str, flag: str) -> Any:
    """The route `name`, which must name its Scheduler job (its fire times' run_ids need it)."""
    from runonce.missed.audit import auditable  # deferred (tests/test_cold_start.py)

    found = auditable(routes)
    if name in routes and routes[name].source != "scheduler":
        raise click.UsageError(
            f"{flag}: route {name!r} takes {routes[name].source} events: audit, catch-up and backfill apply only to "
            "Scheduler routes (an event has no fire times to miss)"
        )
    if name not in found:
        what = "no route" if name not in routes else "route"
        raise click.UsageError(
            f"{flag}: {what} {name!r} {'that names' if name not in routes else 'does not name'} its Scheduler 'job' "
            f"(routes with job: {', '.join(sorted(found)) or 'none'})"
        )
    return found[name]


@main.command("backfill")
@click.argument("route_name", metavar="ROUTE")
@click.option("--from", "start", type=InstantType(), required=True, help="First fire time (RFC 3339), inclusive.")
@click.option("--to", "end", type=InstantType(), required=True, help="End (RFC 3339), exclusive; not in the future.")
@click.option("--dry-run", is_flag=True, help="Print the fire times and run_ids; call nothing.")
@click.option("--concurrency", type=AsciiIntRange(1, 64), default=4, show_default=True, help="Runs in flight at once.")
@click.option("--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--yes", is_flag=True, help="Run more than 1000 fire times, or fire times older than the retention.")
@click.option(
    "--timeout",
    default="1h",
    show_default=True,
    help="How long to keep trying runs that wait for the route's previous execution (overlap): 90s, 30m, 2h.",
)
def backfill_command(
    route_name: str,
    start: datetime,
    end: datetime,
    dry_run: bool,
    concurrency: int,
    output: str,
    yes: bool,
    timeout: str,
) -> None:
    """Run ROUTE's fire times in [--from, --to) through the protocol, each with the run_id Scheduler's
    delivery would have: a time that already ran, or a second backfill, replays (`duplicate`).

    Uses the settings and route guards `serve` uses (RUNONCE_STORE, the routes, ADC for the target).
    On a route with `overlap`, runs go one after another: `skip` records a run `skipped` while the
    one before it still runs; `wait` starts each once the one before has finished, giving up after
    --timeout. Ctrl-C starts no more runs and lets those in flight finish; a second Ctrl-C cuts them
    short and releases their claims. Exit 0 when every run is processed, duplicate or skipped, 1
    otherwise, 130 when interrupted.
    """
    from runonce.missed.audit import RangeRefused, parse_duration  # deferred (tests/test_cold_start.py)
    from runonce.missed.backfill import MAX_RUNS, older_than_retention, runs_to_backfill  # deferred (as above)

    settings = _settings()
    route = _audited_route(_routes(settings), route_name, "ROUTE")
    now = _now()
    try:
        waits = parse_duration(timeout, "timeout")
        runs = runs_to_backfill(route_name, route, start, end, now)
    except RangeRefused as exc:
        raise _range_error(exc) from exc
    if dry_run:
        _print_backfill(route_name, runs, None, output)
        return
    if len(runs) > MAX_RUNS and not yes:
        raise click.UsageError(
            f"--from/--to: {len(runs)} fire times, over the {MAX_RUNS} one backfill runs without --yes"
        )
    old = older_than_retention(runs, now, timedelta(seconds=settings.retention_seconds))
    if old and not yes:
        raise click.UsageError(
            f"--from: {len(old)} fire time(s) are older than RUNONCE_RETENTION_SECONDS "
            f"({settings.retention_seconds:g}): "
            "the store no longer knows whether they ran, so any that did would run again; pass --yes to run them"
        )
    outcomes, interrupted = _with_store(
        settings,
        lambda store: _backfill(settings, route_name, route, store, runs, concurrency, waits),
        create=True,
    )
    _print_backfill(route_name, runs, outcomes, output, interrupted=interrupted)
    left = [outcome for outcome in outcomes if outcome.waiting or outcome.outcome == "not_started"]
    if left and not interrupted:
        first = left[0]
        click.echo(
            f"gave up after --timeout {timeout}: {len(left)} fire time(s) left, from "
            f"{first.run.to_json()['schedule_time']}: {first.error.message if first.error else 'not started'}",
            err=True,
        )
    sys.exit(130 if interrupted else 0 if all(outcome.ok for outcome in outcomes) else 1)


async def _backfill(
    settings: Settings,
    name: str,
    route: Any,
    store: Any,
    runs: list[Any],
    concurrency: int,
    timeout: timedelta,
) -> tuple[list[Any], bool]:
    """The backfill with Ctrl-C handled: the first stops starting runs, the second cuts the
    dispatches in flight short. Claims left `unknown` are released at the end, not left to the lease."""

    from runonce.missed.backfill import local_runner, release_unknown, run_all  # deferred (tests/test_cold_start.py)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with local_runner(settings, {name: route}, store) as runner:

        def interrupt() -> None:
            if stop.is_set():
                click.echo("\ninterrupted again: cutting the runs in flight short", err=True)
                runner.shutdown.drain(0)
                return
            stop.set()
            click.echo(
                f"\ninterrupted: starting no more runs; those in flight finish (at most "
                f"{settings.dispatch_timeout_seconds:g}s); Ctrl-C again to cut them short",
                err=True,
            )

        loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            with _Progress(f"backfill {name}", "runs", total=len(runs)) as progress:

                def done(outcome: Any) -> None:
                    progress.advance(1, f"{outcome.run.to_json()['schedule_time']} {outcome.outcome}")

                def waiting(outcome: Any) -> None:
                    progress.note(f"{outcome.run.to_json()['schedule_time']} waits: {outcome.error.message}")

                outcomes = await run_all(
                    runner,
                    runs,
                    route,
                    concurrency=concurrency,
                    stop=stop,
                    done=done,
                    timeout=timeout,
                    waiting=waiting,
                )
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        # This process is leaving: a claim kept for an outcome it could not learn protects nothing now.
        for run_id in await release_unknown(store, outcomes, _now()):
            click.echo(
                f"released {run_id}: its outcome is unknown; the next delivery takes over and reconciles", err=True
            )
    return outcomes, stop.is_set()


def _print_backfill(
    name: str, runs: list[Any], outcomes: list[Any] | None, output: str, interrupted: bool = False
) -> None:
    if output == "json":
        rows = [outcome.to_json() for outcome in outcomes] if outcomes is not None else [run.to_json() for run in runs]
        body: dict[str, Any] = {"route": name, "dry_run": outcomes is None, "runs": rows}
        if outcomes is not None:
            body["interrupted"] = interrupted
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(f"{'SCHEDULE_TIME':<20}  {'LOCAL_TIME':<25}  {'RUN_ID':<64}  OUTCOME")
    for index, run in enumerate(runs):
        if outcomes is None:
            outcome, detail = "dry_run", ""
        else:
            found = outcomes[index]
            row = found.to_json()
            outcome, detail = row["outcome"], row.get("resource") or row.get("error") or ""
        local = run.time.astimezone(run.zone).isoformat()
        click.echo(f"{run.to_json()['schedule_time']:<20}  {local:<25}  {run.run_id}  {outcome}  {detail}".rstrip())


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--lease-seconds", default=None, help="runonce's lease  [default: RUNONCE_LEASE_SECONDS or 300]")
@click.option(
    "--retention-seconds", default=None, help="runonce's retention  [default: RUNONCE_RETENTION_SECONDS or 86400]"
)
@click.option("--now", type=InstantType(), default=None, help="Start of the two-year DST scan  [default: now]")
def lint(
    files: tuple[str, ...],
    output: str,
    lease_seconds: str | None,
    retention_seconds: str | None,
    now: datetime | None,
) -> None:
    """Check Scheduler jobs (`gcloud scheduler jobs describe --format=json`), Pub/Sub push subscriptions
    (`gcloud pubsub subscriptions describe --format=json`), Eventarc triggers (`gcloud eventarc
    triggers describe --format=json`) and routes files.

    Exit 1 if any error was found, 0 with warnings only.
    """
    from runonce.lint import LintConfig, lint_files  # deferred (tests/test_cold_start.py)

    settings = _settings()
    default_routes = None
    if settings.routes_file or settings.routes:
        try:
            default_routes = load_routes(settings)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
    checked = _lint_settings(settings, {"lease_seconds": lease_seconds, "retention_seconds": retention_seconds})
    config = LintConfig(
        lease_seconds=checked.lease_seconds,
        retention_seconds=checked.retention_seconds,
        now=now,
        dispatch_timeout_seconds=checked.dispatch_timeout_seconds,
    )
    findings = lint_files(list(files), config, default_routes)
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if output == "json":
        click.echo(
            json.dumps({"findings": [f.to_json() for f in findings], "errors": errors, "warnings": warnings}, indent=2)
        )
    else:
        for finding in findings:
            click.echo(finding.line())
        click.echo(f"{len(files)} file(s): {errors} error(s), {warnings} warning(s)")
    sys.exit(1 if errors else 0)


def _lint_settings(settings: Settings, flags: dict[str, str | None]) -> Settings:
    """The settings with `lint`'s flags in place of RUNONCE_LEASE_SECONDS / RUNONCE_RETENTION_SECONDS,
    validated as the server validates them (`runonce serve` would refuse what lint must not accept);
    a flag that disagrees with the setting this environment gives `serve` is said on stderr."""
    given = {name: value for name, value in flags.items() if value is not None}
    if not given:
        return settings
    try:
        checked = load_settings(**given)
    except ConfigError as exc:
        message = str(exc).removeprefix("bad settings: ")
        for name in given:
            message = message.replace(f"RUNONCE_{name.upper()}", f"--{name.replace('_', '-')}")
        raise click.UsageError(message) from exc
    for name in given:
        ours, theirs = getattr(checked, name), getattr(settings, name)
        if ours != theirs:
            click.echo(
                f"note: --{name.replace('_', '-')} {ours:g} differs from RUNONCE_{name.upper()} ({theirs:g}, "
                f"{'set here' if f'RUNONCE_{name.upper()}' in os.environ else 'its default'}), which runonce serve "
                "would use: checking against the flag",
                err=True,
            )
    return checked


main.add_command(schedule)
main.add_command(status_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
