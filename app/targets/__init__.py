"""Targets: one module per downstream type behind `Target` (see `base.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import httpx
from pydantic import Field

from .base import (
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
from .cloud_build_trigger import CloudBuildTriggerTarget, CloudBuildTriggerTargetConfig
from .cloud_run_job import CloudRunJobTarget, CloudRunJobTargetConfig
from .cloud_tasks_task import CloudTasksTaskTarget, CloudTasksTaskTargetConfig
from .google import GoogleAuth
from .http import HttpTarget, HttpTargetConfig
from .log import LogTarget, LogTargetConfig
from .workflows import WorkflowsTarget, WorkflowsTargetConfig

TargetConfig = Annotated[
    LogTargetConfig
    | HttpTargetConfig
    | WorkflowsTargetConfig
    | CloudRunJobTargetConfig
    | CloudBuildTriggerTargetConfig
    | CloudTasksTaskTargetConfig,
    Field(discriminator="type"),
]
"""A route's `target:` block; `type` picks the adapter."""


@dataclass
class TargetContext:
    """What adapters share for the life of the process: one HTTP client, one set of Google
    credentials, and the API endpoints (`None` = Google's; tests point them at local fakes)."""

    http: httpx.AsyncClient
    google_auth: GoogleAuth = field(default_factory=GoogleAuth)
    workflows_endpoint: str | None = None
    run_endpoint: str | None = None
    cloudbuild_endpoint: str | None = None
    cloudtasks_endpoint: str | None = None


def build_target(config: TargetConfig, context: TargetContext) -> Target:
    match config:
        case LogTargetConfig():
            return LogTarget(config)
        case HttpTargetConfig():
            return HttpTarget(config, context.http, context.google_auth)
        case WorkflowsTargetConfig():
            return WorkflowsTarget(config, context.google_auth, context.workflows_endpoint)
        case CloudRunJobTargetConfig():
            return CloudRunJobTarget(config, context.http, context.google_auth, context.run_endpoint)
        case CloudBuildTriggerTargetConfig():
            return CloudBuildTriggerTarget(config, context.http, context.google_auth, context.cloudbuild_endpoint)
        case CloudTasksTaskTargetConfig():
            return CloudTasksTaskTarget(config, context.http, context.google_auth, context.cloudtasks_endpoint)
    raise ValueError(f"no adapter for target type {config.type!r}")


__all__ = [
    "NOTHING_SENT",
    "DispatchRequest",
    "PayloadNotSendable",
    "Target",
    "TargetConfig",
    "TargetContext",
    "TargetError",
    "TargetFailed",
    "TargetOutcomeUnknown",
    "TargetThrottled",
    "build_target",
    "encode_json",
]
