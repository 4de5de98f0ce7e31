"""Who is delivering what: request headers and query → a `Delivery` with its `run_id`.

The identity comes from Cloud Scheduler's or Cloud Tasks' headers (looked up case-insensitively;
never trusted for authentication) and the namespace (`project`, `location`) from the query string
or the route. `run_id` is the lowercase hex sha256 of

    runonce/v1|{source}|{project}|{location}|{route}|{job_or_queue}|{schedule_time_or_task}

Every part is validated against a charset without `|`, so two different deliveries can never
produce the same canonical string. Pub/Sub and CloudEvents deliveries (events.py) have a canonical
string of their own, with their own source tags.

The body is part of a run's identity too: `parse_body` turns it into the payload and the sha256
of its canonical form, which the claim compares across retries.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

from runonce import names
from runonce.errors import ForcedRunRefused, InvalidDelivery
from runonce.schedules import Schedule
from runonce.targets.base import PayloadNotSendable, encode_json

ROUTE_PATH = "/v1/routes/{route}:run"
"""The delivery endpoint; `{route}` names a configured route."""
MAX_BODY_BYTES = 32 * 1024
"""The largest body a delivery may carry (413 above it)."""

PROJECT_PATTERN = rf"^{names.SCOPED_PROJECT_ID}$"
"""A project ID (`my-project`), optionally domain-scoped (`example.com:my-project`)."""
LOCATION_PATTERN = rf"^{names.LOCATION}$"
JOB_PATTERN = r"^[A-Za-z0-9_-]+$"  # Scheduler job IDs: letters, digits, hyphens, underscores
QUEUE_PATTERN = r"^[A-Za-z0-9-]+$"
"""A queue id (`exports`): Cloud Tasks' queue ids are letters, digits and hyphens."""
QUEUE_RESOURCE_PATTERN = r"^projects/([^/]+)/locations/([^/]+)/queues/([^/]+)$"
"""A queue's resource name (`projects/P/locations/L/queues/Q`), which some dispatchers send instead."""
TASK_PATTERN = r"^[A-Za-z0-9_-]+$"
MAX_HEADER_LENGTH = 500
RUN_ID_PATTERN = r"[0-9a-f]{64}"
"""A run_id: the lowercase hex sha256 of the canonical string (below)."""

# Header names as documented; every look-up is case-insensitive (HTTP/2 lower-cases them).
SCHEDULER_JOB = "X-CloudScheduler-JobName"
SCHEDULER_TIME = "X-CloudScheduler-ScheduleTime"
TASKS_QUEUE = "X-CloudTasks-QueueName"
TASKS_TASK = "X-CloudTasks-TaskName"
TASKS_RETRY_COUNT = "X-CloudTasks-TaskRetryCount"
TASKS_EXECUTION_COUNT = "X-CloudTasks-TaskExecutionCount"

IDENTITY_HEADERS = (SCHEDULER_JOB, SCHEDULER_TIME, TASKS_QUEUE, TASKS_TASK, TASKS_RETRY_COUNT, TASKS_EXECUTION_COUNT)
"""Every header a delivery's identity is read from: each may be given once."""

PATTERN_WORDS = {
    PROJECT_PATTERN: (
        "a project id: 6 to 30 lower-case letters, digits and hyphens, starting with a letter "
        "(my-project), optionally domain-scoped (example.com:my-project)"
    ),
    LOCATION_PATTERN: "a location: lower-case letters, digits and hyphens, starting with a letter (us-central1)",
    JOB_PATTERN: "an id of letters, digits, hyphens and underscores (as Scheduler's job ids and Tasks' task ids are)",
    QUEUE_PATTERN: "a queue id: letters, digits and hyphens",
}
"""What each identity pattern accepts, in the words an error gives (never the expression itself).
`TASK_PATTERN` is `JOB_PATTERN`'s text, so one line covers both."""

