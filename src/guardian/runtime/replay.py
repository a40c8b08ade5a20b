"""Replay a recording through the engine: the same decisions, byte for byte, every time."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardian.core.snapshot import SignalSpec, Snapshot
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine
from guardian.model.holds import Hold
from guardian.model.ruleset import Ruleset
from guardian.model.window import Window
from guardian.runtime.evidence import compared
from guardian.runtime.recording import Recording
from guardian.runtime.status import at

_BARE = re.compile(r"[\w.*?@:/+\-\[\]]+")  # a string said without quotes


@dataclass
class Replay:
    engine: Engine
    decisions: list[Decision] = field(default_factory=list)
    firing: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    last: Snapshot | None = None
    ticks: int = 0
    blind: dict[str, int] = field(default_factory=dict)  # rule -> ticks it had no value
    # decision (its index in `decisions`) -> what its condition compared, as `run --once`
    # says it; a decision without one says its evidence
    said: dict[int, str] = field(default_factory=dict)

    def blind_lines(self) -> list[str]:
        """The rules the recording could not show: blind the whole time, or part of it."""
        whole = sorted(n for n, k in self.blind.items() if k == self.ticks)
        part = sorted(n for n, k in self.blind.items() if 0 < k < self.ticks)
        lines = []
        if whole:
            lines.append(f"blind the whole time ({len(whole)} rules, no value in any of "
                         f"its {self.ticks} snapshots): {', '.join(whole)}")
        if part:
            lines.append(f"blind part of the time ({len(part)}): " + ", ".join(
                f"{n} ({self.blind[n]}/{self.ticks})" for n in part))
        return lines


# decisions made while the condition does not hold: every operand's value is said
_NOT_HOLDING = {"resolved", "inactive", "validating"}


def replay(rec: Recording, ruleset: Ruleset, until: float | None = None) -> Replay:
    """Run the engine over the recording (up to ``until`` seconds from its start); each
    decision keeps what its rule's condition compared then."""
    r = Replay(Engine(ruleset))
    specs = {**rec.catalogue, **ruleset.signals}
    for snap in rec.snapshots:
        # up to the snapshot printed as `until` (times print in whole seconds: the one at
        # 570.041 s is "+9m30s", and `--at 9m30s` means it)
        if until is not None and round(snap.time) > until:
            break
        step(r, snap, specs)
    return r


def step(r: Replay, snap: Snapshot, specs: Mapping[str, SignalSpec], *,
         holds: Iterable[Hold] = (), wall: float | None = None,
         window: Window | None = None) -> list[Decision]:
    """One snapshot of a replay through its engine (under the ``holds``, ``wall`` time
    and default ``window`` the engine's evaluate takes); its decisions, also kept in
    ``r``. ``specs``: the recording's catalogue and the rules' signals."""
    ruleset = r.engine.ruleset
    out = r.engine.evaluate(snap, holds=holds, wall=wall, window=window)
    for d in out:
        rule = ruleset.by_name(d.rule)
        if rule is not None:
            r.said[len(r.decisions)] = " ".join(compared(
                rule, specs, snap.values, r.engine.history,
                holds=d.kind not in _NOT_HOLDING))
        r.decisions.append(d)
        windows = r.firing.setdefault(d.rule, [])
        if d.kind == "firing":
            windows.append((d.time, None))
        elif d.kind == "resolved" and windows and windows[-1][1] is None:
            windows[-1] = (windows[-1][0], d.time)
    r.ticks += 1
    for name, st in r.engine.states.items():
        if st.unknown:
            r.blind[name] = r.blind.get(name, 0) + 1
    r.last = snap
    return out


def timeline(r: Replay) -> list[str]:
    """One line per decision, what its condition compared as ``run --once`` says it
    (``delta(memcg.dying, "30m"): 2101 cgroups``; only the comparisons that hold when
    the rule holds), and one per action it would run (``log message="…"``); the time
    and rule columns as wide as their longest entry."""
    when = [at(d.time) for d in r.decisions]
    tw = max(map(len, when), default=0)
    nw = max((len(d.rule) for d in r.decisions), default=0)
    lines = []
    for i, (d, t) in enumerate(zip(r.decisions, when, strict=True)):
        reason = f"  ({d.reason})" if d.reason else ""
        mode = "  [observe: shadow mode, never applied]" if d.mode == "observe" else ""
        lines.append(f"  {t:>{tw}}  {d.rule:<{nw}}  {d.kind:<10} "
                     f"{r.said.get(i, d.text)}{reason}{mode}".rstrip())
        for a in d.actions:
            lines.append(f"  {'':>{tw}}  would run: {a.use} {params_text(a.public_params)}"
                         .rstrip())
    return lines


def params_text(params: dict[str, Any]) -> str:
    """An action's parameters for people: ``allow=ecs*.service min_restarts=5``, a
    string quoted where it has spaces or quotes, a list comma-separated."""
    return " ".join(f"{k}={_param(v)}" for k, v in sorted(params.items()))


def _param(v: Any) -> str:
    if isinstance(v, str):
        return v if _BARE.fullmatch(v) else json.dumps(v, ensure_ascii=False)
    if isinstance(v, list) and v and all(isinstance(x, str | int | float) for x in v):
        return ",".join(_param(x) for x in v)
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def decisions_json(r: Replay) -> list[dict[str, Any]]:
    return [d.to_dict() for d in r.decisions]
