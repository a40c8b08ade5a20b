"""The exposition source on this host, built from keyword settings."""

from __future__ import annotations

import time
from collections.abc import Callable

from guardian.hostio.host import Host
from guardian.sources.exposition import ExpositionConfig, ExpositionSource


def exposition_source(clock: Callable[[], float] | None = None,
                      **cfg: object) -> ExpositionSource:
    return ExpositionSource(Host(), ExpositionConfig.model_validate(cfg),
                            clock=clock or time.monotonic)
