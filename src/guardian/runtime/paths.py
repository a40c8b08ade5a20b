"""Where the service keeps its state file and audit log, for the commands that share
them with it (``run --once``, ``act``, ``why``, ``pause`` and ``holds``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from guardian.runtime.config import Config

__all__ = ["ServicePaths", "service_paths"]


class ServicePaths(NamedTuple):
    state: Path
    audit: Path


def service_paths(config: Config) -> ServicePaths:
    """The config's state file and audit log, else those in the directories systemd gives
    the unit (``StateDirectory=``, ``LogsDirectory=``), else the defaults of both."""
    state_dir = os.environ.get("STATE_DIRECTORY", "/var/lib/guardian").split(":")[0]
    logs_dir = os.environ.get("LOGS_DIRECTORY", "/var/log/guardian").split(":")[0]
    svc = config.service
    return ServicePaths(Path(svc.state_file or f"{state_dir}/state.json"),
                        Path(svc.audit_log or f"{logs_dir}/audit.jsonl"))
