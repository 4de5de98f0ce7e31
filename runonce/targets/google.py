"""What the Google Cloud adapters share: credentials, endpoints, resource-name patterns, the base
class of the REST adapters (`GoogleRestTarget`: config, client, credentials, base URL, `send` /
`call` / `read_state`), and the ONE place where a Google API's answer (or silence) becomes a
runonce outcome.

Translation of a *dispatch* (the call that may create an execution):

    answered                                    -> outcome
     ├── HTTP 429 / RESOURCE_EXHAUSTED           TargetThrottled (Retry-After header or RetryInfo)
     ├── HTTP 504 / DEADLINE_EXCEEDED            TargetOutcomeUnknown  (a gateway gave up; it may run)
     ├── other HTTP 5xx / UNAVAILABLE, INTERNAL  TargetFailed          (the API said it did nothing)
     └── HTTP 4xx / INVALID_ARGUMENT, PERMISSION_DENIED, NOT_FOUND, ...
                                                 TargetFailed, with the API's own message
    not answered
     ├── could not connect, no credentials       TargetFailed          (nothing was sent)
     └── timeout, reset, dropped after sending   TargetOutcomeUnknown  (it may have been created)

gRPC reports a broken connection as UNAVAILABLE too, so a gRPC UNAVAILABLE/INTERNAL/UNKNOWN counts
as "answered" only when it carries the `google.rpc.Status` details that Google's APIs attach to every
error they send (AIP-193); without them it may be a reset after sending, hence unknown.

A *reconciliation* (read-only lookups) never releases the claim: every failure there becomes
TargetOutcomeUnknown (see `reconciling`), so a run is never dispatched blind. So does a failed read
of an execution's state (`is_running`): the overlap policy then never decides on a guess.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic_core import PydanticCustomError

from runonce import names
from runonce.targets.base import (
    NOTHING_SENT,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    parse_retry_after,
)

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

# Resource-name parts, as the APIs accept them (a project by ID, domain-scoped ID, or number).
PROJECT = rf"(?:{names.SCOPED_PROJECT_ID}|{names.PROJECT_NUMBER})"
LOCATION = names.LOCATION

LABEL_KEY_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
"""A label key in ASCII (match it whole, `re.fullmatch`); `label_problem` also takes international
lower-case letters, as Google's label rule does."""
LABEL_VALUE_PATTERN = r"[a-z0-9_-]{0,63}"
INTERNATIONAL = " (international lower-case letters count as letters)"
"""Google's label rule (Compute Engine's, which the other APIs share) allows them."""
RUN_ID_LABEL = "runonce-run-id"
MAX_LABEL_CHARACTERS = 63


def run_id_label(run_id: str) -> str:
    """The label value for a run: its first 63 hex characters (label values hold at most 63)."""
    return run_id[:63]


def _label_letter(char: str) -> bool:
    """A lower-case letter, ASCII or international (a letter without case, such as 'は', counts)."""
    return unicodedata.category(char) in ("Ll", "Lo", "Lm")


def _label_character(char: str) -> bool:
    """A letter, a digit, `_`, `-`, or a mark that belongs to the letter before it (as in 'क्ष')."""
    return _label_letter(char) or char in "_-" or unicodedata.category(char) in ("Nd", "Mn", "Mc")


def _kind(value: object) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true or false"
    return "a number" if isinstance(value, (int, float)) else f"a {type(value).__name__}"


def label_problem(key: object, value: object) -> str | None:
    """What Google's label rule says against one label (None when it fits): the whole key and value
    are checked, so a value ending in a newline is refused too."""
    if not isinstance(key, str):
        return f"label key {key!r} is {_kind(key)}, not text: quote it ('{key}')"
    if not (1 <= len(key) <= MAX_LABEL_CHARACTERS and _label_letter(key[0]) and all(map(_label_character, key))):
        return f"label key {key!r}: 1-63 characters of a-z 0-9 _ -, starting with a letter{INTERNATIONAL}"
    if value is None:
        return f"label {key!r}: the value is empty (null); write '' for an empty value"
    if not isinstance(value, str):
        return f"label {key!r}: value {value!r} is {_kind(value)}, not text: quote it ('{value}')"
    if not (len(value) <= MAX_LABEL_CHARACTERS and all(map(_label_character, value))):
        return f"label {key!r}: value {value!r} must be at most 63 characters of a-z 0-9 _ -{INTERNATIONAL}"
    return None


