"""The signals' recent history in an evidence bundle: the service keeps its last
snapshots (bounded in age and count) and, when ``evidence.profile`` made a bundle, writes
them into it as a recording (``signals.rec.gz``) that ``guardian replay`` and ``guardian
why --recording`` read: the moment as the rules saw it, beside where the kernel spent it."""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path

from guardian.core.snapshot import Snapshot
from guardian.hostio.bundles import SUMMARY, open_bundle
from guardian.runtime.collector import Collector
from guardian.runtime.executor import Executed
from guardian.runtime.recording import Writer, header

log = logging.getLogger("guardian.evidence")

RECORDING = "signals.rec.gz"
USE = "evidence.profile"


class RecentSignals:
    """The last snapshots, at most ``seconds`` old and ``count`` of them."""

    def __init__(self, collector: Collector, interval: float, seconds: float = 900.0,
                 count: int = 240) -> None:
        self.collector = collector
        self.interval = interval
        self.seconds = seconds
        self.snapshots: deque[Snapshot] = deque(maxlen=count)

    def add(self, snap: Snapshot) -> None:
        if self.snapshots and snap.time <= self.snapshots[-1].time:
            return
        self.snapshots.append(snap)
        while self.snapshots and snap.time - self.snapshots[0].time > self.seconds:
            self.snapshots.popleft()

    def on_result(self, ex: Executed) -> None:
        """Write the history into the bundle an evidence action made (never raises)."""
        if ex.use != USE or ex.outcome is None or not self.snapshots:
            return
        bundle = ex.outcome.data.get("bundle")
        if not isinstance(bundle, str):
            return
        try:
            write_into(Path(bundle), self.collector, self.interval, list(self.snapshots))
        except OSError as exc:
            log.warning("evidence bundle %s: cannot write the signals' history: %s",
                        bundle, exc)


def write_into(bundle: Path, collector: Collector, interval: float,
               snapshots: list[Snapshot]) -> Path:
    """``bundle``/signals.rec.gz, and its name added to the bundle's summary. The bundle is
    checked first as the action made it (guardian's own, in guardian's own directories,
    never through a symlink: :func:`guardian.hostio.bundles.open_bundle`); the recording
    is a new file there (never through a symlink), the summary rewritten relative to the
    bundle's descriptor. Raises OSError (a bundle not to be trusted among them)."""
    with open_bundle(bundle) as b:
        path = bundle / RECORDING
        writer = Writer(path, header(collector, interval,
                                     note=f"evidence bundle {bundle.name}"))
        try:
            for snap in snapshots:
                writer.write(snap)
        finally:
            writer.close()
        data = b.summary()
        if data is not None:
            data["files"] = sorted({*data.get("files", []), RECORDING})
            data["history_snapshots"] = len(snapshots)
            b.write(SUMMARY, json.dumps(data, indent=1, default=str))
    return path
