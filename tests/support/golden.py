"""Golden files (tests/data/golden/): a command's whole output for a fixed input (a point
of a recording in tests/data), compared byte for byte, so a change to what a person reads
shows as a diff in review. A golden test's name ends in ``golden_file``;

    GUARDIAN_GOLDEN_UPDATE=1 python -m pytest tests -k golden_file

writes every golden file anew from the code as it is (read the diff before committing)."""

from __future__ import annotations

import os
from pathlib import Path

UPDATE = "GUARDIAN_GOLDEN_UPDATE"


def matches_golden(path: Path, text: str) -> None:
    """``text`` is the golden file at ``path`` (which it replaces when ``UPDATE`` is
    set in the environment)."""
    if os.environ.get(UPDATE):
        path.write_text(text)
    assert text == path.read_text(), f"not the golden file {path.name}; if the change " \
        f"is meant, {UPDATE}=1 python -m pytest tests -k golden_file writes it anew"
