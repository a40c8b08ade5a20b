"""The records guardian keeps on the host across restarts and reboots (read positions,
restart and reboot budgets, saved IRQ affinities), read back whole. They are written with
:func:`guardian.core.atomicfile.write_json`, so a crash leaves the old record or the new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path) -> Any:
    """The JSON document at ``path``. Raises OSError (FileNotFoundError when there is
    none) or ValueError (not UTF-8, not JSON)."""
    return json.loads(Path(path).read_text())
