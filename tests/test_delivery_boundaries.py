"""The delivery parser at its edges, called directly: RFC 3339 offsets and fractions, header length
at and past the limit, the forced-run tolerance exactly at its edge, the header patterns, snapping,
and a run_id that does not depend on the machine's time zone."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest

from runonce.run.delivery import (
    MAX_HEADER_LENGTH,
    InvalidDelivery,
    SchedulePolicy,
    format_schedule_time,
    parse_body,
    parse_delivery,
    parse_rfc3339,
    pattern_words,
)
from runonce.schedules import parse_schedule

NOON = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
TOLERANCE = timedelta(seconds=5)
TIME = "X-CloudScheduler-ScheduleTime"


def deliver(headers: dict[str, str], received_at: datetime = NOON, policy: SchedulePolicy | None = None):
    return parse_delivery("etl", httpx.Headers(headers), ("proj-1", "us-central1"), received_at, TOLERANCE, policy)


def scheduled(when: str, received_at: datetime = NOON):
    return deliver({"X-CloudScheduler-JobName": "nightly", TIME: when}, received_at)


def refused(headers: dict[str, str], **kwargs) -> InvalidDelivery:
    with pytest.raises(InvalidDelivery) as caught:
        deliver(headers, **kwargs)
    return caught.value


# -- RFC 3339 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2026-10-16T12:00:00Z", "2026-10-16T12:00:00Z"),
        ("2026-10-16t12:00:00z", "2026-10-16T12:00:00Z"),  # RFC 3339 allows lower-case T and Z
        ("2026-10-16T12:00:00+00:00", "2026-10-16T12:00:00Z"),
        ("2026-10-16T22:00:00+10:00", "2026-10-16T12:00:00Z"),  # a two-digit hour offset
        ("2026-10-16T17:30:00+05:30", "2026-10-16T12:00:00Z"),
        ("2026-10-16T05:00:00-07:00", "2026-10-16T12:00:00Z"),
        ("2026-10-17T11:59:00+23:59", "2026-10-16T12:00:00Z"),  # the largest offset
        ("2026-10-16T00:01:00-11:59", "2026-10-16T12:00:00Z"),
        ("2026-10-16T12:00:00.123456Z", "2026-10-16T12:00:00.123456Z"),
        ("2026-10-16T12:00:00.1234560Z", "2026-10-16T12:00:00.123456Z"),  # zeros past the microsecond
        ("2026-10-16T12:00:00.000000000Z", "2026-10-16T12:00:00Z"),
        ("2026-10-16T12:00:00.5Z", "2026-10-16T12:00:00.500000Z"),
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"),  # the first instant runonce schedules
        ("1970-01-01T01:00:00+01:00", "1970-01-01T00:00:00Z"),
        ("9998-12-31T23:59:59.999999Z", "9998-12-31T23:59:59.999999Z"),  # the last
        ("1969-12-31T23:00:00-01:00", "1970-01-01T00:00:00Z"),  # a year-1969 text that is 1970 in UTC
        ("9999-01-01T00:59:59.999999+01:00", "9998-12-31T23:59:59.999999Z"),  # a year-9999 text that is 9998
    ],
)
def test_accepted_timestamps_and_their_utc_form(text: str, utc: str) -> None:
    parsed = parse_rfc3339(text, TIME)
    assert format_schedule_time(parsed) == utc
    assert parsed.utcoffset() is not None


@pytest.mark.parametrize(
    "text",
    [
        "2026-10-16T12:00:00+24:00",  # hour offset past 23
        "2026-10-16T12:00:00+00:60",  # minute offset past 59
        "2026-10-16T12:00:00-24:00",
        "2026-10-16T12:00:00.0000001Z",  # sub-microsecond precision
        "2026-10-16T12:00:00.1234567Z",
        "2026-10-16T12:00:00",  # no offset
        "2026-10-16 12:00:00Z",
        "2026-10-16T12:00:60Z",  # leap seconds are not schedulable
        "2026-02-30T12:00:00Z",
        "1969-12-31T23:59:59.999999Z",  # before 1970
        "9999-01-01T00:00:00Z",  # from 9999 on
        "9998-12-31T23:00:00-01:00",  # a year-9998 text that is 9999 in UTC
        "9999-01-01T01:00:00+01:00",  # a year-9999 text that is 9999 in UTC too
        "0001-01-01T00:00:00+23:59",  # datetime's first day, whatever the offset
        "0002-01-01T00:00:00Z",
    ],
)
def test_refused_timestamps_name_the_field(text: str) -> None:
    with pytest.raises(InvalidDelivery) as caught:
        parse_rfc3339(text, TIME)
    assert caught.value.field == TIME


def test_run_id_does_not_depend_on_the_machine_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    here = scheduled("2026-10-16T05:00:00-07:00")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        elsewhere = scheduled("2026-10-16T05:00:00-07:00")
        text = format_schedule_time(datetime(2026, 10, 16, 17, 30, tzinfo=ZoneInfo("Asia/Kolkata")))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert elsewhere.run_id == here.run_id and elsewhere.schedule_time_text == "2026-10-16T12:00:00Z"
    assert text == "2026-10-16T12:00:00Z"


# -- headers ----------------------------------------------------------------------------------------


def test_header_length_at_the_limit_is_accepted_and_one_past_is_refused() -> None:
    at_limit = "j" * MAX_HEADER_LENGTH
    assert scheduled_job(at_limit).job == at_limit
    error = refused({"X-CloudScheduler-JobName": at_limit + "j", TIME: "2026-10-16T12:00:00Z"})
    assert error.field == "X-CloudScheduler-JobName" and str(MAX_HEADER_LENGTH) in error.reason


def scheduled_job(job: str):
    return deliver({"X-CloudScheduler-JobName": job, TIME: "2026-10-16T12:00:00Z"})


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"X-CloudScheduler-JobName": "night/ly", TIME: "2026-10-16T12:00:00Z"}, "X-CloudScheduler-JobName"),
        ({"X-CloudScheduler-JobName": "night ly", TIME: "2026-10-16T12:00:00Z"}, "X-CloudScheduler-JobName"),
        ({"X-CloudTasks-QueueName": "q_1", "X-CloudTasks-TaskName": "t"}, "X-CloudTasks-QueueName"),
        ({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t|1"}, "X-CloudTasks-TaskName"),
        ({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t/1"}, "X-CloudTasks-TaskName"),
        ({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": ""}, "X-CloudTasks-TaskName"),
    ],
)
def test_header_patterns(headers: dict[str, str], field: str) -> None:
    assert refused(headers).field == field


def test_only_http_whitespace_is_trimmed_from_a_header() -> None:
    assert scheduled_job(" \tXnightlyX\t ").job == "XnightlyX"


def test_header_patterns_accept_every_documented_character() -> None:
    assert scheduled_job("Nightly_ETL-2").job == "Nightly_ETL-2"
    task = deliver({"X-CloudTasks-QueueName": "Queue-1", "X-CloudTasks-TaskName": "Task_1-a"})
    assert (task.source, task.job, task.task) == ("tasks", "Queue-1", "Task_1-a")


def test_a_pattern_without_words_is_explained_generically_never_by_its_expression() -> None:
    """Refusals describe what a field accepts in words; a pattern the table does not describe still
    gets words a person can read."""
    assert pattern_words(r"^[a-z]{3}$", "ABCD", words={}) == "is not in the accepted form"
    assert pattern_words(r"^[a-z]{3}$", "ABCD") == "is not in the accepted form"


@pytest.mark.parametrize(
    ("headers", "retry", "execution"),
    [
        ({"X-CloudTasks-TaskRetryCount": "3", "X-CloudTasks-TaskExecutionCount": "2"}, 3, 2),
        ({"X-CloudTasks-TaskRetryCount": " 0 "}, 0, None),
    ],
)
def test_task_counters_are_informative_and_never_the_key(headers: dict[str, str], retry, execution) -> None:
    task = deliver({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t", **headers})
    assert (task.retry_count, task.execution_count) == (retry, execution)
    assert task.run_id == deliver({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t"}).run_id


@pytest.mark.parametrize("name", ["X-CloudTasks-TaskRetryCount", "X-CloudTasks-TaskExecutionCount"])
@pytest.mark.parametrize("value", ["x", "-1", "+1", "1" * 30])
def test_a_malformed_task_counter_is_refused_naming_the_header(name: str, value: str) -> None:
    with pytest.raises(InvalidDelivery) as refused:
        deliver({"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t", name: value})
    assert refused.value.field == name


# -- force runs: the tolerance, exactly at its edge -----------------------------------------------


def test_a_delivery_exactly_the_tolerance_early_is_the_scheduled_run() -> None:
    at_edge = scheduled("2026-10-16T12:00:05Z", received_at=NOON)  # 5 s early, tolerance 5 s
    assert at_edge.source == "scheduler"
    past_edge = scheduled("2026-10-16T12:00:05.000001Z", received_at=NOON)
    assert past_edge.source == "scheduler-forced"
    assert past_edge.run_id != scheduled("2026-10-16T12:00:05.000001Z", received_at=NOON + timedelta(seconds=5)).run_id


def test_a_refused_force_run_names_the_header() -> None:
    policy = SchedulePolicy(forced_runs="reject")
    with pytest.raises(InvalidDelivery) as caught:
        deliver({"X-CloudScheduler-JobName": "nightly", TIME: "2026-10-16T13:00:00Z"}, policy=policy)
    assert caught.value.field == TIME and "3600s ahead" in caught.value.reason
    assert (
        deliver({"X-CloudScheduler-JobName": "nightly", TIME: "2026-10-16T12:00:05Z"}, policy=policy).source
        == "scheduler"
    )


@pytest.mark.parametrize(
    ("forced_runs", "when", "may_be_retry"),
    [
        ("separate", "2026-10-16T12:00:00Z", True),  # the scheduled run: perhaps a force run's retry
        ("separate", "2026-10-16T13:00:00Z", False),  # a force run: itself, never another's retry
        ("dedupe", "2026-10-16T12:00:00Z", False),  # one key for both: nothing else to look up
        ("dedupe", "2026-10-16T13:00:00Z", False),
    ],
)
def test_only_a_scheduled_delivery_on_a_separate_route_may_be_a_force_runs_retry(
    forced_runs: str, when: str, may_be_retry: bool
) -> None:
    policy = SchedulePolicy(forced_runs=forced_runs)
    delivery = deliver({"X-CloudScheduler-JobName": "nightly", TIME: when}, policy=policy)
    assert delivery.may_be_forced_retry is may_be_retry


def test_a_scheduled_delivery_taken_as_a_force_run_is_exactly_what_the_force_run_parsed_to() -> None:
    """A scheduled delivery that retries a force run is keyed as that force run: same run_id, and
    itself a force run, never again a candidate retry of another."""
    headers = {"X-CloudScheduler-JobName": "nightly", TIME: "2026-10-16T13:00:00Z"}
    on_time = deliver(headers, received_at=NOON + timedelta(hours=1))
    early = deliver(headers, received_at=NOON)
    assert on_time.may_be_forced_retry and (on_time.source, early.source) == ("scheduler", "scheduler-forced")
    assert on_time.as_forced() == early
    assert on_time.as_forced().run_id == early.run_id != on_time.run_id


def test_dedupe_keys_a_force_run_as_the_scheduled_run() -> None:
    policy = SchedulePolicy(forced_runs="dedupe")
    forced = deliver({"X-CloudScheduler-JobName": "nightly", TIME: "2026-10-16T13:00:00Z"}, policy=policy)
    assert forced.source == "scheduler"


# -- snapping a missing schedule time --------------------------------------------------------------


def test_snap_keys_the_latest_fire_time_in_utc_when_the_route_names_no_zone() -> None:
    policy = SchedulePolicy(missing_schedule_time="snap", schedule=parse_schedule("0 */6 * * *"))
    snapped = deliver({"X-CloudScheduler-JobName": "nightly"}, received_at=NOON + timedelta(hours=3), policy=policy)
    assert snapped.source == "scheduler"
    assert snapped.schedule_time_text == "2026-10-16T12:00:00Z"
    assert snapped.schedule_time.utcoffset() == timedelta(0)
    sent = scheduled("2026-10-16T12:00:00Z", received_at=NOON + timedelta(hours=3))
    assert sent.run_id == snapped.run_id  # the header and the snap agree


def test_a_snapped_schedule_time_is_utc_whatever_the_machine_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = SchedulePolicy(missing_schedule_time="snap", schedule=parse_schedule("0 */6 * * *"))
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        snapped = deliver({"X-CloudScheduler-JobName": "nightly"}, received_at=NOON + timedelta(hours=3), policy=policy)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert snapped.schedule_time.utcoffset() == timedelta(0)


def test_snap_uses_the_route_zone() -> None:
    policy = SchedulePolicy(
        missing_schedule_time="snap", schedule=parse_schedule("0 9 * * *"), zone=ZoneInfo("America/New_York")
    )
    snapped = deliver({"X-CloudScheduler-JobName": "nightly"}, received_at=NOON + timedelta(hours=3), policy=policy)
    assert snapped.schedule_time_text == "2026-10-16T13:00:00Z"  # 09:00 EDT


class NeverFired:
    """A schedule with no fire time before the delivery. Real ones always have one within the
    engine's 60-year search, so this stands in for the defensive branch."""

    text = "never"

    def latest_at_or_before(self, at: datetime, zone: ZoneInfo) -> None:
        return None


