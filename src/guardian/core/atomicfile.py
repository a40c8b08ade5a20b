"""Write a file so that a crash leaves either the old file or the new one, whole."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: str | Path, data: Any) -> None:
    """Temporary file in the same directory, fsync, rename over, fsync the directory."""
    write_text(path, json.dumps(data, sort_keys=True))


def write_text(path: str | Path, text: str, mode: int = 0o600) -> None:
    """``text`` at ``path``, whole or not at all (as :func:`write_json`), with ``mode``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
