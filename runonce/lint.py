"""`runonce lint`: check Cloud Scheduler jobs (and runonce's routes file) before they misbehave.

Inputs, told apart by content: a Job resource as `gcloud scheduler jobs describe --format=json`
prints it (or a list of them, as `gcloud scheduler jobs list --format=json` does), and runonce's
routes file (YAML or JSON with a top-level `routes:`). Jobs are checked against the routes found
among the files (else the configured RUNONCE_ROUTES_FILE / RUNONCE_ROUTES).

Errors (exit 1) are what makes deliveries fail or run twice: an invalid schedule or time zone, a
URI that is not `/v1/routes/{route}:run` or names no configured route, no OIDC token, a method or
body runonce refuses, a retry window longer than the retention, a job whose schedule differs from
the one its route declares, and the same job (project and ID) in several regions whose regions key
their runs apart or fire at other times or with another body (each region would then run every fire
time: docs/how-to/two-regions.md). Warnings (exit 0): groc without the `snap` policy, DST transitions that
skip or repeat a fire time in the next two years, an attempt deadline longer than the lease, a
retry window longer than the time between two runs (Scheduler then delays or skips the next run),
and the like.

A Pub/Sub push subscription (`gcloud pubsub subscriptions describe --format=json`) or an Eventarc
trigger (`gcloud eventarc triggers describe --format=json`) pointed at runonce is checked the same
way: its URL names a route of that source, it sends an OIDC token from an allowed caller, the
envelope is wrapped, the ack deadline covers a dispatch, and it has a retry policy and a dead-letter
topic.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from runonce.missed.audit import check_catch_up_windows
from runonce.routes import not_utf8, one_line, parse_routes, read_document
from runonce.run.delivery import MAX_BODY_BYTES, ROUTE_PATH
from runonce.scheduler_retry import RetryConfig, retry_window
from runonce.schedules import IntervalSchedule, Schedule, ScheduleError, get_zone, parse_schedule
from runonce.settings import ConfigError

DST_SCAN = timedelta(days=730)
ROUTE_URI_PATH = re.compile("^" + re.escape(ROUTE_PATH).replace(re.escape("{route}"), "([^/:]+)") + "$")
JOB_NAME = re.compile(r"projects/([^/]+)/locations/([^/]+)/jobs/([^/]+)")
OVERLAP_SCAN = 400  # fire times looked at for the shortest gap between two runs


@dataclass(frozen=True)
class Finding:
    file: str
    subject: str  # "job NAME", "route NAME" or "-"
    severity: str  # "error" or "warning"
    code: str
    message: str

    def line(self) -> str:
        return f"{self.file}: {self.subject}: {self.severity}: {self.message} [{self.code}]"

    def to_json(self) -> dict[str, str]:
        return {
            "file": self.file,
            "subject": self.subject,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }


@dataclass(frozen=True)
class LintConfig:
    lease_seconds: float = 300.0
    retention_seconds: float = 86400.0
    now: datetime | None = None
    dispatch_timeout_seconds: float = 30.0


@dataclass
class _Report:
    """The findings about one subject (a job or a route) of one file."""

    file: str
    subject: str
    findings: list[Finding] = field(default_factory=list)

    def error(self, code: str, message: str) -> None:
        self.findings.append(Finding(self.file, self.subject, "error", code, message))

    def warn(self, code: str, message: str) -> None:
        self.findings.append(Finding(self.file, self.subject, "warning", code, message))


_ROUTES_KEY = re.compile(r"""(?:[ \t]*(?:#[^\n]*)?\n)*\{?\s*["']?routes["']?\s*:""")
"""`routes:` as the file's first key (after blank and comment lines; JSON's opening brace)."""


def load_documents(path: str) -> tuple[str, Any]:
    """The file's text and what it holds, read by the routes loader (`runonce serve`'s reader), so
    a file it refuses is refused in start-up's words: a file that looks like a routes file is named
    as start-up names it. Raises `ConfigError` (one line) or `OSError`."""
    raw = Path(path).read_bytes()
    looks_like_routes = _ROUTES_KEY.match(raw.decode("utf-8", "replace")) is not None
    try:
        text = raw.decode("utf-8")
        return text, read_document(text)
    except UnicodeDecodeError as exc:
        problem = not_utf8(exc)
    except ConfigError as exc:
        problem = str(exc)
    raise ConfigError(f"routes file {path}: {problem}" if looks_like_routes else problem)


def lint_files(paths: list[str], config: LintConfig, default_routes: Mapping[str, Any] | None = None) -> list[Finding]:
    """All findings for the given files, in file order. `default_routes` (the configured routes) are
    the jobs' routes when no routes file is among the files."""
    findings: list[Finding] = []
    jobs: list[tuple[str, Mapping[str, Any]]] = []
    routes: dict[str, Any] = {}
    route_files: list[tuple[str, str, Any]] = []
    sources: list[tuple[str, Mapping[str, Any]]] = []  # Pub/Sub push subscriptions, Eventarc triggers
    routes_seen = False
    for path in paths:
        try:
            text, data = load_documents(path)
        except ConfigError as exc:  # one line: where, and what the reader found
            findings.append(Finding(path, "-", "error", "unreadable", str(exc)))
            continue
        except OSError as exc:
            findings.append(Finding(path, "-", "error", "unreadable", f"cannot read: {exc.strerror}"))
            continue
        if isinstance(data, Mapping) and "routes" in data:
            routes_seen = True
            origin = f"routes file {path}"
            try:
                parsed = parse_routes(text, origin)
            except ConfigError as exc:
                findings.append(Finding(path, "-", "error", "invalid_routes", str(exc)))
                continue
            # start-up's other checks of the routes, with the retention serve would read
            problems = check_catch_up_windows(parsed, config.retention_seconds, config.now)
            if problems:
                findings.append(Finding(path, "-", "error", "invalid_routes", one_line(origin, problems)))
            routes.update(parsed)
            route_files.extend((path, name, route) for name, route in parsed.items())
        elif _is_push_source(data) or (isinstance(data, list) and data and all(map(_is_push_source, data))):
            sources.extend((path, item) for item in (data if isinstance(data, list) else [data]))
        elif isinstance(data, list) and all(isinstance(item, Mapping) for item in data):
            jobs.extend((path, job) for job in data)
        elif isinstance(data, Mapping) and ("schedule" in data or "httpTarget" in data or "name" in data):
            jobs.append((path, data))
        else:
            findings.append(
                Finding(
                    path,
                    "-",
                    "error",
                    "unknown_file",
                    "neither a Scheduler Job (gcloud scheduler jobs describe --format=json), a Pub/Sub "
                    "subscription, an Eventarc trigger, nor a runonce routes file (top-level 'routes:')",
                )
            )
    if not routes_seen and default_routes is not None:
        routes, routes_seen = dict(default_routes), True
    if jobs and not routes_seen:
        findings.append(
            Finding(
                "-",
                "-",
                "warning",
                "routes_unchecked",
                "no routes file given (nor RUNONCE_ROUTES_FILE/RUNONCE_ROUTES): "
                "the jobs' routes and policies were not checked",
            )
        )
    known_routes = routes if routes_seen else None
    locations = _locations_by_job(job for _, job in jobs)
    for path, job in jobs:
        findings.extend(_lint_job(path, job, known_routes, config, locations))
    findings.extend(_lint_regions(jobs, known_routes))
    for path, source in sources:
        findings.extend(_lint_push_source(path, source, known_routes, config))
    # A route's schedule is checked with its job when a job calls it; else on its own.
    called = {_route_of(job) for _, job in jobs}
    for path, name, route in route_files:
        if name not in called:
            findings.extend(_lint_route(path, name, route, config))
    return findings


def _route_of(job: Mapping[str, Any]) -> str | None:
    target = job.get("httpTarget")
    match = ROUTE_URI_PATH.match(urlsplit(str(target.get("uri", ""))).path) if isinstance(target, Mapping) else None
    return match.group(1) if match else None


def _now(config: LintConfig) -> datetime:
    return config.now or datetime.now(UTC)


def _schedule_findings(
    report: _Report, schedule: Schedule, zone_name: str | None, config: LintConfig, snap: bool | None
) -> None:
    warn = report.warn
    if getattr(schedule, "lower_case_names", False):
        warn(
            "lower_case_names",
            f"{schedule.text!r}: Cloud Scheduler documents month and weekday names in "
            "upper case (JAN, MON); lower case is accepted here but may not be everywhere",
        )
    if getattr(schedule, "star_step_day_field", False):
        warn(
            "day_fields_and",
            f"{schedule.text!r}: a day field starting with '*' (like '*/2') makes day-of-month "
            "AND day-of-week (Vixie cron); Cloud Scheduler documents OR unless a field is '*'",
        )
    if not schedule.header_guaranteed and snap is False:
        warn(
            "groc_without_snap",
            f"groc schedule {schedule.text!r}: Cloud Scheduler does not guarantee "
            "X-CloudScheduler-ScheduleTime for groc jobs, and the route's missing_schedule_time is "
            "'reject' (400): set it to 'snap' with the schedule, or use unix-cron",
        )
    if isinstance(schedule, IntervalSchedule) and schedule.plain and snap:
        warn(
            "snap_grid_unknown",
            f"{schedule.text!r} counts from the previous run, so its phase is unknown; "
            "snap keys runs on multiples of the interval since 1970-01-01T00:00Z and a retry that crosses "
            "a grid point counts as the next run: prefer 'synchronized' or unix-cron",
        )
    zone = get_zone(zone_name)
    start = _now(config)
    for finding in schedule.dst_findings(zone, start, start + DST_SCAN):
        warn(f"dst_{finding.kind}", f"{schedule.text!r}: {finding.message()}")


def _lint_route(file: str, name: str, route: Any, config: LintConfig) -> list[Finding]:
    if route.schedule is None:
        return []
    report = _Report(file, f"route {name}")
    _schedule_findings(
        report, parse_schedule(route.schedule), route.time_zone, config, snap=route.missing_schedule_time == "snap"
    )
    return report.findings


def _lint_job(
    file: str,
    job: Mapping[str, Any],
    routes: Mapping[str, Any] | None,
    config: LintConfig,
    locations: Mapping[tuple[str, str], set[str]] | None = None,
) -> list[Finding]:
    name = str(job.get("name") or "")
    report = _Report(file, f"job {name.rsplit('/', 1)[-1]}" if name else "job (unnamed)")
    name_match = JOB_NAME.fullmatch(name)
    if name and not name_match:
        report.error("invalid_name", f"name {name!r} is not projects/PROJECT_ID/locations/LOCATION_ID/jobs/JOB_ID")
    regions = (locations or {}).get((name_match.group(1), name_match.group(3)), set()) if name_match else set()
    route = _check_target(report, job, name_match, routes, regions)
    schedule = _check_schedule(report, job, route, routes, config)
    _check_retries(report, job, schedule, config)
    return report.findings


def _check_target(
    report: _Report,
    job: Mapping[str, Any],
    name_match: re.Match[str] | None,
    routes: Mapping[str, Any] | None,
    regions: set[str],
) -> Any:
    """The target: runonce's delivery endpoint, with OIDC. Returns the route the URI names, if known.
    `regions`: the locations of the given jobs with this job's project and ID (the same job in
    several regions may name any of them in its URL: docs/how-to/two-regions.md)."""
    route = None
    target = job.get("httpTarget")
    if not isinstance(target, Mapping):
        kind = next((k for k in ("appEngineHttpTarget", "pubsubTarget") if k in job), None)
        report.error("not_http_target", f"has {kind or 'no target'}; runonce is called through an httpTarget")
        return None
    uri = str(target.get("uri", ""))
    parts = urlsplit(uri)
    match = ROUTE_URI_PATH.match(parts.path)
    if parts.scheme not in ("http", "https") or not match:
        report.error(
            "not_runonce_uri",
            f"httpTarget.uri {uri!r} is not a runonce delivery URL (https://HOST/v1/routes/ROUTE:run)",
        )
    else:
        route_name = match.group(1)
        if routes is not None:
            route = routes.get(route_name)
            if route is None:
                known = ", ".join(sorted(routes)) or "none"
                report.error(
                    "unknown_route",
                    f"httpTarget.uri names route {route_name!r}, which the routes file does not define (routes: "
                    f"{known})",
                )
            elif route.source != "scheduler":
                report.error(
                    "wrong_source",
                    f"route {route_name!r} takes {route.source} deliveries (source: {route.source}): it refuses "
                    "every Scheduler delivery (400)",
                )
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"project", "location"})
        if unknown:
            report.error(
                "bad_query",
                f"httpTarget.uri has query parameter {unknown[0]!r}; runonce accepts only project and location (400)",
            )
        if name_match:
            for key, actual in (("project", name_match.group(1)), ("location", name_match.group(2))):
                given = query.get(key, [None])[0]
                if given is not None and given != actual and not (key == "location" and given in regions):
                    report.warn(
                        "namespace_mismatch", f"httpTarget.uri says {key}={given} but the job lives in {key} {actual}"
                    )
            if "project" not in query and (route is None or route.namespace is None):
                report.warn(
                    "no_namespace",
                    "the URI has no ?project=&location= and the route no namespace: the same "
                    "job ID in another project or location would share run keys",
                )
    method = str(target.get("httpMethod", "POST"))
    if method != "POST":
        report.error("bad_method", f"httpTarget.httpMethod is {method}; runonce's delivery endpoint takes POST")
    if "oidcToken" not in target:
        other = " (it sends an OAuth access token, which runonce does not accept)" if "oauthToken" in target else ""
        report.error(
            "no_oidc", f"httpTarget has no oidcToken{other}: runonce authenticates callers by OIDC ID token (401)"
        )
    _check_body(report, target.get("body"))
    return route


