"""Persisted engine state (cooldowns, limits, budget, pending and firing timers), written
atomically under the unit's StateDirectory so a restart neither forgets a cooldown nor
re-fires an action.

The engine runs on the monotonic clock, which restarts at boot; the file stores wall-clock
times, converted on the way out and back in.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from .atomicfile import write_json
from .engine import Engine

log = logging.getLogger("guardian.state")
FORMAT = 1


def _offset() -> float:
    """wall-clock minus monotonic, now."""
    return time.time() - time.monotonic()


def save(engine: Engine, path: Path) -> None:
    """Write the engine's state atomically."""
    write_json(path, {"format": FORMAT, "saved_at": time.time(),
                      **engine.export_state(_offset())})


def load(engine: Engine, path: Path) -> list[str]:
    """Restore a saved state into ``engine``; the rules restored. A missing file is a
    first start; a damaged one is reported and ignored (never a crash)."""
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.error("state file %s is unreadable, starting without it: %s", path, exc)
        return []
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        log.error("state file %s has an unknown format, starting without it", path)
        return []
    return engine.import_state(data, _offset())
