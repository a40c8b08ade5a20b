"""The signals' recent history in an evidence bundle: the service keeps its last
snapshots (bounded in age and count) and, when ``evidence.profile`` made a bundle, writes
them into it as a recording (``signals.rec.gz``) that ``guardian replay`` and ``guardian
why --recording`` read: the moment as the rules saw it, beside where the kernel spent it."""

from __future__ import annotations

import json
import logging
from array import array
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from guardian.core.snapshot import Labels, Snapshot, Value
from guardian.hostio.bundles import SUMMARY, open_bundle
from guardian.model.ruleset import Ruleset
from guardian.runtime.collector import Collector
from guardian.runtime.executor import Executed
from guardian.runtime.recording import Writer, header

log = logging.getLogger("guardian.evidence")

RECORDING = "signals.rec.gz"
USE = "evidence.profile"


@dataclass(frozen=True)
class _Kept:
    """One snapshot as :class:`RecentSignals` keeps it: scalars as they are, families as
    (label sets, values), in the snapshot's order."""

    time: float
    values: list[tuple[str, float | tuple[tuple[Labels, ...], array[float]]]]
    errors: dict[str, str]
    checked: bool

    def snapshot(self) -> Snapshot:
        values: dict[str, Value] = {
            name: dict(zip(v[0], v[1], strict=True)) if isinstance(v, tuple) else v
            for name, v in self.values}
        return Snapshot(self.time, values, dict(self.errors), self.checked)


class RecentSignals:
    """The last snapshots, at most ``seconds`` old and ``count`` of them, kept only while
    some loaded rule can make a bundle (:meth:`follow`). A family is kept as its members'
    values in an array beside its label sets, shared with the snapshot before while they
    are the same: 8 bytes a member, where the snapshot's own floats and dict took about
    100 (on a p5.48xlarge-shaped node, 0.8 MiB a snapshot: 48 MiB for 15 minutes at a
    15 s tick)."""

    def __init__(self, collector: Collector, interval: float, seconds: float = 900.0,
                 count: int = 240) -> None:
        self.collector = collector
        self.interval = interval
        self.seconds = seconds
        self.wanted = True
        self._kept: deque[_Kept] = deque(maxlen=count)
        self._keys: dict[str, tuple[Labels, ...]] = {}  # each family's, as last kept

    def follow(self, ruleset: Ruleset) -> None:
        """Keep snapshots only while a rule of ``ruleset`` has an ``evidence.profile``
        action (a rule's, its escalation's or a step's): no other makes a bundle."""
        self.wanted = any(a.use == USE for r in ruleset.rules for a in r.bound_actions())
        if not self.wanted:
            self._kept.clear()
            self._keys = {}

    def add(self, snap: Snapshot) -> None:
        if not self.wanted or (self._kept and snap.time <= self._kept[-1].time):
            return
        values: list[tuple[str, float | tuple[tuple[Labels, ...], array[float]]]] = []
        keys_now: dict[str, tuple[Labels, ...]] = {}
        for name, v in snap.values.items():
            if isinstance(v, dict):
                keys = tuple(v)
                before = self._keys.get(name)
                keys = before if before == keys and before is not None else keys
                keys_now[name] = keys
                values.append((name, (keys, array("d", v.values()))))
            else:
                values.append((name, v))
        self._keys = keys_now
        self._kept.append(_Kept(snap.time, values, dict(snap.errors), snap.checked))
        while self._kept and snap.time - self._kept[0].time > self.seconds:
            self._kept.popleft()

    def snapshots(self) -> list[Snapshot]:
        """The kept snapshots, oldest first, as they were added."""
        return [k.snapshot() for k in self._kept]

    def on_result(self, ex: Executed) -> None:
        """Write the history into the bundle an evidence action made (never raises)."""
        if ex.use != USE or ex.outcome is None or not self._kept:
            return
        bundle = ex.outcome.data.get("bundle")
        if not isinstance(bundle, str):
            return
        try:
            write_into(Path(bundle), self.collector, self.interval, self.snapshots())
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