def _check_body(report: _Report, body: Any) -> None:
    if not body:
        return
    try:
        raw = base64.b64decode(str(body), validate=True)
        if len(raw) > MAX_BODY_BYTES:
            report.error(
                "body_too_large", f"httpTarget.body is {len(raw)} bytes; runonce accepts at most {MAX_BODY_BYTES} (413)"
            )
        elif not isinstance(json.loads(raw), dict):
            report.error("bad_body", "httpTarget.body is not a JSON object; runonce answers 400")
    except (binascii.Error, ValueError):
        report.error("bad_body", "httpTarget.body is not base64 of a JSON object; runonce answers 400")


def _check_schedule(
    report: _Report, job: Mapping[str, Any], route: Any, routes: Mapping[str, Any] | None, config: LintConfig
) -> Schedule | None:
    """The schedule and its zone, against the route's policies and declared schedule."""
    text = job.get("schedule")
    schedule = None
    try:
        get_zone(job.get("timeZone"))
        if not isinstance(text, str):
            raise ScheduleError("schedule", "missing")
        schedule = parse_schedule(text)
    except ScheduleError as exc:
        report.error("invalid_schedule" if exc.field != "time zone" else "invalid_time_zone", str(exc))
    if schedule is None:
        return None
    snap = (route.missing_schedule_time == "snap") if route is not None else (False if routes is not None else None)
    if route is None and not schedule.header_guaranteed and routes is None:
        report.warn(
            "groc_without_snap",
            f"groc schedule {text!r}: Cloud Scheduler does not guarantee "
            "X-CloudScheduler-ScheduleTime for groc jobs; its route needs missing_schedule_time: snap",
        )
    _schedule_findings(report, schedule, job.get("timeZone"), config, snap)
    if route is not None and route.schedule is not None:
        declared_zone = get_zone(route.time_zone).key
        if route.schedule.strip() != str(text).strip() or declared_zone != get_zone(job.get("timeZone")).key:
            report.error(
                "schedule_mismatch",
                f"the job runs {text!r} in {get_zone(job.get('timeZone')).key}, but its route "
                f"declares {route.schedule!r} in {declared_zone}: snapped keys would be wrong",
            )
    return schedule


