"""One delivery, start to finish: claim → (reconcile) → dispatch → finish.

    claim      CREATE/TAKEOVER: we hold the run       REPLAY: duplicate (a skipped run: skipped)
               BUSY: in_progress                       MISMATCH: payload_mismatch   store down: unavailable
    reconcile  only when the record we took over was in_progress (its attempt may have created
               an execution): found -> complete with it, can't tell -> unknown and keep the claim
    guard      late, or the route's previous execution still running (guarantees.py): record
               `skipped`, or give the claim back (waiting)
    dispatch   within one deadline (RUNONCE_DISPATCH_TIMEOUT_SECONDS < lease), so an attempt is
               always done before its lease runs out
    finish     fenced on attempt_id: success -> completed; throttled/failed -> failed (released);
               unknown -> stays in_progress, a later attempt reconciles after the lease

The runner raises `errors.DeliveryError`s built from facts (errors.py); the web layer turns them,
or the `RunResult`, into the HTTP answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, NoReturn, Protocol

from runonce import errors
from runonce.metrics import Metrics
from runonce.run import guarantees
from runonce.run.admission import RouteLimits, Shutdown
from runonce.run.delivery import Delivery
from runonce.stores import Claim, Decision, Fenced, Finish, NewRun, RunRecord, RunStore, StoreUnavailable
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, SKIPPED
from runonce.targets import (
    NOTHING_SENT,
    DispatchRequest,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    encode_json,
)

logger = logging.getLogger("runonce.protocol")

THROTTLE_BACKOFF_SECONDS = 10.0
"""Retry-After for a throttled target that named no delay."""
ROUTE_BUSY_RETRY_AFTER_SECONDS = 5.0
"""Retry-After when a route is at its `max_concurrent_dispatches`."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def _new_run(delivery: Delivery, body_sha256: str) -> NewRun:
    return NewRun(
        run_id=delivery.run_id,
        route=delivery.route,
        source=delivery.source,
        project=delivery.project,
        location=delivery.location,
        job=delivery.job,
        schedule_time=delivery.schedule_time_text,
        task=delivery.task,
        body_sha256=body_sha256,
        task_retry_count=delivery.retry_count,
        task_execution_count=delivery.execution_count,
    )


FAILED_ANSWER = "target failed: "
"""How a record's `last_error` begins after a `failed` answer (the target refused and created nothing),
and only then: a throttled, waiting or given-back attempt also leaves the run failed, but did not fail."""


def answered_failed(previous: RunRecord | None) -> bool:
    """Whether the attempt before this one answered `failed` (not throttled, waiting or given back): a
    retry that completes the run then made a failure good (Terraform's target_failures alert)."""
    return previous is not None and previous.status == FAILED and (previous.last_error or "").startswith(FAILED_ANSWER)


@dataclass(frozen=True)
class RunResult:
    """A successful answer: `processed` (this attempt dispatched or reconciled), `duplicate`, or
    `skipped` (not dispatched, with its reason; the same answer on every replay)."""

    status: str
    record: RunRecord
    replayed: bool = False
    recovered_failure: bool = False  # processed by a retry whose previous attempt answered `failed`

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"run_id": self.record.run_id, "status": self.status, "route": self.record.route}
        if self.record.target is not None:
            body["target"] = self.record.target
        if self.status == SKIPPED:
            body["reason"], body["message"] = guarantees.skip_reason(self.record)
        return body


class RouteRules(Protocol):
    """What the Runner holds a route to before dispatching: its `guard` (overlap policy and
    max_lateness_seconds, guarantees.py) and its `max_concurrent_dispatches`. A `routes.Route` is one."""

    @property
    def guard(self) -> guarantees.RouteGuard: ...

    @property
    def max_concurrent_dispatches(self) -> int | None: ...


@dataclass(frozen=True)
class Rules:
    """`RouteRules` given by hand: for a route with no routes-file entry (the audit's own) and tests."""

    guard: guarantees.RouteGuard = guarantees.UNGUARDED
    max_concurrent_dispatches: int | None = None


