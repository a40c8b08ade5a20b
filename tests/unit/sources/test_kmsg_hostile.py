"""Hostile kernel-log patterns (tests/data/hostile/kmsg/): a pattern that can stall the
daemon, or patterns that do not combine into the one expression the matcher screens lines
with, are path:line:col errors at the patterns when the configuration loads (so from
`check` and from `run` alike), and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian import cli
from tests.support.checkout import write
from tests.support.daemon import RULE
from tests.support.hostile import Case, cases


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("case", cases("kmsg", "toml"))
def test_each_bad_pattern_is_refused_when_the_config_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case, command: str) -> None:
    rules = str(write(tmp_path, "r.toml", RULE.format(name="r")))
    argv = {"check": ["check", "--config", str(case.path), rules],
            "run": ["run", "--once", "--dry-run", "--config", str(case.path),
                    "--rules", rules]}[command]
    args = cli._parser().parse_args(argv)
    rc = args.func(args)  # in this process: an exception here is the traceback
    out = capsys.readouterr()
    said = out.out + out.err
    assert rc != 0 and (command == "run" or rc == 1), said
    for line in case.expected:
        assert f"{case.path}:{line}" in said, said
    assert "position" not in said  # not a place inside the combined expression