def _check_retries(report: _Report, job: Mapping[str, Any], schedule: Schedule | None, config: LintConfig) -> None:
    """Deadlines and retries against the lease, the retention and the schedule's own interval."""
    try:
        retry = RetryConfig.from_job(job)
    except ValueError as exc:
        report.error("bad_duration", str(exc))
        return
    if retry.attempt_deadline > config.lease_seconds:
        report.warn(
            "deadline_over_lease",
            f"attemptDeadline {retry.attempt_deadline:g}s is longer than runonce's lease "
            f"({config.lease_seconds:g}s): Scheduler keeps waiting after another attempt may take the run over",
        )
    window = retry_window(retry)
    if window.longest > config.retention_seconds:
        report.error(
            "retries_outlive_retention",
            f"retries can arrive up to {window.longest:g}s after the first attempt "
            f"({retry.describe()}), longer than runonce's retention ({config.retention_seconds:g}s): a late retry "
            "finds no record and runs again",
        )
    if schedule is not None:
        gap = _shortest_gap(schedule, job.get("timeZone"), config)
        if gap is not None and window.longest > gap[0]:
            report.warn(
                "retries_overlap_next_run",
                f"a failing run can be retried for up to {window.longest:g}s "
                f"({window.retries} retries: {retry.describe()}), longer than the {gap[0]:g}s between its runs "
                f"at {gap[1]}: Scheduler never runs a job twice at once, so the next run waits for the retries "
                "and can be skipped; lower retryCount/maxRetryDuration/maxBackoffDuration, or run less often",
            )