def check_labels(labels: dict[str, str], max_labels: int) -> dict[str, str]:
    """A route's extra labels for an API's resource, or the first problem as a pydantic error:
    keys and values as Google's labels take them, not `runonce-run-id`, room left for it."""
    if not isinstance(labels, dict):
        raise PydanticCustomError(
            "label", "labels must be a mapping of key: value, got {kind}", {"kind": type(labels).__name__}
        )
    for key, value in labels.items():
        if key == RUN_ID_LABEL:
            raise PydanticCustomError("label", "label {key} is set by runonce itself", {"key": repr(key)})
        problem = label_problem(key, value)
        if problem:
            raise PydanticCustomError("label", "{problem}", {"problem": problem})
    if len(labels) > max_labels - 1:
        raise PydanticCustomError(
            "label", "at most {n} labels (runonce adds {label})", {"n": max_labels - 1, "label": repr(RUN_ID_LABEL)}
        )
    return labels


def resource_pattern(collection: str, resource_id: str) -> str:
    """`^projects/P/locations/L/{collection}/ID$` with `resource_id` the regex of the last part.

    A lookahead refuses any newline, so the pattern holds with `re.match` too (where a `$` alone
    lets a trailing newline through)."""
    return rf"^(?!.*\n)projects/{PROJECT}/locations/{LOCATION}/{collection}/{resource_id}$"


def resource_name_problem(name: str, collection: str, resource_id: str, id_rule: str) -> str | None:
    """What is wrong with `name` as `projects/P/locations/L/{collection}/ID`, naming the part at fault
    (a bad project ID is not reported as "not a full name"); None if nothing. `id_rule` describes
    `resource_id`, e.g. "workflow ID must be 1-64 characters of …"."""
    if not isinstance(name, str):
        return f"must be a full resource name (text), got {type(name).__name__} {name!r}"
    parts = name.split("/")
    if len(parts) != 6 or parts[0::2] != ["projects", "locations", collection]:
        singular = collection.removesuffix("s")
        return (
            f"must be a {singular}'s full name, projects/PROJECT/locations/LOCATION/{collection}/{singular.upper()} "
            f"(got {name!r})"
        )
    project, location, resource = parts[1::2]
    if not re.fullmatch(PROJECT, project, flags=re.ASCII):
        return (
            f"the project {project!r} is not a project ID (6-30 characters of a-z 0-9 -, starting with a "
            "letter, optionally domain-scoped as example.com:my-project) or number"
        )
    if not re.fullmatch(LOCATION, location, flags=re.ASCII):
        return f"the location {location!r} is not a location (e.g. us-central1)"
    if not re.fullmatch(resource_id, resource, flags=re.ASCII):
        label, _, rule = id_rule.partition(" must ")
        return f"the {label} {resource!r} must {rule}"
    return None


def resource_parts(name: str) -> dict[str, str]:
    """`projects/p/locations/l/jobs/j` -> {"projects": "p", "locations": "l", "jobs": "j"}."""
    parts = name.split("/")
    return dict(zip(parts[0::2], parts[1::2], strict=True))


# --- endpoints ---------------------------------------------------------------------------------


def rest_base_url(override: str | None, default: str) -> str:
    """The API's base URL: `RUNONCE_*_ENDPOINT` when set (http:// for a local fake), else Google's."""
    return (override or default).rstrip("/")


def grpc_target(override: str | None, default_host: str) -> tuple[str, bool]:
    """(`host:port`, secure) for a gRPC API. `http://127.0.0.1:PORT` means plaintext."""
    if not override:
        return f"{default_host}:443", True
    url = urlsplit(override)
    secure = url.scheme == "https"
    return f"{url.hostname}:{url.port or (443 if secure else 80)}", secure


# --- credentials -------------------------------------------------------------------------------


class _TokenSource:
    """One google-auth credentials object shared by every request of the process.

    google-auth refreshes with blocking HTTP calls (the metadata server on Cloud Run), so the
    refresh runs in a thread, one at a time; callers in the meantime wait for it instead of
    starting their own. `valid` already refreshes a few minutes before the token expires.
    """

    def __init__(self, make: Callable[[Any], Any]):
        self._make = make
        self._credentials: Any = None
        self._lock = asyncio.Lock()
        self._thread_lock = threading.Lock()

    async def token(self) -> str:
        credentials = self._credentials
        if credentials is not None and credentials.valid:
            token: str = credentials.token
            return token
        async with self._lock:
            await asyncio.to_thread(self._refresh)
        refreshed: str = self._credentials.token
        return refreshed

    def _refresh(self) -> None:
        # Google's auth transports and API errors load with a route that calls Google only:
        # tests/test_cold_start.py checks an http/log start imports none of them.
        import google.auth.transport.requests  # deferred (cold start)

        with self._thread_lock:  # the asyncio lock is per event loop; this one is for threads
            if self._credentials is not None and self._credentials.valid:
                return
            request = google.auth.transport.requests.Request()
            if self._credentials is None:
                self._credentials = self._make(request)
            self._credentials.refresh(request)


