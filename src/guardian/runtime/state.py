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
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from guardian.core.atomicfile import write_json
from guardian.engine.engine import Engine
from guardian.hostio.host import boot_id
from guardian.model.kinds import Phase

log = logging.getLogger("guardian.state")
FORMAT = 2
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

Time = Annotated[float, Field(allow_inf_nan=False)]


class SavedRule(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    phase: Phase = "inactive"
    since: Time | None = None
    active_at: Time | None = None
    keep_firing_since: Time | None = None
    last_run: Time | None = None
    runs: list[Time] = Field(default_factory=list)
    said_suppressed: bool = False
    held: bool = False
    escalated: bool = False

    @model_validator(mode="after")
    def _started(self) -> SavedRule:
        if self.phase != "inactive" and self.since is None:
            raise ValueError(f"{self.phase} without `since`")
        return self


class SavedState(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    format: Literal[1, 2]
    boot_id: str = ""
    saved_mono: Time | None = None  # format 2: when it was saved, monotonic
    saved_at: Time | None = None  # when it was saved, wall clock
    rules: dict[str, Any] = Field(default_factory=dict)  # each checked on its own
    global_runs: list[Time] = Field(default_factory=list)


def save(engine: Engine, path: Path) -> None:
    """Write the engine's state atomically. Raises OSError."""
    write_json(path, {"format": FORMAT, "boot_id": boot_id(BOOT_ID), "saved_mono": time.monotonic(),
                      "saved_at": time.time(), **engine.export_state()})


def load(engine: Engine, path: Path) -> list[str]:
    """Restore a saved state into ``engine``; the rules restored. A missing file is a
    first start; a damaged one is reported and ignored, an invalid entry dropped (never a
    crash)."""
    try:
        raw: Any = json.loads(path.read_text())
        state = SavedState.model_validate(raw)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:  # ValidationError is a ValueError
        log.error("state file %s is unusable, starting without it: %s", path,
                  str(exc).splitlines()[0])
        return []
    rules: dict[str, Any] = {}
    for name, entry in state.rules.items():
        try:
            rules[name] = SavedRule.model_validate(entry).model_dump()
        except ValidationError as exc:
            log.error("state file %s: dropping the state of rule %r: %s", path, name,
                      exc.errors()[0]["msg"])
    now_mono, now_wall = time.monotonic(), time.time()
    if state.format == 2 and state.boot_id and state.boot_id == boot_id(BOOT_ID):
        offset = 0.0  # the same boot: monotonic times are exact
    else:
        saved_ref = state.saved_mono if state.format == 2 else state.saved_at
        elapsed = max(now_wall - (state.saved_at or now_wall), 0.0)
        offset = (saved_ref if saved_ref is not None else now_mono) - (now_mono - elapsed)
    return engine.import_state({"rules": rules, "global_runs": state.global_runs}, offset,
                               now=now_mono)