Source = Literal["scheduler", "scheduler-forced", "tasks", "pubsub", "cloudevents"]
"""Who delivered: Cloud Scheduler (a force run apart), Cloud Tasks, or an event source (events.py)."""

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
EARLIEST_SCHEDULE_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_SCHEDULE_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""Schedule times outside [1970, 9999) are refused: nothing schedules there, and at datetime's own
edges (years 1 and 9999) converting an offset to UTC overflows."""
MAX_COUNTER = 2**63 - 1
"""Cloud Tasks' counters are int64, as are SQLite's and Firestore's integers."""


def matches(pattern: str, value: str) -> bool:
    """`value` matches the whole of `pattern`, in ASCII (`$` alone would let a final newline through,
    and `\\d` would accept every script's digits)."""
    return re.fullmatch(pattern, value, flags=re.ASCII) is not None


def pattern_words(pattern: str, value: str, words: Mapping[str, str] = PATTERN_WORDS) -> str:
    """Why `value` does not match `pattern`, as a predicate in words: `is not a location: …`, or
    `is a project number; use the project id` (the mistake a number in a project field is)."""
    if pattern == PROJECT_PATTERN and matches(names.PROJECT_NUMBER, value):
        return "is a project number; use the project id (gcloud projects describe NUMBER --format='value(projectId)')"
    return f"is not {words.get(pattern, 'in the accepted form')}"


@dataclass(frozen=True)
class SchedulePolicy:
    """A route's answer to Scheduler's gaps (route fields of the same names).

    missing_schedule_time: `reject` (400) or `snap`: key the delivery by the latest fire time of
        `schedule` in `zone` at or before its receipt (groc jobs need not send the header).
    forced_runs: a delivery received more than the tolerance before its schedule time is a force
        run. `separate`: keyed apart (source scheduler-forced), deduped only among force runs for
        that time; `dedupe`: it *is* the run at that time (the scheduled delivery then replays);
        `reject`: refused with 409.
    """

    missing_schedule_time: Literal["reject", "snap"] = "reject"
    forced_runs: Literal["separate", "dedupe", "reject"] = "separate"
    schedule: Schedule | None = None
    zone: ZoneInfo | None = None


@dataclass(frozen=True)
class Delivery:
    source: Source
    project: str
    location: str
    route: str
    job: str  # Scheduler job ID, or Cloud Tasks queue name
    schedule_time: datetime | None = None  # Scheduler only
    task: str | None = None  # Cloud Tasks only
    retry_count: int | None = None  # Cloud Tasks' counters: informative, never part of the key
    execution_count: int | None = None
    may_be_forced_retry: bool = False
    """Keyed as the scheduled run, but a force run for the same time may exist (forced_runs:
    separate): while that force run is unresolved, this delivery is its retry (see `Runner`)."""
    identity: tuple[tuple[str, str], ...] = ()
    """An event's identity, (key, value) sorted by key (events.py); empty for Scheduler and Tasks.
    For an event, `job` is its subscription or source, `task` its message or event id and
    `schedule_time` its publish or event time: kept on the record, never part of the key."""

    def as_forced(self) -> Delivery:
        """The force run these headers would have been, had they arrived earlier."""
        return replace(self, source="scheduler-forced", may_be_forced_retry=False)

    @property
    def schedule_time_text(self) -> str | None:
        return format_schedule_time(self.schedule_time) if self.schedule_time else None

    @property
    def canonical(self) -> str:
        if self.identity:  # an event (events.py): six parts, the last a JSON object
            keys = json.dumps(dict(self.identity), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
            return "|".join(["runonce/v1", self.source, self.project, self.location, self.route, keys])
        last = self.task if self.source == "tasks" else self.schedule_time_text
        parts = ["runonce/v1", self.source, self.project, self.location, self.route, self.job, last]
        return "|".join(str(part) for part in parts)

    @property
    def run_id(self) -> str:
        return hashlib.sha256(self.canonical.encode("utf-8")).hexdigest()


def format_schedule_time(value: datetime) -> str:
    """UTC `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, the fraction only when non-zero."""
    utc = value.astimezone(UTC)
    fraction = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def parse_rfc3339(text: str, field: str) -> datetime:
    """A timestamp with an offset (`2026-10-16T05:00:00-07:00`), to the microsecond."""
    match = _RFC3339.fullmatch(text)
    if not match:
        raise InvalidDelivery(field, "is not an RFC 3339 timestamp (e.g. 2026-10-16T12:00:00Z)")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    fraction = fraction or ""
    if int(fraction[6:] or "0"):  # digits past the microsecond that are not all zero
        raise InvalidDelivery(field, "has sub-microsecond precision, which is not supported")
    if offset in ("Z", "z"):
        tz = UTC
    else:
        sign = -1 if offset[0] == "-" else 1
        hours, minutes = int(offset[1:3]), int(offset[4:])
        if hours > 23 or minutes > 59:
            raise InvalidDelivery(field, "has an offset out of range (at most 23:59)")
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        value = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int(fraction[:6].ljust(6, "0")),
            tzinfo=tz,
        )
    except ValueError as exc:  # month 13, Feb 30, second 60 (leap seconds are not schedulable)
        raise InvalidDelivery(field, f"is not a date and time that exists ({exc})") from exc
    # Compared as instants, whatever the offset: 9999-01-01T00:30:00+01:00 is 9998 in UTC, and
    # comparing aware datetimes subtracts offsets as timedeltas, which cannot overflow.
    if not EARLIEST_SCHEDULE_TIME <= value < LATEST_SCHEDULE_TIME:
        raise InvalidDelivery(field, "is outside the years 1970 to 9998 that runonce schedules")
    return value


