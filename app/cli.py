"""`runonce` command line: serve, inspect and release runs, compute run_ids."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import click

from .settings import ConfigError, Settings, load_settings

T = TypeVar("T")


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _with_store(settings: Settings, use: Callable[[Any], Awaitable[T]]) -> T:
    from .stores import StoreUnavailable, open_store

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


def _now() -> datetime:
    return datetime.now(timezone.utc)


@click.group()
@click.version_option(package_name="runonce")
def main() -> None:
    """runonce: one downstream execution per scheduled run."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=None, help="Port to listen on  [default: $PORT or 8080]")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes.")
def serve(host: str, port: int | None, workers: int) -> None:
    """Run the proxy (uvicorn)."""
    import uvicorn

    from .auth import check_auth_config
    from .logs import configure_logging, uvicorn_log_config
    from .main import create_app
    from .routes import load_routes
    from .server import DrainingServer

    settings = _settings()
    configure_logging(settings.log_format)
    port = port if port is not None else int(os.environ.get("PORT", "8080"))
    try:
        if workers == 1:
            app: Any = create_app(settings)
        else:
            # fail here, once, rather than in every worker process
            routes = load_routes(settings)
            check_auth_config(settings, {name: route.allowed_callers for name, route in routes.items()})
            app = "app.main:app_from_environment"
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_config": uvicorn_log_config(settings.log_format),
        "access_log": False,  # runonce writes its own access line (app/access.py)
        # after the grace, uvicorn cancels what is left; Cloud Run sends SIGKILL 10 s after SIGTERM
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds + 1,
    }
    if workers > 1:  # each worker drains its connections; dispatches get uvicorn's timeout only
        uvicorn.run(app, workers=workers, factory=True, **options)
        return
    DrainingServer(uvicorn.Config(app, **options), on_exit=app.state.drain).run()


@main.group()
def runs() -> None:
    """Inspect and release run records in the configured store."""


@runs.command("show")
@click.argument("run_id")
def runs_show(run_id: str) -> None:
    """Print one run record as JSON."""
    record = _with_store(_settings(), lambda store: store.get(run_id, _now()))
    if record is None:
        raise click.ClickException(f"no run {run_id} (never seen, or past its retention)")
    click.echo(json.dumps(record.to_json(), indent=2))


@runs.command("list")
@click.option("--route", help="Only runs of this route.")
@click.option("--status", type=click.Choice(["in_progress", "completed", "failed"]), help="Only runs in this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
def runs_list(route: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """List recent runs, newest first."""
    records = _with_store(_settings(), lambda store: store.list(_now(), route=route, status=status, limit=limit))
    for record in records:
        if as_json:
            click.echo(json.dumps(record.to_json()))
        else:
            resource = (record.target or {}).get("resource") or "-"
            when = record.schedule_time or record.task or "-"
            click.echo(f"{record.run_id}  {record.status:<11}  {record.route}  {record.job}  {when}  {resource}")


@runs.command("release")
@click.argument("run_id")
def runs_release(run_id: str) -> None:
    """End the lease of an in_progress run now: the next delivery takes over and reconciles."""
    record = _with_store(_settings(), lambda store: store.release(run_id, _now()))
    if record is None:
        raise click.ClickException(f"run {run_id} holds no live lease (absent, expired, completed or failed)")
    click.echo(f"released {run_id}: the next delivery takes over (attempt {record.attempts + 1})")


@main.command()
@click.option("--route", required=True, help="Route name.")
@click.option("--job", help="Scheduler job ID (X-CloudScheduler-JobName).")
@click.option("--schedule-time", help="X-CloudScheduler-ScheduleTime, RFC 3339.")
@click.option("--forced", is_flag=True, help="Key of a force run (source scheduler-forced).")
@click.option(
    "--queue",
    help="Cloud Tasks queue (X-CloudTasks-QueueName): its id, or projects/P/locations/L/queues/Q (which sets the namespace).",
)
@click.option("--task", help="Cloud Tasks task (X-CloudTasks-TaskName).")
@click.option("--project", default="", help="Namespace project (query parameter or route namespace).")
@click.option("--location", default="", help="Namespace location.")
@click.option("--canonical", is_flag=True, help="Also print the canonical string that is hashed.")
def key(
    route: str, job: str | None, schedule_time: str | None, forced: bool, queue: str | None,
    task: str | None, project: str, location: str, canonical: bool,
) -> None:
    """Compute the run_id of a delivery, as the proxy would."""
    import httpx

    from .delivery import InvalidDelivery, parse_delivery, parse_namespace

    headers = httpx.Headers()
    if job is not None:
        headers["x-cloudscheduler-jobname"] = job
    if schedule_time is not None:
        headers["x-cloudscheduler-scheduletime"] = schedule_time
    if queue is not None:
        headers["x-cloudtasks-queuename"] = queue
    if task is not None:
        headers["x-cloudtasks-taskname"] = task
    query = {name: [value] for name, value in (("project", project), ("location", location)) if value}
    try:
        namespace = parse_namespace(query, None)
        delivery = parse_delivery(route, headers, namespace, _now(), timedelta(0))
        if delivery.source != "tasks":
            # The receipt time is not known here: the flag says which key is wanted.
            delivery = replace(delivery, source="scheduler-forced" if forced else "scheduler")
    except InvalidDelivery as exc:
        raise click.UsageError(f"{exc.field}: {exc.reason}") from exc
    click.echo(delivery.run_id)
    if canonical:
        click.echo(delivery.canonical)


from .schedules.cli import lint, schedule  # noqa: E402 - the schedule engine's own commands

main.add_command(schedule)
main.add_command(lint)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
