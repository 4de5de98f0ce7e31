"""The invariants, checked over one finished history (Jepsen-style: over what every
party saw, not over the code's own view). `world.covered` counts what the history exercised."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runonce.api.answers import ANSWERS
from runonce.run.guarantees import skip_reason
from runonce.stores import RunRecord
from runonce.stores.base import COMPLETED, IN_PROGRESS, SKIPPED

if TYPE_CHECKING:
    from .world import Answer, Outcome, World

OVERLAP = ("ovs", "ovw")

# Every answer the status table allows: (HTTP status, body status).
STATUS_TABLE = {(200, "processed"), (200, "duplicate"), (200, "skipped")} | {
    (answer.http_status, answer.status) for answer in ANSWERS.values()
}


def check(world: World, records: list[RunRecord]) -> list[str]:
    config = world.config
    violations = list(world.violations)
    by_id = {r.run_id: r for r in records}
    outcomes = world.outcomes

    # I1: at most one downstream execution per run and target (the downstream's own count, which
    # is also what reconciliation sees).
    world.covered["web histories"] += config.web
    keys_by_origin: dict[str, set[str]] = {}
    for downstream in world.downstreams.values():
        for run_id, executions in downstream.executions.items():
            for _, _, origin in executions:
                keys_by_origin.setdefault(origin, set()).add(run_id)
    # Allowed (see README, Guarantees): a completed force run whose 200 was lost, retried inside
    # the tolerance, runs as the scheduled run. Counted, to see how often it happens.
    world.covered["executions that started two runs"] += sum(len(keys) > 1 for keys in keys_by_origin.values())
    for downstream in world.downstreams.values():
        world.covered["downstream executions"] += sum(len(e) for e in downstream.executions.values())
        for run_id, executions in downstream.executions.items():
            if len(executions) > 1:
                origins = ", ".join(f"{o}@{t:.2f}" for _, t, o in executions)
                violations.append(
                    f"I1 run {run_id[:8]} on {downstream.route}: {len(executions)} executions ({origins})"
                )

    # I2: an execution that was failing and is still retried after the faults stopped (and every
    # lease they left ran out) ends with a 200. A lone 409 after that point can only come from a
    # concurrent duplicate delivery, which is fine. With an attempt deadline shorter than README's
    # retry rule allows, Scheduler abandons attempts runonce is still completing: such an attempt
    # is judged by the answer runonce gave it late, when that is a 200 or a 409 `waiting` for good
    # reason (seeds 52005337, 52005348: the previous execution ran past Scheduler's retry window, a
    # missed run by README's overlap `wait`; 57005603: the last retry processed, 0.43 s after it
    # was sent with a 0.4 s deadline).
    settled = config.quiet_at + config.lease + 2 * config.max_skew + config.dispatch_timeout + config.store_timeout
    for outcome in outcomes.values():
        answered_late = {
            i
            for i, (_, a) in enumerate(outcome.attempts)
            if a is None and _answered_past_a_short_deadline(world, outcome, i)
        }
        world.covered["attempts past a short deadline, answered 200 or waiting (I2)"] += len(answered_late)
        relevant = [
            (t, a)
            for i, (t, a) in enumerate(outcome.attempts)
            if not _excused(world, outcome, a) and i not in answered_late
        ]
        late = [a for t, a in relevant if t >= settled]
        failing = any(a is None or not a.ok for _, a in relevant)
        owed = failing and bool(late) and (len(late) >= 2 or late[0] is None or late[0].status != "in_progress")
        world.covered["executions"] += 1
        world.covered["force runs"] += outcome.execution.forced
        world.covered["owed completion (I2)"] += owed
        world.covered["gave up"] += not outcome.succeeded
        if owed and not outcome.succeeded:
            seen = [(round(t, 2), a.code if a else None) for t, a in outcome.attempts]
            violations.append(f"I2 {outcome.execution.id} retried after the faults stopped but never succeeded: {seen}")

    # I1 for events: one event published under several message or event ids (a Cloud Storage
    # event) starts at most one downstream execution, whatever run_ids runonce gave its deliveries.
    started_by: dict[str, int] = {}
    for downstream in world.downstreams.values():
        for executions in downstream.executions.values():
            for _, _, origin in executions:
                started_by[origin] = started_by.get(origin, 0) + 1
    groups: dict[str, list[str]] = {}
    for event in config.events:
        assert event.event is not None
        groups.setdefault(event.event, []).append(event.id)
    for group, ids in groups.items():
        world.covered["events under several ids"] += len(ids) > 1
        started = sum(started_by.get(i, 0) for i in ids)
        if started > 1:
            violations.append(f"I1 event {group} (delivered as {', '.join(ids)}) started {started} executions")

    # I3: no record stays in_progress with nothing in flight, unless Scheduler gave up on a run it maps to.
    for record in records:
        if record.status != IN_PROGRESS:
            continue
        key = (record.job, record.task if record.source == "tasks" else record.schedule_time)
        mine = [o for o in outcomes.values() if o.execution.key == key]
        if record.source in ("pubsub", "cloudevents"):  # an event's record is found by the run_id it was answered
            mine = [
                o for o in outcomes.values() if any(a and a.body.get("run_id") == record.run_id for _, a in o.attempts)
            ]
        if mine and all(o.succeeded for o in mine):
            violations.append(
                f"I3 run {record.run_id[:8]} ({record.source} {key}) is in_progress for good, yet Scheduler "
                f"was answered 200 for every execution of it ({', '.join(o.execution.id for o in mine)})"
            )

    # I4: every answer is in the status table.
    for answer in world.answers:
        if (answer.code, answer.status) not in STATUS_TABLE:
            violations.append(f"I4 {answer.execution} got {answer.code} {answer.status}: {answer.body}")

    # I5: a 200 agrees with the record: completed, with the target it reported.
    for answer in world.answers:
        if not answer.ok:
            continue
        record = by_id.get(answer.body.get("run_id", ""))
        expected = SKIPPED if answer.status == "skipped" else COMPLETED
        if record is None or record.status != expected:
            state = record.status if record else "no record"
            violations.append(
                f"I5 {answer.execution} was told {answer.status} for run {answer.body.get('run_id', '')[:8]}, record: "
                f"{state}"
            )
        elif answer.status == "skipped" and answer.body.get("reason") != skip_reason(record)[0]:
            violations.append(
                f"I5 {answer.execution} was told skipped ({answer.body.get('reason')}), record: {record.last_error}"
            )
        elif "target" in answer.body and answer.body["target"] != record.target:
            violations.append(
                f"I5 {answer.execution} was told target {answer.body['target']}, record has {record.target}"
            )
    violations += _guarantees(world, records)
    violations += _catch_ups(world, by_id)
    violations += _not_due(world, by_id)
    violations += _audit_answers(world)
    violations += _backfill_progress(world)
    return violations


def _backfill_progress(world: World) -> list[str]:
    """I15: a backfill makes progress on an overlap route: its first fire time is not answered
    `waiting` unless another party kept the route busy (an execution running, or another attempt
    that may have held a live claim), as a backfill's own runs must not keep each other waiting."""
    violations = []
    for backfill in world.config.backfills:
        runs = sorted(
            (a for a in world.answers if a.execution == backfill.id and "schedule_time" in a.body),
            key=lambda a: a.body["schedule_time"],
        )
        if not runs or runs[0].status != "waiting" or backfill.route not in OVERLAP:
            continue
        first = runs[0]
        world.covered["backfills whose first run waited (I15)"] += 1
        until = first.body.get("waited_at", first.answered)  # when it first waited (the CLI's path says)
        if not _route_busy(world, backfill.route, first.sent - world.config.lease, until, backfill.id):
            violations.append(
                f"I15 {backfill.id} on {backfill.route}: its first fire time {first.body['schedule_time']} was "
                "answered waiting with nothing else on the route"
            )
    return violations


