"""guardian's command line, run as a process of its own (system tests only)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def guardian(*args: str, env: Mapping[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m guardian ARGS`` with this interpreter, in the current directory, with
    this process's environment unless ``env`` is given; its output captured as text."""
    return subprocess.run([sys.executable, "-m", "guardian", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