def test_snap_without_an_earlier_fire_time_is_refused_naming_the_header() -> None:
    policy = SchedulePolicy(missing_schedule_time="snap", schedule=NeverFired())  # type: ignore[arg-type]
    error = refused({"X-CloudScheduler-JobName": "nightly"}, policy=policy)
    assert error.field == TIME and "'never' has no fire time before 2026-10-16T12:00:00Z" in error.reason


def test_without_snap_a_missing_schedule_time_is_refused() -> None:
    for policy in (
        None,
        SchedulePolicy(missing_schedule_time="snap"),
        SchedulePolicy(schedule=parse_schedule("0 9 * * *")),
    ):
        assert refused({"X-CloudScheduler-JobName": "nightly"}, policy=policy).field == TIME


# -- the body: part of the run's identity ----------------------------------------------------------


def body_refused(raw: bytes) -> str:
    with pytest.raises(InvalidDelivery) as caught:
        parse_body(raw)
    assert caught.value.field == "body"
    return caught.value.reason


def test_a_body_hashes_the_same_whatever_its_key_order_and_whitespace() -> None:
    payload, digest = parse_body(b'{"b": [1, 2], "a": "\xc3\xa9"}')
    assert payload == {"a": "é", "b": [1, 2]}
    # The canonical text is fixed: records keep its hash, so a new form would turn retries across
    # an upgrade into payload mismatches.
    assert digest == hashlib.sha256('{"a":"é","b":[1,2]}'.encode()).hexdigest()
    assert parse_body(b'\n{"a":"\\u00e9","b":[1,2]}  ')[1] == digest
    assert parse_body(b"") == ({}, parse_body(b"{}")[1])


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_non_finite_constant_is_refused_by_name(constant: bytes) -> None:
    assert (
        body_refused(b'{"x": ' + constant + b"}") == f"body is not accepted JSON: {constant.decode()} is not valid JSON"
    )


def test_int64_is_the_integer_range_and_a_longer_number_is_refused_before_python_reads_it() -> None:
    assert parse_body(b'{"n": -9223372036854775808}')[0] == {"n": -9223372036854775808}  # 20 characters
    for digits in (b"-92233720368547758080", b"9" * 25, b"9" * 5000):  # 21 characters and more
        assert body_refused(b'{"n": ' + digits + b"}") == "body is not accepted JSON: an integer is beyond 64 bits"