def _route_busy(world: World, route: str, since: float, until: float, origin: str) -> bool:
    """Whether, between `since` and `until`, an execution ran on `route` or a party other than
    `origin` sent an attempt there (which may have held a live claim)."""
    downstream = world.downstreams[route]
    running = any(
        started <= until and downstream.ends[resource] >= since
        for executions in downstream.executions.values()
        for resource, started, _ in executions
    )
    scheduler = any(
        other.execution.route == route and any(since <= sent <= until for sent, _ in other.attempts)
        for other in world.outcomes.values()
    )
    others = any(
        run.catch_up.route == route and run.catch_up.id != origin and since <= run.answer.sent <= until
        for run in world.caught_up
    )
    return running or scheduler or others


def _job_of(world: World, route: str, origin: str) -> str:
    """The Scheduler job an execution belongs to: Scheduler's own (`j0.1`, `j0.1.forced`: job-0), or
    the route's job for a catch-up, a backfill or an audit's catch-up (`c0`, `b0`, `a0`)."""
    if origin.startswith("j"):
        return f"job-{origin[1:].split('.')[0]}"
    return str(world.routes[route].job)


def _not_due(world: World, by_id: dict[str, RunRecord]) -> list[str]:
    """I12: no execution of a fire time starts before that time, whatever started it (a force run
    of the audit job with a future schedule time included). Scheduler's own force runs are early
    by design (keyed apart, or as the time's run with forced_runs: dedupe) and are not judged."""
    from .world import T0  # (world imports this module)

    violations = []
    skew = world.config.max_skew + 0.01
    for downstream in world.downstreams.values():
        for run_id, executions in downstream.executions.items():
            record = by_id.get(run_id)
            if record is None or record.source != "scheduler" or record.schedule_time is None:
                continue
            due = (datetime.fromisoformat(record.schedule_time) - T0).total_seconds()
            for resource, t, origin in executions:
                world.covered["executions of a fire time (I12)"] += 1
                if origin.endswith(".forced"):
                    continue
                if t < due - skew:
                    violations.append(
                        f"I12 {resource} ({origin}) of fire time {record.schedule_time} started at {t:.2f}, "
                        f"{due - t:.2f}s before it was due"
                    )
    return violations