def check_run_id(run_id: str, field: str = "run_id") -> str:
    """`run_id` if it is one; anything else could only be a store key no delivery makes."""
    if not re.fullmatch(RUN_ID_PATTERN, run_id, flags=re.ASCII):
        raise InvalidDelivery(field, "a run_id is 64 lowercase hex characters (the sha256 that runonce key prints)")
    return run_id


def _repeated(headers: Mapping[str, str]) -> str | None:
    """The first identity header given more than once, if any. Starlette's and httpx's headers keep
    every copy (`getlist`, `get_list`); `get` would pick one and hide the other."""
    values = getattr(headers, "getlist", None) or getattr(headers, "get_list", None)
    if values is None:
        return None  # a plain mapping holds one value per name
    for name in IDENTITY_HEADERS:
        if len(values(name)) > 1:
            return name
    return None


def _header(headers: Mapping[str, str], name: str, pattern: str | None = None) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip(" \t")  # HTTP's own whitespace; str.strip() would also eat U+00A0 and U+0085
    if not value:
        raise InvalidDelivery(name, "is empty")
    if len(value) > MAX_HEADER_LENGTH:
        raise InvalidDelivery(name, f"is {len(value)} characters long; at most {MAX_HEADER_LENGTH}")
    if pattern and not matches(pattern, value):
        raise InvalidDelivery(name, pattern_words(pattern, value))
    return value


def _counter(headers: Mapping[str, str], name: str) -> int | None:
    """Cloud Tasks' retry and execution counts: informative, but never a 500 or a value no store holds."""
    value = _header(headers, name)
    if value is None:
        return None
    if not matches(r"[0-9]{1,19}", value) or int(value) > MAX_COUNTER:
        raise InvalidDelivery(name, f"must be a count of ASCII digits from 0 to {MAX_COUNTER}")
    return int(value)


def parse_namespace(query: Mapping[str, list[str]], default: object | None) -> tuple[str, str]:
    """(project, location) from the query string, else from the route's `namespace` (`default`,
    anything with `.project` and `.location`), else ''."""
    unknown = sorted(set(query) - {"project", "location"})
    if unknown:
        raise InvalidDelivery(f"query.{unknown[0]}", "unknown query parameter; only project and location are accepted")
    values = {}
    for name, pattern in (("project", PROJECT_PATTERN), ("location", LOCATION_PATTERN)):
        given = query.get(name, [])
        if len(given) > 1:
            raise InvalidDelivery(f"query.{name}", "given more than once")
        if given:
            if not matches(pattern, given[0]):
                raise InvalidDelivery(f"query.{name}", pattern_words(pattern, given[0]))
            values[name] = given[0]
        else:
            values[name] = getattr(default, name) if default else ""
    return values["project"], values["location"]


