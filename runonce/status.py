"""`runonce status`: one row per route from the store and the routes file (runonce/missed/status.py),
as a table or JSON; exit 1 when a route needs attention, so it can gate a script."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click

from runonce.routes import Route, load_routes
from runonce.settings import ConfigError, Settings, load_settings
from runonce.stores import RunStore, StoreUnavailable, open_store
from runonce.stores.memory import MemoryStore

if TYPE_CHECKING:
    from runonce.missed.status import RouteStatus, StatusReport

COLUMNS = ("ROUTE", "SCHEDULE", "TIME_ZONE", "NEXT_FIRE", "LAST_FIRE", "LAST", "LAST_SUCCESS", "RUNS", "ATTENTION")


@click.command("status")
@click.option("--route", help="Only this route  [default: every route]")
@click.option("--since", help="The window: 90m, 6h, 7d  [default: the retention, at most 7d]")
@click.option("--format", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status_command(route: str | None, since: str | None, output: str) -> None:
    """How each route's runs are doing: schedule, next and last fire time, last outcome and last
    success, runs in the window by outcome, missed fire times, and runs still unresolved.

    Exit 1 when a route needs attention (a missed fire time, an unresolved run, or its last run
    failed), else 0.
    """
    # runonce/cli.py imports this module, and its other commands start without the missed-runs
    # code (tests/test_cold_start.py holds them to it).
    from runonce.missed.audit import RangeRefused, parse_duration  # deferred: cold start of the other commands
    from runonce.missed.status import default_window  # deferred: as above

    try:
        settings = load_settings()
        routes = load_routes(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if route is not None:
        if route not in routes:
            raise click.UsageError(f"--route: no route {route!r} (routes: {', '.join(sorted(routes)) or 'none'})")
        routes = {route: routes[route]}
    lease, retention = timedelta(seconds=settings.lease_seconds), timedelta(seconds=settings.retention_seconds)
    now = _now()
    try:
        window = parse_duration(since, "since") if since is not None else default_window(retention)
        report = asyncio.run(_read(settings, routes, now, window, lease, retention))
    except RangeRefused as exc:
        raise click.UsageError(f"--since: {exc.reason}") from exc
    except StoreUnavailable as exc:
        raise click.ClickException(f"claim store unavailable: {exc}") from exc
    except ConfigError as exc:  # e.g. Firestore without credentials
        raise click.ClickException(str(exc)) from exc
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render_table(report))
    sys.exit(1 if report.attention else 0)


def _now() -> datetime:
    return datetime.now(UTC)


async def _read(
    settings: Settings,
    routes: Mapping[str, Route],
    now: datetime,
    window: timedelta,
    lease: timedelta,
    retention: timedelta,
) -> StatusReport:
    """The report from the configured store. A SQLite file that does not exist yet is read as an
    empty store (nothing has run here), and is not created."""
    from runonce.missed.status import status  # deferred: see status_command

    path = settings.store.removeprefix("sqlite:///")
    if settings.store.startswith("sqlite:///") and not os.path.exists(path):
        click.echo(f"no store at {path} yet (nothing has run with RUNONCE_STORE={settings.store})", err=True)
        store: RunStore = MemoryStore()
    else:
        store = open_store(
            settings.store,
            timeout_seconds=settings.store_timeout_seconds,
            firestore_project=settings.firestore_project,
            firestore_database=settings.firestore_database,
            firestore_collection=settings.firestore_collection,
        )
    try:
        return await status(store, routes, now, since=window, lease=lease, retention=retention)
    finally:
        await store.close()


def render_table(report: StatusReport) -> str:
    """The rows, then one line per missed fire time and per unresolved run, then a summary."""
    rows = [COLUMNS, *(_cells(row) for row in report.routes)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    for row in report.routes:
        data = row.to_json()
        lines += [f"{row.route}: missed fire time {when}" for when in data["missed"]]
        lines += [
            f"{row.route}: unresolved run {u['run_id']} ({u['status']}, {u['age_seconds']}s since its latest attempt)"
            for u in data["unresolved"]
        ]
    needing = sum(row.attention for row in report.routes)
    lines.append(
        f"{len(report.routes)} route(s) from {report.start:%Y-%m-%dT%H:%M:%SZ} to {report.now:%Y-%m-%dT%H:%M:%SZ}: "
        + (f"{needing} need(s) attention" if needing else "all well")
    )
    return "\n".join(lines)


def _cells(row: RouteStatus) -> Sequence[str]:
    data = row.to_json()
    runs = " ".join(f"{status}={n}" for status, n in data["counts"].items()) or "-"
    reasons = []
    if row.missed:
        reasons.append(f"{len(row.missed)} missed")
    if row.unresolved:
        reasons.append(f"{len(row.unresolved)} unresolved")
    if row.last_status == "failed":
        reasons.append("last failed")
    return (
        row.route,
        row.schedule or "-",
        row.time_zone or "-",
        data["next_fire_time"] or "-",
        data["last_fire_time"] or "-",
        row.last_status or "-",
        data["last_success"] or "-",
        runs,
        ", ".join(reasons) or "-",
    )