def _audit_answers(world: World) -> list[str]:
    """I14: an audit's answer agrees with its run's record, read right after: a 200 leaves it
    completed, an error answer never leaves it completed unless an earlier answer said so, or the
    run was completed before this request was sent (by an attempt that crashed after finishing:
    the error is then this request's own, such as the store failing its replay). A 422
    payload_mismatch speaks of the delivery's body, not of the run, which another delivery with
    that identity holds. The endpoint checks what can refuse the audit before claiming its run."""
    from .world import T0  # (world imports this module)

    violations, told_done = [], set()
    for answer, record in world.audits:
        run_id = answer.body.get("run_id") or answer.body.get("audit_run_id")
        completed = record is not None and record.status == COMPLETED
        done_before = (
            record is not None
            and completed
            and (record.updated_at - T0).total_seconds() + world.config.max_skew < answer.sent
        )
        if answer.ok:
            told_done.add(run_id)
            if not completed:
                violations.append(f"I14 {answer.execution} was told {answer.status}, its run's record: {record}")
        elif (
            completed
            and run_id not in told_done
            and not done_before
            and answer.status not in ("unknown", "payload_mismatch")  # the body is another delivery's
        ):
            violations.append(
                f"I14 {answer.execution} was told {answer.code} {answer.status} ({answer.body.get('error')}), "
                f"yet its run {str(run_id)[:8]} is recorded completed"
            )
    return violations


