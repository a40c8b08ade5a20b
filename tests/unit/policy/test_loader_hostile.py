"""Hostile rule files: numbers that are not durations and inputs that crashed the loader
are located errors (tests/data/hostile/loader/), and no file blocks or floods it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.policy.loader import load_rules
from tests.support.checkout import write
from tests.support.daemon import RULE
from tests.support.hostile import Case, cases
from tests.support.wait import ends


def _said(paths: list[Path]) -> str:
    """What the loader says about ``paths``: every diagnostic, one a line (what `guardian
    check` prints); anything but a RuleError (a traceback) fails the test."""
    with pytest.raises(RuleError) as info:
        load_rules(paths)
    return "\n".join(str(d) for d in info.value.diagnostics)


@pytest.mark.usefixtures("default_recursion_limit")
@pytest.mark.parametrize("case", cases("loader", "toml"))
def test_each_bad_rule_file_is_a_located_error(case: Case) -> None:
    said = _said([case.path])
    for line in case.expected:
        assert f"{case.path.name}:{line}" in said, said


def test_rule_files_never_block_and_have_a_size_cap(tmp_path: Path) -> None:
    """Before: a FIFO named *.toml blocked the loop on reload, and a 50 MB file cost 7 s
    and 242 MB."""
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "ok.toml", RULE.format(name="r"))
    os.mkfifo(rules / "fifo.toml")
    (rules / "huge.toml").write_bytes(b"#" * (50 << 20))
    # on a thread: a loader that opens the FIFO blocks for good, and must fail, not hang
    said = ends(lambda: _said([rules]), "loading rules beside a FIFO")
    assert "fifo.toml:1:1: cannot read rule file: not a regular file" in said
    assert "huge.toml:1:1: cannot read rule file: 52428800 bytes; at most 1048576" in said
