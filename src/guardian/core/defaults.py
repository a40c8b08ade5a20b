"""Where guardian's files live unless told otherwise (importing this costs nothing)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG = Path("/etc/guardian/guardian.toml")
DEFAULT_RULES = "/etc/guardian/rules"