def _guarantees(world: World, records: list[RunRecord]) -> list[str]:
    """I6-I8, issue 13: what overlap and lateness promise, over the downstream's own record."""
    config, violations = world.config, []
    by_id = {r.run_id: r for r in records}
    # I6: on a route with overlap skip|wait, no execution starts while another run of the same
    # Scheduler job still runs (Scheduler never has two executions of a job outstanding; runs of
    # different jobs on one route may race, by design).
    # I13: ... whatever started it: Scheduler's delivery, a catch-up after an audit, or a backfill
    # (over HTTP or the CLI's run_all) of that job's route. Each is keyed to its job.
    for route in OVERLAP:
        started = [
            (t, run_id, _job_of(world, route, origin), resource)
            for run_id, executions in world.downstreams[route].executions.items()
            for resource, t, origin in executions
        ]
        ends = world.downstreams[route].ends
        origins = {
            resource: origin
            for executions in world.downstreams[route].executions.values()
            for resource, _, origin in executions
        }
        for t, run_id, job, resource in started:
            for other_t, other_run, other_job, other in started:
                if job == other_job and other_run != run_id and other_t <= t < ends[other]:
                    code = "I6" if origins[resource][0] == "j" and origins[other][0] == "j" else "I13"
                    violations.append(
                        f"{code} {resource} of {job} ({origins[resource]}) started at {t:.2f} while {other} "
                        f"({origins[other]}) ran ({other_t:.2f}-{ends[other]:.2f})"
                    )
    for record in records:
        world.covered[f"runs {record.status}"] += 1
        if record.status == SKIPPED:
            world.covered[f"runs skipped ({skip_reason(record)[0]})"] += 1
            # I7: a skipped run started nothing.
            found = sum(len(d.executions.get(record.run_id, ())) for d in world.downstreams.values())
            if found:
                violations.append(
                    f"I7 run {record.run_id[:8]} is skipped ({record.last_error}) yet has {found} execution(s)"
                )
    # I8: on the lateness route, a run starts only if its first claim was in time, and is skipped
    # as late only if it was not.
    limit = timedelta(seconds=config.max_lateness)
    for run_id in world.downstreams["lat"].executions:
        record = by_id.get(run_id)
        late_ok = run_id in world.caught_up_runs  # a catch-up or backfill runs a past time on purpose
        if record is not None and record.source == "scheduler" and _lateness(record) > limit and not late_ok:
            violations.append(f"I8 run {run_id[:8]} was dispatched though first claimed {_lateness(record)} late")
    for record in records:
        if record.status == SKIPPED and skip_reason(record)[0] == "late" and _lateness(record) <= limit:
            violations.append(f"I8 run {record.run_id[:8]} was skipped as late, first claimed {_lateness(record)} late")
    return violations


def _catch_ups(world: World, by_id: dict[str, RunRecord]) -> list[str]:
    """I9-I11, issue 13 §3-4: a catch-up or backfill of a fire time is the run Scheduler's delivery
    for that time is (same run_id, so I1 counts their executions together), replays a time that had
    completed, and leaves no claim held beyond its lease. A Scheduler delivery of a time whose force
    run is unresolved is that force run's retry (protocol._claim), and so is a catch-up's: answers
    for a force run are not the time's run."""
    from .world import T0  # (world imports this module)

    config, violations = world.config, []
    lease = timedelta(seconds=config.lease + config.max_skew + 0.01)
    scheduled = {e.id: e.key for sequence in config.jobs for e in sequence if not e.forced}
    # Answers that completed a fire time's own run: Scheduler's deliveries and catch-ups.
    done = [
        (scheduled.get(a.execution), a)
        for a in world.answers
        if a.ok
        and a.status in ("processed", "duplicate")
        and not _for_a_force_run(a, by_id)
        and (a.execution in scheduled or a.execution[0] in "cba")
    ]
    for run in world.caught_up:
        name, answer, key = run.catch_up.id, run.answer, (run.catch_up.job, run.time)
        world.covered["catch-up runs"] += 1
        world.covered["catch-up re-runs"] += run.rerun
        world.covered["catch-up runs answered for a force run"] += _for_a_force_run(answer, by_id)
        # I9: the same run_id as every Scheduler delivery of that fire time.
        for other in world.answers:
            if scheduled.get(other.execution) != key or _for_a_force_run(other, by_id):
                continue
            if other.body.get("run_id", run.run_id) != run.run_id:
                violations.append(
                    f"I9 {name} ran {run.time} as {run.run_id[:8]}, Scheduler's {other.execution} as "
                    f"{other.body['run_id'][:8]}"
                )
            world.covered["catch-up runs racing a Scheduler attempt"] += (
                other.sent <= answer.answered and answer.sent <= other.answered
            )
        world.covered["catch-up runs while Scheduler retries"] += any(
            o.execution.key == key and o.attempts and o.attempts[0][0] < answer.sent < o.attempts[-1][0]
            for o in world.outcomes.values()
        )
        # I10: a fire time completed before this run began is replayed: the answer is a duplicate
        # and nothing starts, whatever run_id it was keyed as.
        if any(
            a.answered <= answer.sent and (done_key == key or a.body.get("run_id") == run.run_id)
            for done_key, a in done
        ):
            world.covered["catch-up runs of a completed run"] += 1
            run_ids = {run.run_id, answer.body.get("run_id", run.run_id)}
            started = [
                t
                for d in world.downstreams.values()
                for run_id in run_ids
                for _, t, origin in d.executions.get(run_id, ())
                if origin == name and answer.sent <= t <= answer.answered
            ]
            if started or (answer.ok and answer.status != "duplicate"):
                violations.append(
                    f"I10 {name} of completed run {run.run_id[:8]} ({run.time}) answered {answer.status}, "
                    f"{len(started)} execution(s) started"
                )
        # I11: right after a crash-free run, no claim is held beyond a lease from then, and a 200
        # left the run it answered for finished.
        for record in run.records:
            if record.status != IN_PROGRESS:
                continue
            until = record.lease_expires - (T0 + timedelta(seconds=answer.answered))
            if until > lease or (answer.ok and answer.body.get("run_id") == record.run_id):
                violations.append(
                    f"I11 {name} of {run.time} answered {answer.code} {answer.status}, left run {record.run_id[:8]} "
                    f"in_progress for {until}"
                )
    return violations


