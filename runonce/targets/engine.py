"""The one engine every Google REST target runs on, and the ONE place where a Google API's answer
(or silence) becomes a runonce outcome.

A target is a preset of the engine (`GoogleEngineTarget`): it names its discovery document and
says, declaratively, what the run's call is (`create_call`: method, params, body with the run's id
where the API takes it), how the run's resource is found again (`lookup_call`, a GET by the
run-derived name; or `list_call` + `matches`, a paged listing back to the run's first claim), which
states mean "running", and how the resource is named from the answer. The engine does the rest, the
same for every preset: the URL from the document, the create, ALREADY_EXISTS -> adopt, the lookups,
the paging, the clock skew, and this table.

Outcome of the call that may create (`dispatch`), from Google's error model (`google.rpc.Status`,
AIP-193: `error.status` is the canonical code, the HTTP status is derived from it):

    answered
     ├── 2xx                                    the run's resource: completed with it
     ├── ALREADY_EXISTS (at any HTTP status),   the run's id is taken, by an earlier attempt: the
     │   or a 409 without Google's error body   resource is looked up and adopted (a lookup that
     │                                          cannot find it yet keeps the claim)
     ├── RESOURCE_EXHAUSTED (at any HTTP         TargetThrottled, Retry-After or RetryInfo honoured:
     │   status), 429, or the legacy reasons     the API refused for a quota or rate; nothing created
     │   rateLimitExceeded/userRateLimitExceeded
     ├── UNIMPLEMENTED / 501                    TargetFailed: the method does not exist there
     ├── any other 5xx, DEADLINE_EXCEEDED,      TargetOutcomeUnknown: the claim is kept, and the
     │   UNAVAILABLE, INTERNAL, UNKNOWN, ...    retry after the lease reconciles. google.rpc.Code:
     │                                          UNAVAILABLE "is not always safe to retry
     │                                          non-idempotent operations"; AIP-194 retries no
     │                                          create that is not idempotent on any code
     └── any other 4xx (INVALID_ARGUMENT,       TargetFailed, with the API's own message: the
         PERMISSION_DENIED, NOT_FOUND, ABORTED, request was refused before anything was created
         FAILED_PRECONDITION, ...)
    not answered
     ├── could not connect, no credentials      TargetFailed          (nothing was sent)
     └── timeout, reset, dropped after sending  TargetOutcomeUnknown  (it may have been created)

A *lookup* (reconciliation, adoption, an execution's state) never releases the claim: every
failure there is TargetOutcomeUnknown (`reading`, `reconciling`), so a run is never dispatched
blind and the overlap policy never decides on a guess. A preset may depart from a row only with
the API's documented reason, written where it does so.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import quote, urlencode

import httpx

from runonce.targets.base import (
    NOTHING_SENT,
    DispatchRequest,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    parse_retry_after,
)
from runonce.targets.google import GoogleAuth
from runonce.targets.google_api_discovery import ApiDocument, ApiMethod, load
from runonce.targets.registry import TargetContext

RUN_ID_NAMESPACE = uuid.UUID("6f1d1e52-8a43-4f0e-9c53-2b1c1a7e5d10")
"""Namespace of the request ids derived from run_ids (uuid5): fixed, so a retry sends the same one."""
CLOCK_SKEW = timedelta(minutes=10)
"""How far Google's createTime may lag our clock: resources older than the run's first claim by
more than this cannot belong to it (the cut-off of a listing)."""
MAX_PAGES = 20
"""Pages of a listing read before giving up (unknown, claim kept): 2,000 resources at 100 a page."""
THROTTLE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
"""The legacy `error.errors[].reason` of a rate limit (BigQuery answers them with HTTP 403)."""
RESERVED_KEPT = "/:@"
"""What a reserved expansion (`{+name}`) keeps as it is in the path; a simple one (`{name}`) keeps nothing."""


# --- ids derived from the run ---------------------------------------------------------------------


def run_hex(run_id: str) -> str:
    """The run_id as 64 lowercase hex characters (every run_id is; anything else is hashed, so the
    ids derived from it always fit the APIs' `[a-z0-9-]` rules)."""
    if re.fullmatch(r"[0-9a-f]{64}", run_id):
        return run_id
    import hashlib  # deferred: only a run_id that is not hex needs it

    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()  # pragma: no mutate - codec names ignore case


def request_id_for(run_id: str) -> str:
    """A UUID derived from the run_id (36 characters, never the zero UUID): the `requestId` that
    Batch and Dataproc dedupe a retried create on."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, run_id))


# --- the table --------------------------------------------------------------------------------------


def error_of(text: str) -> dict[str, Any]:
    """The `error` object of Google's JSON error answer, or {} when the body is something else."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _retry_delay(details: list[Any]) -> float | None:
    """Seconds from a `google.rpc.RetryInfo` detail (`{"retryDelay": "7s"}`)."""
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def is_already_exists(response: httpx.Response) -> bool:
    """ALREADY_EXISTS at any HTTP status, or a 409 without Google's error body. A 409 ABORTED (a
    concurrency conflict) is not: it created nothing."""
    if response.is_success:
        return False
    status = error_of(response.text).get("status")
    return status == "ALREADY_EXISTS" or (response.status_code == 409 and not status)


def outcome_for_response(action: str, response: httpx.Response) -> TargetError:
    """The outcome of a non-2xx answer other than ALREADY_EXISTS (the module's table)."""
    error = error_of(response.text)
    status = str(error.get("status") or "")
    message = str(error.get("message") or response.text[:300] or response.reason_phrase)
    code = response.status_code
    detail = f"{action}: HTTP {code}{f' {status}' if status else ''}: {message}"
    reasons = {e.get("reason") for e in error.get("errors") or [] if isinstance(e, dict)}
    if code == 429 or status == "RESOURCE_EXHAUSTED" or reasons & THROTTLE_REASONS:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None:
            retry_after = _retry_delay(error.get("details") or [])
        return TargetThrottled(detail, retry_after)
    if code == 501 or status == "UNIMPLEMENTED":
        return TargetFailed(detail)
    if code >= 500 or status in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL", "UNKNOWN", "DATA_LOSS"):
        return TargetOutcomeUnknown(detail)
    return TargetFailed(detail)


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn the foreign errors of one Google API call into outcomes, chained `from` the original."""
    from google.auth.exceptions import GoogleAuthError  # deferred (cold start)

    try:
        yield
    except httpx.TransportError as exc:
        if isinstance(exc, NOTHING_SENT):
            raise TargetFailed(f"{action}: could not connect, nothing was sent: {exc!r}") from exc
        raise TargetOutcomeUnknown(f"{action}: no answer (timeout or connection lost after sending): {exc!r}") from exc
    except GoogleAuthError as exc:  # no token: nothing was sent to the API
        msg = f"{action}: could not get Google credentials (Application Default Credentials): {exc}"
        raise TargetFailed(msg) from exc


@contextmanager
def reading(action: str, doubt: str | None = None) -> Iterator[None]:
    """Around a read-only lookup (a reconciliation, an execution's state): any failure means
    "cannot tell", `TargetOutcomeUnknown`, which keeps the claim; an API's refusal is prefixed
    with `doubt`."""
    try:
        with translated(action):
            yield
    except TargetError as exc:
        if doubt is None and isinstance(exc, TargetOutcomeUnknown):
            raise
        raise TargetOutcomeUnknown(f"{doubt}: {exc.message}" if doubt else exc.message) from exc


def reconciling(action: str) -> AbstractContextManager[None]:
    """Around a reconciliation."""
    return reading(action, "cannot tell whether this run already started")


def json_of(action: str, response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a 2xx answer, or the outcome of any other answer raised."""
    if not response.is_success:
        raise outcome_for_response(action, response)
    try:
        data = response.json()
    except ValueError as exc:
        raise TargetOutcomeUnknown(f"{action}: HTTP {response.status_code} with a body that is not JSON") from exc
    if not isinstance(data, dict):
        raise TargetOutcomeUnknown(f"{action}: HTTP {response.status_code} with an unexpected body")
    return data


# --- calls, as the discovery document describes them ------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call of a preset's API: the method's id in its discovery document (without the API's
    name), its path and query parameters, and its body."""

    method: str
    params: dict[str, Any]
    body: dict[str, Any] | None = None


def wire(value: Any) -> str:
    """A parameter's value as the URL carries it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_path(document: ApiDocument, method: ApiMethod, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the call's path relative to the API's root, its query parameters)."""
    path = method.path
    in_path = method.path_parameters()
    for name in in_path:
        value = wire(params[name])
        path = path.replace(f"{{+{name}}}", quote(value, safe=RESERVED_KEPT))
        path = path.replace(f"{{{name}}}", quote(value, safe=""))
    query = {
        name: [wire(v) for v in value] if isinstance(value, list) else wire(value)
        for name, value in params.items()
        if name not in in_path
    }
    return document.service_path + path, query


def relative_url(path: str, query: dict[str, Any]) -> str:
    """A call as one string (`v1/projects/p/…/jobs/j`, `…?filter=…`): what a run may record."""
    return f"{path}?{urlencode(query, doseq=True)}" if query else path


def dotted(data: Any, path: str) -> Any:
    """`data[a][b]` for `a.b`, None where a part is missing."""
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def created_time(item: dict[str, Any], field_name: str = "createTime") -> datetime:
    """A resource's RFC 3339 creation time; an unreadable one counts as recent (never cut off)."""
    text = str(item.get(field_name) or "")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.max.replace(tzinfo=UTC)


def operation_result(operation: dict[str, Any], execution: Any, action: str) -> str:
    """The execution a long-running operation's answer names (`execution`, read from its metadata
    by the preset), else: an operation that failed at once is TargetFailed, one that names nothing
    but itself is recorded by its own name, anything else is unknown."""
    if isinstance(execution, str) and execution:
        return execution
    error = operation.get("error")
    if error:
        raise TargetFailed(f"{action}: {error.get('message', error) if isinstance(error, dict) else error}")
    if operation.get("name"):
        return str(operation["name"])
    raise TargetOutcomeUnknown(f"{action}: the answer names neither an execution nor an operation")


@dataclass(frozen=True)
class Running:
    """Which values of an execution's state field mean it still runs. A state in `running` runs,
    one in `final` does not; any other runs when only `final` is given, does not when only
    `running` is, and cannot be told (unknown) when both are."""

    field: str
    running: frozenset[str] | None = None
    final: frozenset[str] | None = None

    def of(self, resource: str, answer: dict[str, Any]) -> bool:
        state = dotted(answer, self.field)
        if not isinstance(state, str):
            raise TargetOutcomeUnknown(f"get {resource}: no {self.field} in the answer")
        if self.running is not None and state in self.running:
            return True
        if self.final is not None and state in self.final:
            return False
        if self.running is not None and self.final is not None:
            raise TargetOutcomeUnknown(f"get {resource}: {self.field} {state}")
        return self.running is None


# --- the engine ---------------------------------------------------------------------------------------

ConfigT = TypeVar("ConfigT")


@dataclass
class Listing:
    """A paged listing that finds the run's resources: the call (its `pageToken` added per page),
    the answer's field holding the page, and the oldest creation time still worth reading."""

    call: Call
    items: str
    since: datetime | None = None


class GoogleEngineTarget(Target, Generic[ConfigT]):
    """A Google REST target: a preset's declarations run by one engine (see the module's docstring).

    A preset sets `type`, `API` and `NOUN`, and implements `create_call`; to be found again it
    implements `lookup_call` (a GET of the run's resource, 404 when there is none) or `list_call`
    and `matches` (a listing); to tell whether an execution runs, `RUNNING` (or `is_running`).
    """

    API: ClassVar[str]
    """The discovery document (`batch.v1`): methods, paths and schemas."""
    NOUN: ClassVar[str]
    """How messages name the resource (`Batch job`)."""
    RUNNING: ClassVar[Running | None] = None
    FIND_BEFORE_CREATE: ClassVar[bool] = False
    """Look the run's resource up before every create, the first one too: for an API whose names
    are unique only among active resources, a finished one does not refuse a second create."""
    TAKES_PAYLOAD: ClassVar[bool] = False
    """Whether the delivery's body goes into the call (else a delivery with a body is refused)."""
    BODY_FIELD: ClassVar[tuple[str, str]] = ("", "")
    """(where in the request body, the route's field it comes from): start-up errors name the field."""
    BODY_SCHEMA: ClassVar[str] = ""
    """The document's schema of that part of the body, which the route's field is checked against."""

    def __init__(self, config: ConfigT, http: httpx.AsyncClient, auth: GoogleAuth, endpoint: str | None = None):
        self.config = config
        self._http = http
        self._auth = auth
        self.document = load(self.api())
        self._base = (endpoint or self.default_endpoint()).rstrip("/")  # RUNONCE_*_ENDPOINT, else Google's
        self._methods: dict[str, ApiMethod] = {}
        self.running = self.RUNNING

    def api(self) -> str:
        """The route's discovery document: the preset's `API`."""
        return self.API

    @classmethod
    def route_where(cls, problem: str) -> str:
        """A problem the document found in the request body (`body.a.b: …`), said of the route's
        field the body part comes from (`job.a.b: …`)."""
        prefix, route_field = cls.BODY_FIELD
        head = f"body.{prefix}" if prefix else "body"
        if route_field and (problem.startswith((f"{head}.", f"{head}[", f"{head}:"))):
            return route_field + problem[len(head) :]
        return f"the request runonce builds from the route: {problem}"

    @classmethod
    def build(cls, config: Any, context: TargetContext, endpoint: str | None) -> Target:
        """The registry's builder: `TargetType(..., build=MyTarget.build)`."""
        return cls(config, context.http, context.google_auth, endpoint)

    def default_endpoint(self) -> str:
        """Google's endpoint for this route: the document's root, or its locational host."""
        return self.document.default_endpoint(None)

    # --- what a preset declares -------------------------------------------------------------------

    def create_call(self, request: DispatchRequest) -> Call:
        """The call that starts the run's execution."""
        raise NotImplementedError

    def lookup_call(self, request: DispatchRequest) -> Call | None:
        """A GET of the run's resource by the name derived from the run (404: there is none)."""
        return None

    def list_call(self, request: DispatchRequest) -> Listing | None:
        """A listing to search for the run's resources (`matches` picks them)."""
        return None

    def matches(self, item: dict[str, Any], request: DispatchRequest) -> str | None:
        """The resource name of a listed `item` when it is the run's, else None."""
        return None

    def choose(self, found: list[tuple[str, dict[str, Any]]]) -> str:
        """The run's resource among several listed (newest first): the earliest."""
        return found[-1][0]

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """The execution's name from the create's 2xx answer."""
        name = answer.get("name")
        if not isinstance(name, str) or not name:
            raise TargetOutcomeUnknown(f"{self.describe(request)}: the answer names no {self.NOUN}")
        return name

    def found(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """The resource to record when `lookup_call` found it."""
        return self.created(answer, request)

    def adopted_without_lookup(self, request: DispatchRequest) -> str | None:
        """The run's resource when ALREADY_EXISTS alone proves an earlier attempt created it (the
        preset says why), else None: the engine looks it up."""
        return None

    def state_call(self, resource: str) -> Call | str:
        """The GET that reads an execution's state (a Call, or the recorded relative URL)."""
        raise NotImplementedError

    def describe(self, request: DispatchRequest) -> str:
        """What a message says the dispatch does."""
        return f"create {self.NOUN} for run {request.run_id}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        """What a message says the lookup of the run's resource does."""
        lookup = self.lookup_call(request)
        return f"get {self.url_of(lookup)}" if lookup else f"list {self.NOUN}s to find run {request.run_id}"

    # --- the engine -------------------------------------------------------------------------------

    def method_of(self, call: Call) -> ApiMethod:
        """The document's method of `call`, looked up once per method for the process."""
        method = self._methods.get(call.method)
        if method is None:
            found = self.document.method(call.method)
            assert found is not None, call.method  # checked at start-up (presets.check_route)
            method = self._methods[call.method] = found
        return method

    def url_of(self, call: Call) -> str:
        """The call as a relative URL (path and query)."""
        return relative_url(*build_path(self.document, self.method_of(call), call.params))

    async def send(self, http_method: str, url: str, action: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """One authenticated call (`url` relative to the API's base); the answer whatever its status."""
        with translated(action):
            token = await self._auth.access_token()
            return await self._http.request(
                http_method, f"{self._base}/{url}", json=body, headers={"Authorization": f"Bearer {token}"}
            )

    async def send_call(self, call: Call, action: str) -> httpx.Response:
        return await self.send(self.method_of(call).http_method, self.url_of(call), action, call.body)

    async def dispatch(self, request: DispatchRequest) -> str:
        action = self.describe(request)
        if request.payload and not self.TAKES_PAYLOAD:
            raise TargetFailed(f"{action}: a {self.type} route takes no delivery body (its request is the route's)")
        if self.FIND_BEFORE_CREATE:
            existing = await self.reconcile(request)
            if existing is not None:
                return existing
        response = await self.send_call(self.create_call(request), action)
        if is_already_exists(response):
            return await self.adopt(request, f"{action}: it already exists; read it")
        return self.created(json_of(action, response), request)

    async def adopt(self, request: DispatchRequest, action: str) -> str:
        """The run's execution, which the API says exists: never None (a lookup that lags the
        create cannot tell, so the claim is kept)."""
        adopted = self.adopted_without_lookup(request)
        if adopted is not None:
            logging.getLogger(f"runonce.target.{self.type}").info(
                "run %s: %s %s already exists; nothing created", request.run_id, self.NOUN, adopted
            )
            return adopted
        with reconciling(action):
            found = await self.find(request, action)
        if found is None:
            raise TargetOutcomeUnknown(f"{action}: the API says it exists but it cannot be read yet")
        return found

    async def reconcile(self, request: DispatchRequest) -> str | None:
        action = self.describe_lookup(request)
        with reconciling(action):
            return await self.find(request, action)

    async def find(self, request: DispatchRequest, action: str) -> str | None:
        """The run's execution by its lookup or listing, None when there is none."""
        lookup = self.lookup_call(request)
        if lookup is not None:
            answer = await self.read(self.url_of(lookup), action)
            return None if answer is None else self.found(answer, request)
        listing = self.list_call(request)
        if listing is None:
            return None  # the API dedupes the re-sent create on the run's id itself
        found = await self.search(listing, request, action)
        if len(found) > 1:
            names = ", ".join(name for name, _ in found)
            logging.getLogger(f"runonce.target.{self.type}").warning(
                "run %s has %d %ss: %s", request.run_id, len(found), self.NOUN, names
            )
        return self.choose(found) if found else None

    async def search(self, listing: Listing, request: DispatchRequest, action: str) -> list[tuple[str, dict[str, Any]]]:
        """Every listed resource `matches` takes, page after page, until a page is older than
        `listing.since` (less the clock skew) or the last page."""
        since = listing.since - CLOCK_SKEW if listing.since else None
        found: list[tuple[str, dict[str, Any]]] = []
        page_token: str | None = None  # pragma: no mutate - "" is as falsy: the first page either way
        for _ in range(MAX_PAGES):
            params = {**listing.call.params, **({"pageToken": page_token} if page_token else {})}
            response = await self.send_call(Call(listing.call.method, params), action)
            page = json_of(action, response)
            items = [item for item in page.get(listing.items) or [] if isinstance(item, dict)]
            found += [(name, item) for item in items if (name := self.matches(item, request))]
            page_token = page.get("nextPageToken")
            older = since is not None and items and all(created_time(item) < since for item in items)
            if not page_token or older:
                return found
        raise TargetOutcomeUnknown(f"{action}: more than {MAX_PAGES} pages to search")

    async def read(self, url: str, action: str) -> dict[str, Any] | None:
        """GET `url`: the resource, None on Google's 404 NOT_FOUND, else its outcome raised (a
        proxy's or a wrong endpoint's bare 404 says nothing about the resource)."""
        response = await self.send("GET", url, action)  # pragma: no mutate - httpx upper-cases the method
        if response.status_code == 404 and error_of(response.text).get("status") == "NOT_FOUND":
            return None
        return json_of(action, response)

    async def read_state(self, resource: str) -> dict[str, Any] | None:
        """The execution `resource` for `is_running`: it, None when it no longer exists, else unknown."""
        call = self.state_call(resource)
        action = f"get {resource}"
        with reading(action, f"cannot read the state of {resource}"):
            return await self.read(call if isinstance(call, str) else self.url_of(call), action)

    async def is_running(self, resource: str) -> bool:
        if self.running is None:
            raise TargetOutcomeUnknown(f"a {self.type} route has no 'running' to read the state of {resource}")
        answer = await self.read_state(resource)
        return answer is not None and self.running.of(resource, answer)
