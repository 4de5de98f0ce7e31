"""The invariants of issue 10, checked over one finished history (Jepsen-style: over what every
party saw, not over the code's own view). `world.covered` counts what the history exercised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.api.answers import ANSWERS
from app.stores import RunRecord
from app.stores.base import COMPLETED, IN_PROGRESS

if TYPE_CHECKING:
    from .world import World

# Every answer the status table allows: (HTTP status, body status).
STATUS_TABLE = {(200, "processed"), (200, "duplicate")} | {
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
                violations.append(f"I1 run {run_id[:8]} on {downstream.route}: {len(executions)} executions ({origins})")

    # I2: an execution that was failing and is still retried after the faults stopped (and every
    # lease they left ran out) ends with a 200. A lone 409 after that point can only come from a
    # concurrent duplicate delivery, which is fine.
    settled = config.quiet_at + config.lease + 2 * config.max_skew + config.dispatch_timeout + config.store_timeout
    for outcome in outcomes.values():
        relevant = [(t, a) for t, a in outcome.attempts if a is None or a.status != "forced_run_refused"]
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

    # I3: no record stays in_progress with nothing in flight, unless Scheduler gave up on a run it maps to.
    for record in records:
        if record.status != IN_PROGRESS:
            continue
        key = (record.job, record.task if record.source == "tasks" else record.schedule_time)
        mine = [o for o in outcomes.values() if o.execution.key == key]
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
        if record is None or record.status != COMPLETED:
            state = record.status if record else "no record"
            violations.append(f"I5 {answer.execution} was told {answer.status} for run {answer.body.get('run_id', '')[:8]}, record: {state}")
        elif "target" in answer.body and answer.body["target"] != record.target:
            violations.append(f"I5 {answer.execution} was told target {answer.body['target']}, record has {record.target}")
    return violations