def _for_a_force_run(answer: Answer, by_id: dict[str, RunRecord]) -> bool:
    record = by_id.get(answer.body.get("run_id", ""))
    return record is not None and record.source == "scheduler-forced"


def _lateness(record: RunRecord) -> timedelta:
    assert record.schedule_time is not None
    return record.created_at - datetime.fromisoformat(record.schedule_time)


def _raced_its_twin(world: World, answer: Answer) -> bool:
    """A 409 while a duplicate of the same attempt (at-least-once delivery) was in flight is the
    right answer, whatever the twin was told: `in_progress` when the twin held the claim, `waiting`
    when it held the claim of the fire time's other key (a force run's retry claims the scheduled
    run's key beside reading the force run's record, protocol._claim), which the overlap check
    cannot tell from a run being dispatched (seed 70000719: the force run's last retry)."""
    return answer.status in ("in_progress", "waiting") and any(
        other is not answer
        and other.execution == answer.execution
        and other.sent <= answer.answered
        and answer.sent <= other.answered
        for other in world.answers
    )


def _answered_past_a_short_deadline(world: World, outcome: Outcome, attempt: int) -> bool:
    """Scheduler stopped waiting for this attempt, the deadline being shorter than README's retry
    rule (dispatch timeout + claim, finish and one more store call), and runonce then answered it
    200 or 409 `waiting` for good reason: as it would have, in time."""
    config = world.config
    if config.attempt_deadline >= config.dispatch_timeout + 3 * config.store_timeout:
        return False  # Scheduler waits as long as an attempt may take: runonce was too slow
    answer = outcome.late_answer(attempt)
    return answer is not None and (answer.ok or _waited_for_good_reason(world, outcome, answer))


def _excused(world: World, outcome: Outcome, answer: Answer | None) -> bool:
    """A 409 that is no failure of runonce's: a refused force run, a wait for good reason, or a
    race with the attempt's own twin."""
    return answer is not None and (
        answer.status == "forced_run_refused"
        or _waited_for_good_reason(world, outcome, answer)
        or _raced_its_twin(world, answer)
    )


def _waited_for_good_reason(world: World, outcome: Outcome, answer: Answer | None) -> bool:
    """A 409 `waiting` is no failure when, while it was being answered, another run's execution on
    the route was running, or another run's attempt may have held a live lease (it may have been
    dispatching). Runs of several jobs on one `wait` route can so keep each other waiting."""
    if answer is None or answer.status != "waiting":
        return False
    downstream = world.downstreams[outcome.execution.route]
    since = answer.sent - world.config.lease
    running = any(
        started <= answer.answered and downstream.ends[resource] >= since
        for executions in downstream.executions.values()
        for resource, started, _ in executions
    )
    return (
        running
        or any(
            other.execution.key != outcome.execution.key
            and other.execution.route == outcome.execution.route
            and any(since <= sent <= answer.answered for sent, _ in other.attempts)
            for other in world.outcomes.values()
        )
        or any(  # a catch-up or backfill of another fire time, on the same route
            run.catch_up.route == outcome.execution.route
            and run.time != outcome.execution.key[1]
            and since <= run.answer.sent <= answer.answered
            for run in world.caught_up
        )
    )