INTERNAL_ROUTE_PREFIX = "_"
"""Routes runonce keys its own runs under (the audit's `_audit`): no configured route can start with it."""


class Runner:
    """Applies the protocol for every route. Shared by all requests of the process.

    Every path that may start a downstream execution (a Scheduler or Tasks delivery, a catch-up, a
    backfill over HTTP or from the CLI) runs through a Runner, and a Runner cannot be built without
    each route's rules: the overlap policy, max_lateness_seconds and max_concurrent_dispatches."""

    def __init__(
        self,
        store: RunStore,
        targets: Mapping[str, Target],
        *,
        routes: Mapping[str, RouteRules],
        lease: timedelta,
        retention: timedelta,
        dispatch_timeout: timedelta,
        clock: Callable[[], datetime] = utcnow,
        metrics: Metrics | None = None,
        shutdown: Shutdown | None = None,
    ):
        """`routes`: route -> its rules (the loaded routes file: `Route`s are `RouteRules`); every
        target's route must have them, but for internal routes (`_audit`), which have none.
        `shutdown`: the drain that `runonce serve` starts on SIGTERM (by default one of the runner's own)."""
        if dispatch_timeout >= lease:
            raise ValueError("the dispatch timeout must be below the lease")
        unruled = sorted(name for name in targets if name not in routes and not name.startswith(INTERNAL_ROUTE_PREFIX))
        if unruled:
            raise ValueError(f"no route rules for target(s) {', '.join(unruled)}: pass the routes they belong to")
        self.limits = RouteLimits(
            {name: rules.max_concurrent_dispatches for name, rules in routes.items() if rules.max_concurrent_dispatches}
        )
        self.guards = {name: rules.guard for name, rules in routes.items() if rules.guard.active}
        self.shutdown = shutdown if shutdown is not None else Shutdown()
        self.store = store
        self.targets = targets
        self.lease = lease
        self.retention = retention
        self.dispatch_timeout = dispatch_timeout
        self.clock = clock
        self.metrics = metrics or Metrics()

    async def run(
        self, delivery: Delivery, payload: dict[str, Any], body_sha256: str, *, late_ok: bool = False
    ) -> RunResult:
        """`late_ok`: an operator's or a catch-up's explicit run of a past time, which the route's
        max_lateness_seconds does not stop (its overlap policy still applies)."""
        route = delivery.route
        if self.shutdown.draining:
            raise errors.ShuttingDown(run_id=delivery.run_id, route=route)
        now = self.clock()
        claim = await self._claim(delivery, body_sha256, now)
        found = claim.record
        run_id = found.run_id  # the force run's, when this delivery turned out to be its retry
        context = {"run_id": run_id, "route": route}
        if claim.decision is Decision.REPLAY:
            return RunResult(SKIPPED if found.status == SKIPPED else "duplicate", found, replayed=True)
        if claim.decision is Decision.BUSY:
            raise errors.LeaseHeld(
                attempt=found.attempts,
                lease_expires=found.lease_expires,
                retry_after=(found.lease_expires - now).total_seconds(),
                **context,
            )
        if claim.decision is Decision.MISMATCH:
            raise errors.PayloadMismatch(recorded_sha256=found.body_sha256, body_sha256=body_sha256, **context)
        if self.shutdown.draining:
            # Claimed while shutdown began, not dispatched: give the run back so that the retry
            # does not wait out the lease.
            unreleased = await self._give_back(claim, "runonce shut down before dispatching")
            raise errors.ShuttingDown(claimed=True, unreleased=unreleased, **context)
        if not self.limits.admit(route):
            return await self._route_busy(claim, self.limits.max_in_flight[route])
        try:
            return await self._dispatch(claim, payload, late_ok)
        finally:
            self.limits.done(route)

    async def _claim(self, delivery: Delivery, body_sha256: str, now: datetime) -> Claim:
        """Claim the delivery's run. A delivery keyed as the scheduled run may be the retry of a
        force run for the same time (Scheduler retries with the same headers, and a retry can
        arrive inside the forced-run tolerance). Scheduler never has two executions of a job
        outstanding, so until that force run completes or is skipped (while in_progress, or failed
        and retried) the delivery is its retry.
        The force run's record is read beside the claim, so a fresh scheduled run still costs
        one round trip before dispatching."""
        context = {"run_id": delivery.run_id, "route": delivery.route}
        if not delivery.may_be_forced_retry:
            return await self._store_claim(_new_run(delivery, body_sha256), now, context)
        forced = delivery.as_forced()
        claimed, forced_record = await asyncio.gather(
            self._store_claim(_new_run(delivery, body_sha256), now, context),
            self._forced_record(forced.run_id, now, context),
            return_exceptions=True,
        )
        for outcome in (claimed, forced_record):
            if isinstance(outcome, BaseException) and not isinstance(outcome, errors.StoreDown):
                raise outcome
        if isinstance(claimed, errors.StoreDown):
            raise claimed
        assert isinstance(claimed, Claim)
        if isinstance(forced_record, errors.StoreDown):
            # Cannot tell which run this delivery is: hold nothing, let Scheduler retry.
            await self._undo(claimed, "could not tell whether this delivery retries a force run")
            raise forced_record
        assert not isinstance(forced_record, BaseException)  # raised above, StoreDown included
        if forced_record is None or forced_record.status in (COMPLETED, SKIPPED):
            return claimed  # no force run, or one resolved for good: the delivery is the scheduled run
        logger.info(
            "run %s: force run %s for the same time is unresolved; this delivery is its retry",
            delivery.run_id,
            forced.run_id,
        )
        await self._undo(claimed, f"this delivery was a retry of force run {forced.run_id}")
        return await self._store_claim(_new_run(forced, body_sha256), now, {**context, "run_id": forced.run_id})

    async def _store_claim(self, new: NewRun, now: datetime, context: dict[str, Any]) -> Claim:
        try:
            with self.metrics.store_timer("claim"):
                return await self.store.claim(new, now, self.lease, self.retention)
        except StoreUnavailable as exc:
            raise errors.StoreDown(exc, **context) from exc

    async def _forced_record(self, run_id: str, now: datetime, context: dict[str, Any]) -> RunRecord | None:
        try:  # not timed: it runs beside the claim, whose timer covers it
            return await self.store.get(run_id, now)
        except StoreUnavailable as exc:
            raise errors.StoreDown(exc, **context) from exc

    async def _undo(self, claim: Claim, reason: str) -> None:
        """Give back a claim won for the wrong run (nothing dispatched). If that fails, the lease
        runs out and the next attempt takes over (and reconciles, finding nothing)."""
        if not claim.won:
            return
        with contextlib.suppress(errors.InProgress):  # fenced: another attempt holds that run now,
            await self._give_back(claim, reason)  # nothing of ours to give back

    async def _route_busy(self, claim: Claim, limit: int) -> RunResult:
        """Over the route's limit: give the claim back untouched downstream and answer 429."""
        held = claim.record
        unreleased = await self._give_back(claim, errors.RouteBusy.situation(held.route, limit))
        raise errors.RouteBusy(
            limit,
            unreleased=unreleased,
            retry_after=ROUTE_BUSY_RETRY_AFTER_SECONDS,
            run_id=held.run_id,
            route=held.route,
            target={"type": self.targets[held.route].type, "resource": None},
        )

    async def _give_back(self, claim: Claim, reason: str) -> StoreUnavailable | None:
        """Release a claim this attempt will not dispatch; return why it could not be, if so. When
        the record taken over was in_progress an earlier attempt may have created an execution:
        the run then stays in_progress with its lease ended, so the next attempt reconciles;
        otherwise it is failed."""
        previous = claim.previous
        may_exist = previous is not None and previous.status == IN_PROGRESS
        try:
            await self._finish(claim, Finish(status=IN_PROGRESS if may_exist else FAILED, last_error=reason))
            if may_exist:
                await self.store.release(claim.record.run_id, self.clock())
        except Fenced as exc:
            raise self._fenced(claim, exc) from exc
        except StoreUnavailable as exc:
            return exc
        return None

    async def _finish(self, claim: Claim, finish: Finish) -> RunRecord:
        with self.metrics.store_timer("finish"):
            return await self.store.finish(claim, finish, self.clock())

    async def _dispatch(self, claim: Claim, payload: dict[str, Any], late_ok: bool) -> RunResult:
        held = claim.record
        target = self.targets[held.route]
        rules = self.guards.get(held.route)
        guard: Callable[[], Awaitable[None]] | None = None
        if rules is not None:
            if late_ok:
                rules = guarantees.RouteGuard(overlap=rules.overlap)
            guard = partial(guarantees.check, rules, held, target, self.store, self.clock)

        request = DispatchRequest(
            run_id=held.run_id,
            route=held.route,
            job=held.job,
            schedule_time=held.schedule_time,
            source=held.source,
            payload=payload,
            task=held.task,
            attempt=held.attempts,
            created_at=held.created_at,
        )
        previous = claim.previous
        must_reconcile = previous is not None and previous.status == IN_PROGRESS
        try:
            encode_json(payload)  # checked at intake too: a payload no target can send is `failed` here
            resource = await self._call_target(target, request, previous if must_reconcile else None, guard)
        except guarantees.Skip as skip:
            return await self._skip(claim, skip)
        except guarantees.Wait as wait:
            unreleased = await self._give_back(claim, wait.message)
            raise errors.PreviousRunning(
                wait.message,
                unreleased=unreleased,
                retry_after=guarantees.WAIT_RETRY_AFTER_SECONDS,
                run_id=held.run_id,
                route=held.route,
                target={"type": target.type, "resource": None},
            ) from wait
        except TimeoutError as exc:
            step = "reconciliation" if must_reconcile else "dispatch"
            limit = "the shutdown grace" if self.shutdown.draining else f"{self.dispatch_timeout.total_seconds():g}s"
            outcome: TargetError = TargetOutcomeUnknown(f"{step} took longer than {limit}; the target may have acted")
            return await self._finish_error(claim, target, outcome, cause=exc)
        except (TargetThrottled, TargetFailed, TargetOutcomeUnknown) as exc:
            return await self._finish_error(claim, target, exc)
        except NOTHING_SENT as exc:  # raised before a byte left (see targets/base.py): nothing was created
            outcome = TargetFailed(f"{target.type} target: nothing was sent ({type(exc).__name__})")
            return await self._finish_error(claim, target, outcome, cause=exc)
        except Exception as exc:  # an adapter bug: we cannot know what happened downstream
            logger.exception("run %s: %s target raised unexpectedly", held.run_id, target.type)
            outcome = TargetOutcomeUnknown(f"{target.type} target raised {type(exc).__name__}: {exc}")
            return await self._finish_error(claim, target, outcome, cause=exc)

        recorded = {"type": target.type, "resource": resource}
        done = Finish(status=COMPLETED, target=recorded)
        try:
            record = await self._finish(claim, done)
        except Fenced as exc:
            raise self._fenced(claim, exc) from exc
        except StoreUnavailable as exc:
            # The execution exists; only our record of it is missing. A 200 would end Scheduler's
            # retries and leave the record in_progress for good. 504 keeps the claim: the retry
            # after the lease reconciles (or re-sends the same token, which the downstream dedupes)
            # and records the execution.
            logger.warning("run %s: dispatched as %s but the store did not record it", held.run_id, resource)
            raise errors.NotRecorded(
                exc,
                lease_expires=held.lease_expires,
                retry_after=(held.lease_expires - self.clock()).total_seconds(),
                run_id=held.run_id,
                route=held.route,
                target=recorded,
            ) from exc
        return RunResult("processed", record, recovered_failure=answered_failed(previous))

    async def _skip(self, claim: Claim, skip: guarantees.Skip) -> RunResult:
        """Record the run `skipped`: terminal, so every retry replays this answer."""
        held = claim.record
        try:
            record = await self._finish(
                claim, Finish(status=SKIPPED, last_error=guarantees.skip_note(skip.reason, skip.message))
            )
        except Fenced as exc:
            raise self._fenced(claim, exc) from exc
        except StoreUnavailable as exc:
            # Nothing was dispatched; the claim stays until its lease ends, then a retry decides again.
            raise errors.SkipNotRecorded(
                skip.message,
                exc,
                lease_expires=held.lease_expires,
                retry_after=(held.lease_expires - self.clock()).total_seconds(),
                run_id=held.run_id,
                route=held.route,
            ) from exc
        logger.warning("run %s skipped (%s): %s", held.run_id, skip.reason, skip.message)
        self.metrics.runs_skipped.labels(held.route, skip.reason).inc()
        return RunResult(SKIPPED, record)

    async def _call_target(
        self,
        target: Target,
        request: DispatchRequest,
        previous: RunRecord | None,
        guard: Callable[[], Awaitable[None]] | None = None,
    ) -> str:
        """Reconcile (when `previous` may have created something), else check the route's guard,
        then dispatch; all within one deadline, which a shutdown may shorten (`Shutdown.drain`).
        The reconciliation searches by run_id: an in_progress record never names a resource
        (`target` is written only with completed). A guard that runs out of time is a `Wait`."""
        guarding = False  # pragma: no mutate - None is as falsy as False: equivalent
        try:
            async with self.shutdown.deadline(self.dispatch_timeout.total_seconds()):
                with self.metrics.dispatching(target.type):
                    if previous is not None:
                        resource = await target.reconcile(request)
                        if resource is not None:
                            logger.info("run %s: reconciled with %s, nothing dispatched", request.run_id, resource)
                            return resource
                    if guard is not None:
                        guarding = True
                        await guard()
                        guarding = False
                    return await target.dispatch(request)
        except TimeoutError as exc:
            if guarding:
                raise guarantees.Wait("the overlap check took longer than the dispatch timeout") from exc
            raise

    async def _finish_error(
        self, claim: Claim, target: Target, outcome: Exception, cause: BaseException | None = None
    ) -> NoReturn:
        """Record a non-success outcome, then raise the matching `errors.DeliveryError`."""
        held = claim.record
        message = getattr(outcome, "message", str(outcome))
        unknown = isinstance(outcome, TargetOutcomeUnknown)
        recorded = FAILED_ANSWER + message if isinstance(outcome, TargetFailed) else message
        try:
            await self._finish(claim, Finish(status=IN_PROGRESS if unknown else FAILED, last_error=recorded))
            unrecorded = None
        except Fenced as exc:
            raise self._fenced(claim, exc) from exc
        except StoreUnavailable as exc:
            # The record stays in_progress until its lease ends: retries wait for it, then reconcile.
            unrecorded = exc

        context: dict[str, Any] = {
            "run_id": held.run_id,
            "route": held.route,
            "target": {"type": target.type, "resource": None},
            "unrecorded": unrecorded,
        }
        if unknown:
            raise errors.DispatchUnknown(
                message,
                lease_expires=held.lease_expires,
                retry_after=(held.lease_expires - self.clock()).total_seconds(),
                **context,
            ) from (cause or outcome)
        if isinstance(outcome, TargetThrottled):
            retry_after = outcome.retry_after if outcome.retry_after is not None else THROTTLE_BACKOFF_SECONDS
            raise errors.DispatchThrottled(message, retry_after=retry_after, **context) from (cause or outcome)
        raise errors.DispatchFailed(message, **context) from (cause or outcome)

    def _fenced(self, claim: Claim, exc: Fenced) -> errors.LostRun:
        held = claim.record
        logger.warning("run %s: attempt %s was fenced off: %s", held.run_id, held.attempt_id, exc)
        found = exc.found
        retry_after = (found.lease_expires - self.clock()).total_seconds() if found else 1
        return errors.LostRun(exc, retry_after=retry_after, run_id=held.run_id, route=held.route)
