"""Process-wide settings, read once at start-up from `RUNONCE_*` environment variables.

Build one `Settings` in the entry point and pass it to `create_app()`; nothing else reads the
environment. Tests construct `Settings(...)` directly.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from runonce.errors import ConfigError as ConfigError  # raised here; defined below the stores, which raise it too
from runonce.stores import check_store_url
from runonce.targets import ENDPOINTS
from runonce.targets.endpoints import check_endpoint

EMAIL_PATTERN = r"^[^@\s,]+@[^@\s,]+$"
"""A caller's email, as in allow-lists (routes' `allowed_callers`, RUNONCE_*_CALLERS)."""

LEASE_MARGIN_SECONDS = 1.0
"""What a lease must cover beyond the dispatch timeout and two store timeouts (see `_no_overlap`):
clock skew between instances (Cloud Run's clocks agree to well under a second) and event-loop delays."""
MAX_DURATION_SECONDS = 10 * 365 * 86400
"""Ten years: any duration setting beyond it is a typo (and would overflow date arithmetic)."""

CsvList = Annotated[list[str], NoDecode]
"""A list given in the environment as `a,b,c`."""


MAX_NUMBER_CHARS = 40
"""A setting's number is read only up to this many characters: every allowed value is far shorter."""
_NUMBER = re.compile(r"[-+]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def ascii_number(value: object) -> object:
    """A number given as text must be written in ASCII digits, as in `300` or `2.5`: Python's
    `int()` and `float()` (and pydantic) also take `1_000`, `٣٠٠` and `nan`, which no one means."""
    if isinstance(value, str) and len(value.strip()) > MAX_NUMBER_CHARS:  # bounded before conversion
        raise ValueError(f"must be a number in ASCII digits, such as 300 or 2.5, got {len(value)} characters")
    if isinstance(value, str) and not _NUMBER.fullmatch(value.strip()):
        raise ValueError(f"must be a number in ASCII digits, such as 300 or 2.5, got {value!r}")
    return value


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _endpoint(value: str | None) -> str | None:
    return check_endpoint(value)  # the one rule for endpoints (runonce/targets/endpoints.py)


# create_model's typed overloads take no **fields spread; the class is checked at run time by pydantic
_EndpointSettings: type[BaseSettings] = create_model(  # type: ignore[call-overload]  # **fields, see above
    "_EndpointSettings",
    __base__=BaseSettings,
    **{
        f"{name}_endpoint": (
            Annotated[str | None, AfterValidator(_endpoint)],
            Field(None, description=f"Override of the `{name}` target API's endpoint (Google's when unset)."),
        )
        for name in ENDPOINTS
    },
)
"""One `<name>_endpoint` setting (RUNONCE_<NAME>_ENDPOINT) per endpoint a target type declares
(`runonce/targets`): adding a target adds its override here without editing this file."""


class Settings(_EndpointSettings):  # type: ignore[valid-type,misc]  # a base built at run time (above)
    model_config = SettingsConfigDict(env_prefix="RUNONCE_", extra="ignore", frozen=True)

    routes_file: str | None = Field(None, description="Path of the routes file (YAML or JSON).")
    routes: str | None = Field(None, description="Routes inline (YAML or JSON), instead of a file.")

    store: str = Field(
        "sqlite:///runonce.db",
        repr=False,  # it may hold a password: shown only through redact_store_url
        description="The claim store's URL: `sqlite:///PATH` (a path relative to the working directory; "
        "`sqlite:////PATH` for an absolute one), `firestore`, `spanner://projects/P/instances/I/databases/D`, "
        "`redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]` or `rediss://…` (Store URLs, in the stores how-to). "
        "Its credentials are never logged or shown.",
    )
    store_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=MAX_DURATION_SECONDS,
        description="Longest wait for one claim-store operation before answering 503.",
    )
    firestore_project: str | None = Field(
        None, description="Firestore's project (Application Default Credentials' when unset)."
    )
    firestore_database: str = Field(
        "(default)",
        description="Firestore database, in Native mode: one in Datastore mode, or none of that name, "
        "answers every delivery and `/readyz` 503 with Firestore's reason.",
    )
    firestore_collection: str = Field("runonce_runs", description="Firestore collection of the run records.")

    lease_seconds: float = Field(
        300,
        gt=0,
        le=MAX_DURATION_SECONDS,
        description="How long a claim blocks other attempts; at least the dispatch timeout + 2 x the store timeout "
        "+ 1 s.",
    )
    retention_seconds: float = Field(
        86400,
        gt=0,
        le=MAX_DURATION_SECONDS,
        description="How long a run is remembered: above the lease, and covering Scheduler's retry window.",
    )
    dispatch_timeout_seconds: float = Field(
        30, gt=0, le=MAX_DURATION_SECONDS, description="Deadline for reconciling and dispatching one attempt."
    )
    forced_run_tolerance_seconds: float = Field(
        5,
        ge=0,
        le=MAX_DURATION_SECONDS,
        description="A delivery more than this before its schedule time is a Scheduler force run.",
    )
    shutdown_grace_seconds: float = Field(
        7,
        ge=0,
        le=MAX_DURATION_SECONDS,
        description="On SIGTERM, how long dispatches in flight may still run (Cloud Run kills at 10 s).",
    )

    auth: Literal["oidc", "none", "cloud_run_iam"] = Field(
        "oidc",
        description="`oidc` verifies Google-signed ID tokens; `cloud_run_iam` trusts Cloud Run's invoker check; "
        "`none` admits anyone (local use only).",
    )
    allow_unauthenticated: bool = Field(False, description="Required to run `RUNONCE_AUTH=none` on Cloud Run.")
    audience: CsvList = Field(default_factory=list, description="Accepted token audiences, comma-separated.")
    allowed_callers: CsvList = Field(
        default_factory=list, description="Service-account emails allowed on routes without their own list."
    )
    admin_callers: CsvList = Field(
        default_factory=list,
        description="Emails allowed on the runs API, `POST /v1/audit:run` and the backfill endpoint.",
    )
    oidc_certs_url: str = Field(
        "https://www.googleapis.com/oauth2/v1/certs", description="Where the token signing certificates are fetched."
    )
    oidc_clock_skew_seconds: int = Field(10, ge=0, le=300, description="Tolerance on a token's `iat` and `exp`.")

    log_format: Literal["json", "text"] = Field(
        default_factory=lambda: "json" if os.environ.get("K_SERVICE") else "text",
        description="`json` (Cloud Logging's structured lines) on Cloud Run (`K_SERVICE` set), else `text`.",
    )
    api_docs: bool = Field(
        True,
        description="Serve the API description: `/docs` (Swagger UI), `/redoc` and `/openapi.json`, "
        "their assets from the package. `false`: all three answer 404.",
    )

    @field_validator(
        "store_timeout_seconds",
        "lease_seconds",
        "retention_seconds",
        "dispatch_timeout_seconds",
        "forced_run_tolerance_seconds",
        "shutdown_grace_seconds",
        "oidc_clock_skew_seconds",
        mode="before",
    )
    @classmethod
    def _ascii_number(cls, value: object) -> object:
        return ascii_number(value)

    @field_validator("audience", "allowed_callers", "admin_callers", mode="before")
    @classmethod
    def _csv(cls, value: object) -> object:
        return _split_csv(value)

    def endpoint_overrides(self) -> dict[str, str | None]:
        """The endpoint overrides by endpoint name, as `TargetContext.endpoints` takes them."""
        return {name: getattr(self, f"{name}_endpoint") for name in ENDPOINTS}

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        return check_store_url(value)  # the registry: the same table open_store reads

    @model_validator(mode="after")
    def _no_overlap(self) -> Settings:
        """The one rule under which two attempts of a run never dispatch at once.

        An attempt's lease runs from just before its claim. By the time its lease ends it must be
        done: the claim (up to one store timeout), the reconcile + dispatch (the dispatch timeout),
        the finish (one more store timeout), plus the margin. And a record must outlive its lease,
        or a run in flight "expires" and is claimed afresh.
        """
        lease, dispatch, store = self.lease_seconds, self.dispatch_timeout_seconds, self.store_timeout_seconds
        needed = dispatch + 2 * store + LEASE_MARGIN_SECONDS
        if lease < needed:
            raise ValueError(
                f"RUNONCE_LEASE_SECONDS ({lease:g}) must be at least RUNONCE_DISPATCH_TIMEOUT_SECONDS ({dispatch:g}) "
                f"+ 2 x RUNONCE_STORE_TIMEOUT_SECONDS ({store:g}) + {LEASE_MARGIN_SECONDS:g}s = {needed:g}: "
                "an attempt still dispatching or finishing after its lease could overlap the next one"
            )
        if self.retention_seconds <= lease:
            raise ValueError(
                f"RUNONCE_RETENTION_SECONDS ({self.retention_seconds:g}) must be above RUNONCE_LEASE_SECONDS "
                f"({lease:g}): a run in flight would expire and be claimed again"
            )
        return self


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with `ConfigError` naming each bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            # A rule across settings (no loc) names its settings itself.
            problems.append(f"RUNONCE_{str(error['loc'][0]).upper()}: {message}" if error["loc"] else message)
        raise ConfigError("bad settings: " + "; ".join(problems)) from exc
