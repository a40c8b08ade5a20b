"""Hostile inputs as data files: ``tests/data/hostile/<unit>/<name>.<ext>``, each with
``<name>.expected`` beside it (what must be said about it, one item a line), so adding a
bad input is adding two files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkout import DATA

HOSTILE = DATA / "hostile"


@dataclass(frozen=True)
class Case:
    """One bad input and what its ``.expected`` says."""

    path: Path
    expected: list[str]

    def text(self) -> str:
        return self.path.read_text()


def cases(unit: str, ext: str) -> list[Any]:
    """``pytest.param`` per ``*.<ext>`` in ``tests/data/hostile/<unit>/``, named by file.
    A folder with no input, or an input without its ``.expected``, is an error: a case
    that asserts nothing must not pass."""
    folder = HOSTILE / unit
    inputs = sorted(folder.glob(f"*.{ext}"))
    assert inputs, f"no *.{ext} in {folder}"
    out = []
    for path in inputs:
        sidecar = path.with_suffix(".expected")
        assert sidecar.is_file(), f"{path.name} has no {sidecar.name}"
        lines = [ln for ln in sidecar.read_text().splitlines() if ln.strip()]
        out.append(pytest.param(Case(path, lines), id=path.stem))
    orphans = {p.stem for p in folder.glob("*.expected")} - {p.stem for p in inputs}
    assert not orphans, f"{folder}: .expected without an input: {sorted(orphans)}"
    return out
