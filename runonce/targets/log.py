"""`log` target: records the run in the log and succeeds. For demos and smoke tests."""

from __future__ import annotations

import logging
from typing import Literal

from runonce.targets.base import DispatchRequest, Target, TargetConfigModel
from runonce.targets.registry import TargetType

logger = logging.getLogger("runonce.target.log")


class LogTargetConfig(TargetConfigModel):
    type: Literal["log"]


class LogTarget(Target):
    type = "log"

    def __init__(self, config: LogTargetConfig):
        self.config = config

    async def dispatch(self, request: DispatchRequest) -> str:
        logger.info(
            "log target: run %s of job %s at %s (%s)",
            request.run_id,
            request.job,
            request.schedule_time or request.task,
            request.source,
        )
        return f"log/{request.run_id}"


TARGET = TargetType(
    name="log",
    config=LogTargetConfig,
    adapter=LogTarget,
    build=lambda config, context, endpoint: LogTarget(config),
)
