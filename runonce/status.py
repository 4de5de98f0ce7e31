"""`runonce status`: one row per route from the store and the routes file (runonce/missed/status.py),
as a table or JSON; exit 1 when a route needs attention, so it can gate a script."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import timedelta

import click

from runonce.missed.status import RouteStatus, StatusReport, default_window

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
    # runonce.cli imports this module to register the command: its helpers are imported here.
    from runonce.cli import _now, _routes, _settings, _with_store
    from runonce.missed.audit import RangeRefused, parse_duration
    from runonce.missed.status import status

    settings = _settings()
    routes = _routes(settings)
    if route is not None:
        if route not in routes:
            raise click.UsageError(f"--route: no route {route!r} (routes: {', '.join(sorted(routes)) or 'none'})")
        routes = {route: routes[route]}
    lease, retention = timedelta(seconds=settings.lease_seconds), timedelta(seconds=settings.retention_seconds)
    now = _now()
    try:
        window = parse_duration(since, "since") if since is not None else default_window(retention)
        report: StatusReport = _with_store(
            settings, lambda store: status(store, routes, now, since=window, lease=lease, retention=retention)
        )
    except RangeRefused as exc:
        raise click.UsageError(f"--since: {exc.reason}") from exc
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render_table(report))
    sys.exit(1 if report.attention else 0)


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
