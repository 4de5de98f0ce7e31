"""Targets: one module per downstream type behind `Target` (see `base.py`).

Each module ends with its `TARGET` entry (`registry.TargetType`: config model, builder, endpoint
override, IAM grants). Adding a target means writing its module and listing it in `TARGET_TYPES`
below; the routes' validation, `build_target` and the endpoint settings follow from the entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol, Union

from pydantic import Field

from runonce.targets.base import (
    NOTHING_SENT,
    DispatchRequest,
    PayloadNotSendable,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    encode_json,
)
from runonce.targets.bigquery_job import TARGET as BIGQUERY_JOB
from runonce.targets.cloud_build_trigger import TARGET as CLOUD_BUILD_TRIGGER
from runonce.targets.cloud_run_job import TARGET as CLOUD_RUN_JOB
from runonce.targets.cloud_tasks_task import TARGET as CLOUD_TASKS_TASK
from runonce.targets.http import TARGET as HTTP
from runonce.targets.log import TARGET as LOG
from runonce.targets.registry import Grant, TargetContext, TargetType
from runonce.targets.workflows import TARGET as WORKFLOWS

TARGET_TYPES: dict[str, TargetType] = {
    entry.name: entry
    for entry in (LOG, HTTP, WORKFLOWS, CLOUD_RUN_JOB, CLOUD_BUILD_TRIGGER, BIGQUERY_JOB, CLOUD_TASKS_TASK)
}
"""Every target type by its `type:` name (like httpx's `mounts`: a plain table, looked up once)."""

ENDPOINTS: tuple[str, ...] = tuple(dict.fromkeys(t.endpoint for t in TARGET_TYPES.values() if t.endpoint))
"""Endpoint names; each is overridden by the setting RUNONCE_<NAME>_ENDPOINT."""

if TYPE_CHECKING:

    class TargetConfig(Protocol):
        """What a type checker sees of the union below, which is built from TARGET_TYPES at import."""

        @property
        def type(self) -> str: ...

else:
    TargetConfig = Annotated[
        Union[tuple(entry.config for entry in TARGET_TYPES.values())],  # noqa: UP007 - built at run time
        Field(discriminator="type"),
    ]
    """A route's `target:` block; `type` picks the adapter."""


def build_target(config: TargetConfig, context: TargetContext) -> Target:
    """The adapter for one route's validated target block."""
    entry = TARGET_TYPES[config.type]
    return entry.build(config, context, entry.endpoint_override(context.endpoints))


__all__ = [
    "ENDPOINTS",
    "NOTHING_SENT",
    "TARGET_TYPES",
    "DispatchRequest",
    "Grant",
    "PayloadNotSendable",
    "Target",
    "TargetConfig",
    "TargetContext",
    "TargetError",
    "TargetFailed",
    "TargetOutcomeUnknown",
    "TargetThrottled",
    "TargetType",
    "build_target",
    "encode_json",
]