def parse_queue(value: str, namespace: tuple[str, str]) -> tuple[str, str, str]:
    """(queue id, project, location) from `X-CloudTasks-QueueName`, which is the queue id (`Q`) or
    its resource name (`projects/P/locations/L/queues/Q`): both key the same run in namespace P/L.

    A resource name carries its own namespace. A namespace part already named by the query or the
    route must agree with it, else the delivery is refused: runs of two projects are never merged.
    """
    resource = re.fullmatch(QUEUE_RESOURCE_PATTERN, value)
    if resource is None:
        if not matches(QUEUE_PATTERN, value):
            raise InvalidDelivery(
                TASKS_QUEUE,
                f"is neither {PATTERN_WORDS[QUEUE_PATTERN]}, nor a queue's resource name "
                "(projects/PROJECT/locations/LOCATION/queues/QUEUE)",
            )
        return value, namespace[0], namespace[1]
    project, location, queue = resource.groups()
    parts = (
        ("project", project, PROJECT_PATTERN, namespace[0]),
        ("location", location, LOCATION_PATTERN, namespace[1]),
    )
    for part, named, pattern, given in (*parts, ("queue", queue, QUEUE_PATTERN, "")):
        if not matches(pattern, named):
            raise InvalidDelivery(
                TASKS_QUEUE, f"the {part} in the queue's resource name {pattern_words(pattern, named)}"
            )
        if given and given != named:
            raise InvalidDelivery(
                TASKS_QUEUE,
                f"the queue is in {part} {named!r}, but this delivery's namespace (query parameter "
                f"{part}, else the route's namespace) says {given!r}; runs of different {part}s are never "
                f"merged: send {part}={named}, or none",
            )
    return queue, project, location


def parse_delivery(
    route: str,
    headers: Mapping[str, str],
    namespace: tuple[str, str],
    received_at: datetime,
    forced_run_tolerance: timedelta,
    policy: SchedulePolicy | None = None,
) -> Delivery:
    """The delivery's identity. `headers` must look up names case-insensitively (Starlette's do).
    `policy` is the route's (default: reject a missing schedule time, keep force runs separate).

    Raises `InvalidDelivery` naming the header at fault (`ForcedRunRefused` for a refused force run).
    """
    policy = policy or SchedulePolicy()
    repeated = _repeated(headers)
    if repeated:
        raise InvalidDelivery(repeated, "given more than once; a delivery carries each identity header once")
    project, location = namespace
    job = _header(headers, SCHEDULER_JOB, JOB_PATTERN)
    queue = _header(headers, TASKS_QUEUE)
    if job and queue:
        raise InvalidDelivery("X-CloudScheduler-JobName", "a delivery is from Cloud Scheduler or Cloud Tasks, not both")
    if queue:
        queue, project, location = parse_queue(queue, (project, location))
        task = _header(headers, TASKS_TASK, TASK_PATTERN)
        if task is None:
            raise InvalidDelivery("X-CloudTasks-TaskName", "missing (Cloud Tasks sends it with every task)")
        return Delivery(
            source="tasks",
            project=project,
            location=location,
            route=route,
            job=queue,
            task=task,
            retry_count=_counter(headers, TASKS_RETRY_COUNT),
            execution_count=_counter(headers, TASKS_EXECUTION_COUNT),
        )
    if job is None:
        raise InvalidDelivery(
            "X-CloudScheduler-JobName",
            "missing: a delivery needs X-CloudScheduler-JobName + X-CloudScheduler-ScheduleTime "
            "or X-CloudTasks-QueueName + X-CloudTasks-TaskName",
        )
    schedule_text = _header(headers, SCHEDULER_TIME)
    if schedule_text is None:
        if policy.missing_schedule_time == "snap" and policy.schedule is not None:
            return _snapped(policy, received_at, project, location, route, job)
        raise InvalidDelivery(
            "X-CloudScheduler-ScheduleTime",
            "missing (Scheduler omits it for groc schedules and some forced runs; without it the run "
            "cannot be told apart from others; a route can set missing_schedule_time: snap)",
        )
    schedule_time = parse_rfc3339(schedule_text, "X-CloudScheduler-ScheduleTime")
    # A force run carries the *next* schedule time and arrives early: keep it apart from that run.
    forced = received_at < schedule_time - forced_run_tolerance
    if forced and policy.forced_runs == "reject":
        raise ForcedRunRefused(
            "X-CloudScheduler-ScheduleTime",
            f"{schedule_text} is {(schedule_time - received_at).total_seconds():.0f}s ahead of receipt: this is "
            "a force run (gcloud scheduler jobs run / 'Force run'), and this route refuses them "
            "(forced_runs: reject); the run at that time will be delivered when it is due",
        )
    separate = policy.forced_runs == "separate"
    return Delivery(
        source="scheduler-forced" if forced and separate else "scheduler",
        project=project,
        location=location,
        route=route,
        job=job,
        schedule_time=schedule_time,
        may_be_forced_retry=separate and not forced,
    )