def _shortest_gap(schedule: Schedule, zone_name: str | None, config: LintConfig) -> tuple[float, str] | None:
    """(seconds, fire time) of the shortest gap between two runs in the next OVERLAP_SCAN fire times
    (within DST_SCAN), or None for a schedule with fewer than two runs ahead."""
    zone = get_zone(zone_name)
    start = _now(config)
    shortest: tuple[float, str] | None = None
    previous = None
    for count, fire in enumerate(schedule.iter_after(start, zone)):
        if count >= OVERLAP_SCAN or fire > start + DST_SCAN:
            break
        if previous is not None:
            gap = (fire - previous).total_seconds()
            if shortest is None or gap < shortest[0]:
                shortest = (gap, previous.isoformat())
        previous = fire
    return shortest


def _locations_by_job(jobs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(project, job ID) -> the locations where a given job of that project and ID lives."""
    locations: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        match = JOB_NAME.fullmatch(str(job.get("name") or ""))
        if match:
            locations.setdefault((match.group(1), match.group(3)), set()).add(match.group(2))
    return locations


def _run_namespace(job: Mapping[str, Any], routes: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """(project, location, route) that key the job's runs: the URL's query, else the route's
    namespace, else empty (runonce's own rule, run/delivery.py's `parse_namespace`)."""
    target = job.get("httpTarget")
    route_name = _route_of(job)
    if not isinstance(target, Mapping) or route_name is None:
        return None
    query = parse_qs(urlsplit(str(target.get("uri", ""))).query)
    route = (routes or {}).get(route_name)
    namespace = getattr(route, "namespace", None)
    project, location = (
        query.get(key, [getattr(namespace, key, "") if namespace is not None else ""])[0]
        for key in ("project", "location")
    )
    return project, location, route_name


def _lint_regions(jobs: list[tuple[str, Mapping[str, Any]]], routes: Mapping[str, Any] | None) -> list[Finding]:
    """The same job (project and ID) in several regions, as docs/how-to/two-regions.md sets it up:
    every region's delivery of a fire time must be one run, so the regions' jobs must key runs in
    one namespace, fire at the same times and send the same body."""
    groups: dict[tuple[str, str], list[tuple[str, str, Mapping[str, Any]]]] = {}
    for path, job in jobs:
        match = JOB_NAME.fullmatch(str(job.get("name") or ""))
        if match:
            groups.setdefault((match.group(1), match.group(3)), []).append((path, match.group(2), job))
    findings: list[Finding] = []
    for (_, job_id), members in sorted(groups.items()):
        if len({location for _, location, _ in members}) < 2:
            continue
        report = _Report(members[-1][0], f"job {job_id}")
        _compare_regions(report, [(location, job) for _, location, job in members], routes)
        findings.extend(report.findings)
    return findings


def _compare_regions(
    report: _Report, members: list[tuple[str, Mapping[str, Any]]], routes: Mapping[str, Any] | None
) -> None:
    regions = ", ".join(location for location, _ in members)
    keys = [_run_namespace(job, routes) for _, job in members]
    if None not in keys and len(set(keys)) > 1:
        apart = "; ".join(
            f"{location}: {'/'.join(key or ())}" for (location, _), key in zip(members, keys, strict=True)
        )
        report.error(
            "regions_keyed_apart",
            f"this job is in {regions}, but the regions key its runs apart (project/location/route {apart}): "
            "every fire time would run once per region; give every region's URL the same route and "
            "?project=&location= (the first region's)",
        )
    fire_times = {(str(job.get("schedule", "")).strip(), _zone_key(job.get("timeZone"))) for _, job in members}
    if len(fire_times) > 1:
        report.error(
            "regions_schedule_differs",
            f"this job is in {regions} with different schedules or time zones: each region's fire times are "
            "runs of their own, so the regions do not stand in for each other",
        )
    bodies = {str(_target(job).get("body") or "") for _, job in members}
    if len(bodies) > 1:
        report.error(
            "regions_body_differs",
            f"this job is in {regions} with different bodies: the first region's delivery of a fire time runs, "
            "the others are refused with 422 payload_mismatch",
        )


def _target(job: Mapping[str, Any]) -> Mapping[str, Any]:
    target = job.get("httpTarget")
    return target if isinstance(target, Mapping) else {}


def _zone_key(name: Any) -> str:
    try:
        return get_zone(name).key
    except ScheduleError:
        return str(name)


# -- Pub/Sub push subscriptions and Eventarc triggers ------------------------------------------------

PUBSUB_DEFAULT_ACK_DEADLINE = 10.0


def _is_push_source(data: Any) -> bool:
    """A Subscription (`gcloud pubsub subscriptions describe --format=json`) or an Eventarc Trigger
    (`gcloud eventarc triggers describe --format=json`)."""
    return isinstance(data, Mapping) and (
        ("topic" in data and "pushConfig" in data) or ("destination" in data and "eventFilters" in data)
    )


def _lint_push_source(
    file: str, data: Mapping[str, Any], routes: Mapping[str, Any] | None, config: LintConfig
) -> list[Finding]:
    short = str(data.get("name") or "").rsplit("/", 1)[-1] or "(unnamed)"
    if "pushConfig" in data:
        report = _Report(file, f"subscription {short}")
        _check_subscription(report, data, routes, config)
    else:
        report = _Report(file, f"trigger {short}")
        _check_trigger(report, data, routes)
    return report.findings


def _event_route(report: _Report, where: str, url: str, source: str, routes: Mapping[str, Any] | None) -> Any:
    """The route a push endpoint or a trigger's path names, checked to take `source` deliveries."""
    match = ROUTE_URI_PATH.match(urlsplit(url).path)
    if not match:
        report.error("not_runonce_uri", f"{where} {url!r} is not a runonce delivery URL (.../v1/routes/ROUTE:run)")
        return None
    name = match.group(1)
    route = routes.get(name) if routes is not None else None
    if routes is not None and route is None:
        report.error("unknown_route", f"{where} names route {name!r}, which the routes file does not define")
    elif route is not None and route.source != source:
        report.error(
            "wrong_source",
            f"route {name!r} has source {route.source}: it refuses these deliveries (400); set source: {source}",
        )
    return route


def _check_caller(report: _Report, route: Any, email: str, what: str) -> None:
    if route is not None and route.allowed_callers and email not in route.allowed_callers:
        report.error("caller_not_allowed", f"{what} {email} is not in the route's allowed_callers (403)")


def _check_subscription(
    report: _Report, data: Mapping[str, Any], routes: Mapping[str, Any] | None, config: LintConfig
) -> None:
    """A push subscription: runonce's URL, an OIDC token, the envelope, an ack deadline that covers a
    dispatch, a retry policy and a dead-letter topic."""
    push = data.get("pushConfig") or {}
    endpoint = str(push.get("pushEndpoint") or "")
    if not endpoint:
        report.error("not_push", "has no pushConfig.pushEndpoint: runonce takes push subscriptions")
        return
    route = _event_route(report, "pushConfig.pushEndpoint", endpoint, "pubsub", routes)
    token = push.get("oidcToken")
    if not isinstance(token, Mapping) or not token.get("serviceAccountEmail"):
        report.error("no_oidc", "pushConfig has no oidcToken.serviceAccountEmail: Pub/Sub then sends no token (401)")
    else:
        _check_caller(report, route, str(token["serviceAccountEmail"]), "the push service account")
    if push.get("noWrapper") is not None:
        report.error("no_wrapper", "pushConfig.noWrapper: runonce reads the JSON envelope; unwrapped pushes get 400")
    deadline = float(data.get("ackDeadlineSeconds") or PUBSUB_DEFAULT_ACK_DEADLINE)
    if deadline < config.dispatch_timeout_seconds:
        report.warn(
            "ack_deadline_short",
            f"ackDeadlineSeconds {deadline:g} is below runonce's dispatch timeout "
            f"({config.dispatch_timeout_seconds:g}s): a slow dispatch is pushed again meanwhile (answered 409 and "
            "redelivered); set it to at least the dispatch timeout",
        )
    if not data.get("retryPolicy"):
        report.warn(
            "no_retry_policy",
            "no retryPolicy: a nacked message (409 in progress, 503) comes back at once; set an exponential "
            "backoff (e.g. 10s to 600s)",
        )
    if not data.get("deadLetterPolicy"):
        report.warn(
            "no_dead_letter",
            "no deadLetterPolicy: a delivery runonce refuses for good (400, 403, 404) is redelivered until the "
            "message expires; set a dead-letter topic",
        )


def _check_trigger(report: _Report, data: Mapping[str, Any], routes: Mapping[str, Any] | None) -> None:
    """An Eventarc trigger: runonce's path on its Cloud Run service (or URL), and the service account
    whose OIDC token Eventarc sends."""
    destination = data.get("destination") or {}
    run = destination.get("cloudRun") or {}
    url = str(run.get("path") or (destination.get("httpEndpoint") or {}).get("uri") or "")
    route = _event_route(report, "destination path", url, "cloudevents", routes)
    account = data.get("serviceAccount")
    if not account:
        report.error(
            "no_service_account", "no serviceAccount: Eventarc then sends no OIDC token a runonce route accepts (401)"
        )
    else:
        _check_caller(report, route, str(account), "the trigger's service account")
