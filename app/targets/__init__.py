"""Targets: one module per downstream type behind `Target` (see `base.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import httpx
from pydantic import Field

from .base import (
    DispatchRequest,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
)
from .http import HttpTarget, HttpTargetConfig
from .log import LogTarget, LogTargetConfig

TargetConfig = Annotated[LogTargetConfig | HttpTargetConfig, Field(discriminator="type")]
"""A route's `target:` block; `type` picks the adapter."""


@dataclass
class TargetContext:
    """What adapters share for the life of the process."""

    http: httpx.AsyncClient


def build_target(config: TargetConfig, context: TargetContext) -> Target:
    match config:
        case LogTargetConfig():
            return LogTarget(config)
        case HttpTargetConfig():
            return HttpTarget(config, context.http)
    raise ValueError(f"no adapter for target type {config.type!r}")


__all__ = [
    "DispatchRequest",
    "Target",
    "TargetConfig",
    "TargetContext",
    "TargetError",
    "TargetFailed",
    "TargetOutcomeUnknown",
    "TargetThrottled",
    "build_target",
]