def _snapped(
    policy: SchedulePolicy, received_at: datetime, project: str, location: str, route: str, job: str
) -> Delivery:
    """The run a header-less delivery belongs to: the latest fire time at or before its receipt."""
    assert policy.schedule is not None
    zone = policy.zone or ZoneInfo("UTC")
    fire = policy.schedule.latest_at_or_before(received_at, zone)
    if fire is None:
        raise InvalidDelivery(
            "X-CloudScheduler-ScheduleTime",
            f"missing, and the route's schedule {policy.schedule.text!r} has no fire time before "
            f"{received_at:%Y-%m-%dT%H:%M:%SZ}",
        )
    return Delivery(
        source="scheduler",
        project=project,
        location=location,
        route=route,
        job=job,
        schedule_time=fire.astimezone(UTC),
    )


def parse_body(raw: bytes) -> tuple[dict[str, Any], str]:
    """The JSON object body (empty body = `{}`) and the sha256 of its canonical form, so that
    retries with re-ordered keys or other whitespace count as the same body. Raises
    `InvalidDelivery` (field `body`) for anything but UTF-8 JSON that every target can send:
    no duplicate keys, no NaN/Infinity, integers within int64, nesting within the targets' limit."""
    if not raw.strip():
        payload: Any = {}
    else:
        payload = load_json(raw, "body", "body")
        if not isinstance(payload, dict):
            raise InvalidDelivery("body", f"body must be a JSON object, got {type(payload).__name__}")
        try:
            encode_json(payload)  # what every target sends: refuse now what none could send later
        except PayloadNotSendable as exc:
            raise InvalidDelivery("body", f"body: {exc.message}") from exc
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return payload, hashlib.sha256(canonical.encode("utf-8")).hexdigest()  # pragma: no mutate - codecs ignore case


def load_json(raw: bytes, field: str, subject: str) -> Any:
    """UTF-8 JSON with the delivery body's rules (no repeated key, no NaN/Infinity, integers within
    64 bits, bounded nesting). Raises `InvalidDelivery` naming `field`; `subject` names it in words."""
    try:  # strict UTF-8: json.loads(bytes) would also guess UTF-16 and UTF-32
        text = raw.decode("utf-8")  # pragma: no mutate - "UTF-8" names the same codec
    except UnicodeDecodeError as exc:
        raise InvalidDelivery(field, f"{subject} is not valid UTF-8") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=_short_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:  # its message holds a position, never the text
        raise InvalidDelivery(field, f"{subject} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidDelivery(field, f"{subject} nests objects and arrays too deeply") from exc
    except ValueError as exc:  # the rules of the hooks below
        raise InvalidDelivery(field, f"{subject} is not accepted JSON: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object; a key given twice is refused, as the two could mean different runs' payloads."""
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("an object has the same key twice")
    return value


def _short_int(digits: str) -> int:
    """An integer of at most 20 characters (int64 has 19 digits; encode_json checks the range), so
    Python's 4300-digit limit, whose error quotes the number, is never reached."""
    if len(digits) > 20:
        raise ValueError("an integer is beyond 64 bits")
    return int(digits)
