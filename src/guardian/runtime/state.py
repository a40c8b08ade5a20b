"""Persisted engine state (cooldowns, limits, budget, pending and firing timers), written
atomically under the unit's StateDirectory so a restart neither forgets a cooldown nor
re-fires an action.

Times are kept on the kernel's monotonic clock, with the boot they belong to (the
kernel's boot id). After a restart in the same boot they are exact, whatever the wall
clock did meanwhile. After a reboot only the wall clock bridges the gap: the time since
the save is the wall clock's difference, taken as zero when the wall clock went backwards,
and no restored time may lie in the future. So a wrong wall clock can shorten or restart a
cooldown, never stretch one for good.

The file is validated before use: a rule entry that does not hold (a string for a time,
NaN, ``null`` in a list, pending without its start) is dropped and logged, the rest kept.
A rule's entry is :class:`~guardian.engine.lifecycle.RuleState` itself, every field of it
(validated against its own types), so a save and a load lose nothing an evaluation reads.
The format stays 2: format 3 would only add fields, which a format-2 reader ignores (so a
downgrade keeps its cooldowns); entries written before lack them and take their defaults.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from guardian.core.atomicfile import write_json
from guardian.engine.engine import Engine, EngineState, Proposal
from guardian.engine.lifecycle import RuleState, Time
from guardian.hostio.host import boot_id

log = logging.getLogger("guardian.state")
FORMAT = 2
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

RULE = TypeAdapter(RuleState)


@dataclass(frozen=True)
class Clock:
    """The clocks a state is saved and loaded by: the kernel's monotonic clock, the
    boot it counts from, and the wall clock that bridges a reboot."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    boot: Callable[[], str] = lambda: boot_id(BOOT_ID)


SYSTEM = Clock()


class SavedState(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    format: Literal[1, 2]
    boot_id: str = ""
    saved_mono: Time | None = None  # format 2: when it was saved, monotonic
    saved_at: Time | None = None  # when it was saved, wall clock
    rules: dict[str, Any] = Field(default_factory=dict)  # each checked on its own
    global_runs: list[Time] = Field(default_factory=list)


def encode(state: EngineState, clock: Clock = SYSTEM) -> dict[str, Any]:
    """The file's content for ``state`` (the engine's times are monotonic already)."""
    return {"format": FORMAT, "boot_id": clock.boot(), "saved_mono": clock.monotonic(),
            "saved_at": clock.wall(),
            "rules": {name: RULE.dump_python(st) for name, st in state.rules.items()},
            "global_runs": list(state.global_runs)}


def save(engine: Engine, path: Path, *, proposal: Proposal | None = None,
         clock: Clock = SYSTEM) -> None:
    """Write the engine's state atomically, as it is or as ``proposal`` leaves it.
    Raises OSError."""
    write_json(path, encode(engine.state(proposal), clock))


def rule_state(entry: Any) -> RuleState:
    """A saved rule entry as a state, or ValueError (ValidationError) saying why not.
    An entry written before ``active_at`` was kept started when its ``since`` did."""
    if isinstance(entry, dict) and "active_at" not in entry:
        entry = {**entry, "active_at": entry.get("since")}
    st = RULE.validate_python(entry)
    if why := st.problem():
        raise ValueError(why)
    return st


def decode(raw: Any, path: Path, clock: Clock = SYSTEM) -> EngineState:
    """A saved state's content, times moved onto this boot's monotonic clock; an invalid
    rule entry is dropped and logged. Raises ValueError for a file that is unusable."""
    state = SavedState.model_validate(raw)
    now_mono, now_wall = clock.monotonic(), clock.wall()
    if state.format == 2 and state.boot_id and state.boot_id == clock.boot():
        offset = 0.0  # the same boot: monotonic times are exact
    else:
        saved_ref = state.saved_mono if state.format == 2 else state.saved_at
        elapsed = max(now_wall - (state.saved_at or now_wall), 0.0)
        offset = (saved_ref if saved_ref is not None else now_mono) - (now_mono - elapsed)

    def t(x: float) -> float:  # no restored time lies in the future
        return min(x - offset, now_mono)

    rules: dict[str, RuleState] = {}
    for name, entry in state.rules.items():
        try:
            rules[name] = rule_state(entry).shifted(t)
        except ValueError as exc:
            why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            log.error("state file %s: dropping the state of rule %r: %s", path, name, why)
    return EngineState(rules, [t(x) for x in state.global_runs])


def load(engine: Engine, path: Path, *, clock: Clock = SYSTEM) -> list[str]:
    """Restore a saved state into ``engine``; the rules restored. A missing file is a
    first start; a damaged one is reported and ignored, an invalid entry dropped (never a
    crash)."""
    try:
        raw: Any = json.loads(path.read_text())
        state = decode(raw, path, clock)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:  # ValidationError is a ValueError
        log.error("state file %s is unusable, starting without it: %s", path,
                  str(exc).splitlines()[0])
        return []
    return engine.restore(state)