class GoogleAuth:
    """Application Default Credentials for the process: access tokens (`cloud-platform` scope)
    for the Google APIs, and Google-signed ID tokens per audience for `http` targets."""

    def __init__(self) -> None:
        self._access = _TokenSource(self._default_credentials)
        self._id_tokens: dict[str, _TokenSource] = {}

    @staticmethod
    def _default_credentials(request: Any) -> Any:
        import google.auth  # deferred (cold start)

        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE], request=request)
        return credentials

    async def access_token(self) -> str:
        return await self._access.token()

    async def id_token(self, audience: str) -> str:
        source = self._id_tokens.get(audience)
        if source is None:
            import google.oauth2.id_token  # deferred (cold start)

            def make(request: Any) -> Any:
                return google.oauth2.id_token.fetch_id_token_credentials(audience, request=request)

            source = self._id_tokens.setdefault(audience, _TokenSource(make))
        return await source.token()


# --- translation of errors (the one place) -------------------------------------------------------


def error_of(text: str) -> dict[str, Any]:
    """The `error` object of Google's JSON error answer, or {} when the body is something else."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _retry_delay(details: list[Any]) -> float | None:
    """Seconds from a `google.rpc.RetryInfo` detail (`{"retryDelay": "7s"}` or the proto)."""
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
        delay = getattr(detail, "retry_delay", None)
        if delay is not None and hasattr(delay, "seconds"):
            seconds: float = delay.seconds + delay.nanos / 1e9
            return seconds
    return None


def outcome_for_response(action: str, response: httpx.Response) -> TargetError:
    """The outcome of a non-2xx answer of a Google REST API."""
    error = error_of(response.text)
    status = str(error.get("status") or "")
    message = str(error.get("message") or response.text[:300] or response.reason_phrase)
    code = response.status_code
    detail = f"{action}: HTTP {code}{f' {status}' if status else ''}: {message}"
    if code == 429 or status == "RESOURCE_EXHAUSTED":
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None:
            retry_after = _retry_delay(error.get("details") or [])
        return TargetThrottled(detail, retry_after)
    if code == 504 or status == "DEADLINE_EXCEEDED":
        return TargetOutcomeUnknown(detail)
    return TargetFailed(detail)


def outcome_for_transport_error(action: str, exc: httpx.TransportError) -> TargetError:
    """httpx raised before an answer came back."""
    if isinstance(exc, NOTHING_SENT):
        return TargetFailed(f"{action}: could not connect, nothing was sent: {exc!r}")
    return TargetOutcomeUnknown(f"{action}: no answer (timeout or connection lost after sending): {exc!r}")


_NEVER_CONNECTED = ("failed to connect to all addresses", "DNS resolution failed", "Name resolution failure")
_SERVER_ERROR_CODES = {"UNAVAILABLE", "INTERNAL", "UNKNOWN", "DATA_LOSS"}


def outcome_for_grpc_error(action: str, exc: Any) -> TargetError:
    """The outcome of a `google.api_core.exceptions.GoogleAPICallError` raised by a gRPC call."""
    code_enum = getattr(exc, "grpc_status_code", None)
    code = code_enum.name if code_enum is not None else "UNKNOWN"
    message = str(getattr(exc, "message", exc))
    detail = f"{action}: {code}: {message}"
    details = list(getattr(exc, "details", None) or [])
    if code == "RESOURCE_EXHAUSTED":
        return TargetThrottled(detail, _retry_delay(details))
    if code in ("DEADLINE_EXCEEDED", "CANCELLED"):
        return TargetOutcomeUnknown(detail)
    if code in _SERVER_ERROR_CODES:
        if details or any(marker in message for marker in _NEVER_CONNECTED):
            return TargetFailed(detail)
        return TargetOutcomeUnknown(
            f"{detail} (no status details from the API: the connection may have broken after sending)"
        )
    return TargetFailed(detail)


def outcome_for_auth_error(action: str, exc: Exception) -> TargetError:
    """google-auth could not get a token: nothing was sent to the API."""
    return TargetFailed(f"{action}: could not get Google credentials (Application Default Credentials): {exc}")


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn the foreign errors of one Google API call into outcomes, chained `from` the original."""
    from google.api_core.exceptions import GoogleAPICallError  # deferred (cold start)
    from google.auth.exceptions import GoogleAuthError  # deferred (cold start)

    try:
        yield
    except httpx.TransportError as exc:
        raise outcome_for_transport_error(action, exc) from exc
    except GoogleAPICallError as exc:
        raise outcome_for_grpc_error(action, exc) from exc
    except GoogleAuthError as exc:
        raise outcome_for_auth_error(action, exc) from exc


