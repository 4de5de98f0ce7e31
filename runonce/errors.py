"""Every exception runonce raises on purpose, in one tree with one root, `RunonceError`.

    RunonceError
     ├── ConfigError             errors.py            a setting or the routes file is wrong: start-up stops
     ├── ScheduleError           schedules/errors.py  a schedule or time zone Scheduler would reject (also a ValueError)
     ├── CertsUnavailable        certs.py             token-signing certificates unreadable, none kept from before
     ├── RangeRefused            audit.py             a range the audit or backfill cannot answer truthfully
     ├── Skip, Wait              guarantees.py        a route guard's verdict, which the Runner turns into an outcome
     ├── StoreError              stores/base.py
     │    ├── StoreUnavailable                        the store did not answer; nothing is known to have changed
     │    └── Fenced                                  a finish was refused: another attempt holds the run now
     ├── TargetError             targets/base.py      a dispatch or reconciliation that did not succeed
     │    ├── TargetThrottled                         slow down; nothing was created
     │    ├── TargetFailed                            nothing was created
     │    │    └── PayloadNotSendable                 the payload cannot be sent as JSON
     │    └── TargetOutcomeUnknown                    the target may have acted
     └── DeliveryError                                a delivery that is not answered processed/duplicate
          ├── InvalidDelivery                         the request does not identify a run, or its body is refused
          │    ├── PayloadTooLarge                    body over MAX_BODY_BYTES
          │    └── ForcedRunRefused                   a force run on a route with forced_runs: reject
          ├── Unauthenticated                         no or bad bearer token
          ├── Forbidden                               the caller is not allowed
          ├── NotFound                                unknown route or run
          ├── InProgress                              the run is held by another attempt
          │    ├── LeaseHeld                          ... whose lease is live
          │    └── LostRun                            ... which fenced this one off
          ├── PayloadMismatch                         same run_id, different body
          ├── Waiting                                 not dispatched now; the claim was given back (overlap)
          │    └── PreviousRunning                    ... the route's previous execution runs, or its state is unknown
          ├── Throttled                               slow down; the claim was given back
          │    ├── DispatchThrottled                  ... the target said so
          │    └── RouteBusy                          ... the route is at max_concurrent_dispatches
          ├── Failed                                  nothing was created; the claim was given back
          │    └── DispatchFailed                     ... the target refused or nothing was sent
          ├── Unavailable                             runonce cannot take the run now; the target was not called
          │    ├── StoreDown                          ... the claim store did not answer
          │    ├── SkipNotRecorded                    ... a run to skip, but the store did not record it
          │    └── ShuttingDown                       ... SIGTERM: new runs are refused
          └── OutcomeUnknown                          the target may have acted; the claim is kept
               ├── DispatchUnknown                    ... timeout, lost response, or an adapter bug
               └── NotRecorded                        ... it acted, but the store did not record it

The branches carry facts, never HTTP. Under `DeliveryError` the families (InProgress, Throttled,
...) are what the caller is told and the leaves are what happened, each built from facts (run_id,
route, target, retry_after, the cause) by the code that saw them. `runonce/api/answers.py` alone maps
each family to its HTTP status, `status` word and headers, in one table that also feeds the
OpenAPI document.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


class RunonceError(Exception):
    """The root: catch this to catch everything runonce raises on purpose."""


class ConfigError(RunonceError):
    """Bad configuration: start-up stops with this one message. Raised by settings, the routes
    file and the store registry (a store URL whose driver is missing); it lives here, below all
    of them, so the stores need not import settings."""


def _utc(value: datetime) -> str:
    return f"{value:%Y-%m-%dT%H:%M:%SZ}"


class DeliveryError(RunonceError):
    """A delivery that ends without `processed`/`duplicate`. Its facts are what the answer names:
    `message` (the error's words), `field` (what in the request is at fault), `run_id`, `route`,
    `target` (`{type, resource}`) and `retry_after` (seconds until a retry can succeed)."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        run_id: str | None = None,
        route: str | None = None,
        target: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.field = field
        self.run_id = run_id
        self.route = route
        self.target = target
        self.retry_after = retry_after


# -- the request -------------------------------------------------------------------------------


class InvalidDelivery(DeliveryError):
    """The request does not identify a run, or its body is not accepted; nothing is claimed.
    `field` names the header, query parameter or `body` at fault, `reason` says why."""

    def __init__(self, field: str, reason: str, *, route: str | None = None, run_id: str | None = None):
        super().__init__(reason, field=field, route=route, run_id=run_id)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class PayloadTooLarge(InvalidDelivery):
    """The body is over `delivery.MAX_BODY_BYTES`."""


class ForcedRunRefused(InvalidDelivery):
    """A force run on a route with `forced_runs: reject`; nothing is claimed."""


class Unauthenticated(DeliveryError):
    """No or invalid bearer token."""

    token_sent = True
    """False when the request carried no credentials: RFC 6750 then names no error."""


class Forbidden(DeliveryError):
    """The caller is not allowed on this route (or API)."""


class NotFound(DeliveryError):
    """No such route is configured, or no such run is kept."""


# -- the run's claim -----------------------------------------------------------------------------


class InProgress(DeliveryError):
    """Another attempt holds the run; a retry after `retry_after` gets its outcome."""


class LeaseHeld(InProgress):
    def __init__(self, *, run_id: str, route: str, attempt: int, lease_expires: datetime, retry_after: float):
        super().__init__(
            f"attempt {attempt} of this run holds the lease until {_utc(lease_expires)}; "
            "retry after Retry-After seconds to get its outcome",
            run_id=run_id,
            route=route,
            retry_after=retry_after,
        )


class LostRun(InProgress):
    """This attempt's write was fenced: another attempt took the run over meanwhile."""

    def __init__(self, fenced: Exception, *, run_id: str, route: str, retry_after: float):
        super().__init__(
            f"this attempt lost the run to another attempt ({fenced}); retry to get its outcome",
            run_id=run_id,
            route=route,
            retry_after=retry_after,
        )


class PayloadMismatch(DeliveryError):
    """This run_id was delivered before with a different body; a run's body cannot change."""

    def __init__(self, *, run_id: str, route: str, recorded_sha256: str, body_sha256: str):
        super().__init__(
            f"run {run_id} was delivered with a body of sha256 {recorded_sha256}, this one is "
            f"{body_sha256}; a run's body cannot change between retries",
            field="body",
            run_id=run_id,
            route=route,
        )


def _given_back(unreleased: Exception | None) -> str:
    """What became of a claim given back before dispatching (`unreleased`: why it could not be)."""
    if unreleased is None:
        return "the claim was released before dispatching"
    return f"the claim could not be released ({unreleased}); retries wait for the lease"


def _finished(unrecorded: Exception | None) -> str:
    """What became of the claim after a throttled or failed dispatch (`unrecorded`: why the
    store could not record the outcome)."""
    if unrecorded is None:
        return "the claim was released; the next retry dispatches again"
    return (
        f"the claim is kept (the claim store could not record this outcome: {unrecorded}); retries wait for the lease"
    )


# -- before the dispatch (guarantees.py) ----------------------------------------------------------


class Waiting(DeliveryError):
    """Not dispatched now, because of the route's `overlap` policy; the claim was given back, so
    a retry after `retry_after` decides again."""


class PreviousRunning(Waiting):
    """`situation`: the route's previous execution still runs (`overlap: wait`), or its state
    could not be read (`skip` or `wait`)."""

    def __init__(
        self,
        situation: str,
        *,
        run_id: str,
        route: str,
        target: dict[str, Any],
        retry_after: float,
        unreleased: Exception | None = None,
    ):
        super().__init__(
            f"{situation}; {_given_back(unreleased)}, retry after Retry-After seconds",
            run_id=run_id,
            route=route,
            target=target,
            retry_after=retry_after,
        )


# -- the dispatch --------------------------------------------------------------------------------


class Throttled(DeliveryError):
    """Slow down: the target, or the route's own limit, says so. The claim was given back."""


class DispatchThrottled(Throttled):
    def __init__(
        self,
        reason: str,
        *,
        run_id: str,
        route: str,
        target: dict[str, Any],
        retry_after: float,
        unrecorded: Exception | None = None,
    ):
        super().__init__(
            f"{reason}; {_finished(unrecorded)}", run_id=run_id, route=route, target=target, retry_after=retry_after
        )


class RouteBusy(Throttled):
    """The route already has `max_concurrent_dispatches` dispatches in flight in this process."""

    def __init__(
        self,
        limit: int,
        *,
        run_id: str,
        route: str,
        target: dict[str, Any],
        retry_after: float,
        unreleased: Exception | None = None,
    ):
        super().__init__(
            f"{self.situation(route, limit)}; {_given_back(unreleased)}",
            run_id=run_id,
            route=route,
            target=target,
            retry_after=retry_after,
        )

    @staticmethod
    def situation(route: str, limit: int) -> str:
        """The fact alone, as the run's record keeps it (`last_error`)."""
        return f"route {route!r} already has {limit} dispatch(es) in flight (max_concurrent_dispatches)"


class Failed(DeliveryError):
    """The target created nothing; the claim was given back, so a retry dispatches again."""


class DispatchFailed(Failed):
    def __init__(
        self, reason: str, *, run_id: str, route: str, target: dict[str, Any], unrecorded: Exception | None = None
    ):
        super().__init__(
            f"{reason}; nothing was created and {_finished(unrecorded)}", run_id=run_id, route=route, target=target
        )


class Unavailable(DeliveryError):
    """runonce cannot take the run right now (the target was not called); retry later."""


class StoreDown(Unavailable):
    def __init__(self, cause: Exception, *, run_id: str, route: str):
        super().__init__(
            f"claim store unavailable, the target was not called ({cause}); retry later", run_id=run_id, route=route
        )


class SkipNotRecorded(Unavailable):
    """The run was to be skipped (`situation`), but the store did not record it: nothing was
    dispatched, and the claim is kept until its lease ends; a retry after it decides again."""

    def __init__(
        self, situation: str, cause: Exception, *, run_id: str, route: str, lease_expires: datetime, retry_after: float
    ):
        super().__init__(
            f"{situation}, but the claim store could not record the skip ({cause}); the claim is kept and a "
            f"retry after the lease, at {_utc(lease_expires)}, decides again",
            run_id=run_id,
            route=route,
            retry_after=retry_after,
        )


class ShuttingDown(Unavailable):
    """SIGTERM: this instance takes no new runs; another one will. `claimed`: the run had been
    claimed and was given back (`unreleased`: why it could not be)."""

    def __init__(self, *, run_id: str, route: str, claimed: bool = False, unreleased: Exception | None = None):
        if claimed:
            message = f"runonce is shutting down; {_given_back(unreleased)}, retry"
        else:
            message = "runonce is shutting down; retry (another instance will take it)"
        super().__init__(message, run_id=run_id, route=route)


class OutcomeUnknown(DeliveryError):
    """The target may have acted (timeout, lost response); the claim is kept and a later attempt
    reconciles after the lease."""


class DispatchUnknown(OutcomeUnknown):
    def __init__(
        self,
        reason: str,
        *,
        run_id: str,
        route: str,
        target: dict[str, Any],
        lease_expires: datetime,
        retry_after: float,
        unrecorded: Exception | None = None,
    ):
        note = "" if unrecorded is None else f" (the claim store could not record this outcome: {unrecorded})"
        super().__init__(
            f"{reason}; the claim is kept and the run is reconciled with the target after the lease, "
            f"at {_utc(lease_expires)}{note}",
            run_id=run_id,
            route=route,
            target=target,
            retry_after=retry_after,
        )


class NotRecorded(OutcomeUnknown):
    """The target created `target['resource']`, but the store did not record it: a 200 would end
    the retries and leave the record in_progress for good."""

    def __init__(
        self,
        cause: Exception,
        *,
        run_id: str,
        route: str,
        target: dict[str, Any],
        lease_expires: datetime,
        retry_after: float,
    ):
        super().__init__(
            f"dispatched as {target['resource']}, but the claim store did not record it ({cause}); the claim is "
            f"kept and a retry after the lease, at {_utc(lease_expires)}, records it without dispatching again",
            run_id=run_id,
            route=route,
            target=target,
            retry_after=retry_after,
        )
