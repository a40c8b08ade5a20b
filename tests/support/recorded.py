"""A recording as a host: `run --once` and `signals` over a point of one of tests/data's
recordings, for golden files that do not depend on the machine the tests run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from guardian.core.snapshot import Snapshot
from guardian.hostio.host import Host
from guardian.plugin.contract import Source
from guardian.plugin.registry import Registry
from guardian.runtime.collector import Collector
from guardian.runtime.recording import Recording


class _Named:
    """What the pass asks of a running source: its name."""

    def __init__(self, name: str) -> None:
        self.name = name


class RecordedCollector(Collector):
    """Hands out a recording's snapshot at ``at`` seconds from its start (the one
    `guardian replay` prints at that second, as `explain --at` takes it), after the one
    before it, as `run --once` takes a warm-up sample
    and then the one it evaluates. Its sources are those the recording names; the
    registry's others are unavailable ("not in the recording"); actions plan against
    ``root``."""

    def __init__(self, rec: Recording, at: float, registry: Registry, root: Path) -> None:
        super().__init__(Host(root), [])
        start = rec.snapshots[0].time
        i = max(j for j, s in enumerate(rec.snapshots) if s.time - start < at + 0.5)
        self._queue = [rec.snapshots[max(i - 1, 0)], rec.snapshots[i]]
        recorded = list(rec.header.get("sources", []))
        self.sources = cast(list[Source[Any]], [_Named(n) for n in recorded])
        self.unavailable = {**{n: "not in the recording" for n in sorted(registry.sources)
                               if n not in recorded},
                            **rec.header.get("unavailable", {})}

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot the pass evaluates."""
        return self._queue[-1]

    def collect(self, now: float) -> Snapshot:
        return self._queue.pop(0) if len(self._queue) > 1 else self._queue[0]

    def close(self) -> None:
        pass