@contextmanager
def reading(action: str, doubt: str | None = None) -> Iterator[None]:
    """Around a read-only lookup (a reconciliation, an execution's state): any failure means
    "cannot tell", `TargetOutcomeUnknown`, which keeps the claim; an API's refusal is prefixed
    with `doubt`."""
    try:
        with translated(action):
            yield
    except TargetOutcomeUnknown:
        raise
    except TargetError as exc:
        raise TargetOutcomeUnknown(f"{doubt}: {exc.message}" if doubt else exc.message) from exc


def reconciling(action: str) -> AbstractContextManager[None]:
    """Around a reconciliation."""
    return reading(action, "cannot tell whether this run already started")


async def read_state(http: httpx.AsyncClient, auth: GoogleAuth, url: str, resource: str) -> dict[str, Any] | None:
    """GET an execution (REST) to read its state: the resource, or None when it no longer exists.
    Any other failure is `TargetOutcomeUnknown`."""
    action = f"get {resource}"
    with reading(action):
        response = await send_rest(http, auth, "GET", url, action)
        if response.status_code == 404:
            return None
        return json_of(action, response)


async def send_rest(
    http: httpx.AsyncClient,
    auth: GoogleAuth,
    method: str,
    url: str,
    action: str,
    *,
    body: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> httpx.Response:
    """One authenticated call to a Google REST API; the answer whatever its status."""
    with translated(action):
        token = await auth.access_token()
        return await http.request(method, url, json=body, params=params, headers={"Authorization": f"Bearer {token}"})


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


async def call_rest(
    http: httpx.AsyncClient,
    auth: GoogleAuth,
    method: str,
    url: str,
    action: str,
    *,
    body: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`send_rest` then `json_of`: the parsed answer, or an outcome raised."""
    response = await send_rest(http, auth, method, url, action, body=body, params=params)
    return json_of(action, response)


# --- the base of the REST adapters ------------------------------------------------------------------

ConfigT = TypeVar("ConfigT")


class SharedClients(Protocol):
    """What `build` takes from the registry's `TargetContext` (not imported: the registry imports this module)."""

    http: httpx.AsyncClient
    google_auth: GoogleAuth


class GoogleRestTarget(Target, Generic[ConfigT]):
    """Base of the adapters that call one Google REST API: the route's config, the process's HTTP
    client and credentials, and the API's base URL (the endpoint override, `RUNONCE_*_ENDPOINT`,
    else `default_endpoint()`).

    A subclass sets `type` and `DEFAULT_ENDPOINT` (or overrides `default_endpoint`), uses
    `build` as its registry entry's builder, and calls the API with paths relative to the base:

        operation = await self.call("POST", f"v2/{self.config.job}:run", action, body=body)

    `send` returns the answer whatever its status (for a caller that reads a 404 or 409 itself);
    `call` returns a 2xx answer's JSON or raises its outcome; `read_state` reads an execution for
    `is_running`. Every error becomes an outcome in this module, nowhere else.
    """

    DEFAULT_ENDPOINT: ClassVar[str] = ""

    def __init__(self, config: ConfigT, http: httpx.AsyncClient, auth: GoogleAuth, endpoint: str | None = None):
        self.config = config
        self._http = http
        self._auth = auth
        self._base = rest_base_url(endpoint, self.default_endpoint())

    def default_endpoint(self) -> str:
        """Google's endpoint for this route's API, used when no override is set."""
        return self.DEFAULT_ENDPOINT

    @classmethod
    def build(cls, config: Any, context: SharedClients, endpoint: str | None) -> Target:
        """The registry's builder: `TargetType(..., build=MyTarget.build)`."""
        return cls(config, context.http, context.google_auth, endpoint)

    def url(self, path: str) -> str:
        """The full URL of `path` (`v2/projects/...`) on this adapter's base."""
        return f"{self._base}/{path}"

    async def send(
        self,
        method: str,
        path: str,
        action: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """One authenticated call; the answer whatever its status (see `send_rest`)."""
        return await send_rest(self._http, self._auth, method, self.url(path), action, body=body, params=params)

    async def call(
        self,
        method: str,
        path: str,
        action: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One authenticated call: a 2xx answer's JSON object, or its outcome raised (see `call_rest`)."""
        return await call_rest(self._http, self._auth, method, self.url(path), action, body=body, params=params)

    async def read_state(self, path: str, resource: str) -> dict[str, Any] | None:
        """GET an execution for `is_running`: it, None when it no longer exists, else unknown."""
        return await read_state(self._http, self._auth, self.url(path), resource)
