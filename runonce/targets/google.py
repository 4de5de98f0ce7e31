"""What the Google Cloud adapters share: credentials, endpoints, resource-name patterns and labels.
The engine they run on, and the one table from a Google API's answer (or silence) to a runonce
outcome, are in `engine.py`.
"""

from __future__ import annotations

import asyncio
import re
import threading
import unicodedata
from collections.abc import Callable
from typing import Any

from runonce import names

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

# Resource-name parts, as the APIs accept them (a project by ID, domain-scoped ID, or number).
PROJECT = rf"(?:{names.SCOPED_PROJECT_ID}|{names.PROJECT_NUMBER})"
LOCATION = names.LOCATION
REGION = r"[a-z]+-[a-z]+[0-9]+"
"""A region (`us-central1`, `northamerica-northeast1`): not `global`, nor a multi-region such as `us`."""

INTERNATIONAL = " (international lower-case letters count as letters)"
"""Google's label rule (Compute Engine's, which the other APIs share) allows them."""
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""What no URL, id, name or parameter holds (a newline left by a YAML `|` block, most often): the
C0 and C1 control characters and DEL."""
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


def kind_of(value: object) -> str:
    """What a YAML value is, in words: `a number`, `true or false`, `null`, `a list`."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true or false"
    return "a number" if isinstance(value, (int, float)) else f"a {type(value).__name__}"


def label_problem(key: object, value: object, longest: int = MAX_LABEL_CHARACTERS) -> str | None:
    """What Google's label rule says against one label (None when it fits): the whole key and value
    are checked, so a value ending in a newline is refused too. `longest`: 63, or what the API's
    description states (Vertex AI's "no longer than 64 characters")."""
    if not isinstance(key, str):
        return f"label key {key!r} is {kind_of(key)}, not text: quote it ('{key}')"
    if not (1 <= len(key) <= longest and _label_letter(key[0]) and all(map(_label_character, key))):
        return f"label key {key!r}: 1-{longest} characters of a-z 0-9 _ -, starting with a letter{INTERNATIONAL}"
    if value is None:
        return f"label {key!r}: the value is empty (null); write '' for an empty value"
    if not isinstance(value, str):
        return f"label {key!r}: value {value!r} is {kind_of(value)}, not text: quote it ('{value}')"
    if not (len(value) <= longest and all(map(_label_character, value))):
        return f"label {key!r}: value {value!r} must be at most {longest} characters of a-z 0-9 _ -{INTERNATIONAL}"
    return None


def resource_pattern(collection: str, resource_id: str) -> str:
    """`^projects/P/locations/L/{collection}/ID$` with `resource_id` the regex of the last part.

    A lookahead refuses any newline, so the pattern holds with `re.match` too (where a `$` alone
    lets a trailing newline through)."""
    return rf"^(?!.*\n)projects/{PROJECT}/locations/{LOCATION}/{collection}/{resource_id}$"


def resource_name_problem(name: str, collection: str, resource_id: str, id_rule: str, regional: str = "") -> str | None:
    """What is wrong with `name` as `projects/P/locations/L/{collection}/ID`, naming the part at fault
    (a bad project ID is not reported as "not a full name"); None if nothing. `id_rule` describes
    `resource_id`, e.g. "workflow ID must be 1-64 characters of …"; `regional`, when given, names
    the resources that exist only in a region (`Cloud Run jobs`), so `global` is refused."""
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
    if regional and not re.fullmatch(REGION, location, flags=re.ASCII):
        return f"the location {location!r} is not a region (such as us-central1): {regional} exist only in a region"
    if not re.fullmatch(resource_id, resource, flags=re.ASCII):
        label, _, rule = id_rule.partition(" must ")
        return f"the {label} {resource!r} must {rule}"
    return None


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
