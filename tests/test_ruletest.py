"""`guardian test`: promtool-style rule unit tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from guardian.policy.ruletest import parse_series, run_test_file

from .conftest import RULES, write


def test_series_notation() -> None:
    assert parse_series("1 2 3") == [1, 2, 3]
    assert parse_series("0+10x3") == [0, 10, 20, 30]
    assert parse_series("5-1x2 _ 7x1") == [5, 4, 3, None, 7, 7]
    assert parse_series("_x2 1.5") == [None, None, None, 1.5]
    for bad in ("1+", "x3", "a", "_+1x2", "1x99999999"):
        with pytest.raises(ValueError):
            parse_series(bad)


@pytest.mark.parametrize("path", sorted(RULES.glob("*.test.toml")), ids=lambda p: p.name)
def test_shipped_rule_tests_pass(path: Path) -> None:
    res = run_test_file(path)
    assert res.errors == [] and res.failures == []
    assert res.tests >= 3


RULE = '''version = 1
[[rule]]
name = "many-zombies"
summary = "s"
when = "processes.zombies > 10"
for = "2m"
  [[rule.action]]
  use = "log"
'''


def test_wrong_expectation_fails_with_a_diff(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", RULE)
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "wrong on purpose"
[test.series]
"processes.zombies" = "50x5"
  [[test.expect]]
  at = "1m"
  firing = ["many-zombies"]
''')
    proc = subprocess.run([sys.executable, "-m", "guardian", "test", str(t)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout and "'wrong on purpose' at 1m" in proc.stdout
    assert "firing: expected ['many-zombies'], got [] (nothing)" in proc.stdout
    assert "-many-zombies" in proc.stdout  # the diff line
    assert "1 test(s), 1 problem(s)" in proc.stdout


def test_empty_expectation_asserts_nothing_fires(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", RULE)
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "fires, so an empty expectation fails"
[test.series]
"processes.zombies" = "50x5"
  [[test.expect]]
  at = "2m"
  firing = []
  actions = []
''')
    res = run_test_file(t)
    [f] = res.failures
    assert "got ['many-zombies']" in f.message
    assert "actions: expected [] (nothing), got ['many-zombies: log']" in f.message


def test_action_parameters_are_compared_when_named(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", RULE.replace('use = "log"', 'use = "log"\n  level = "error"'))
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "params"
[test.series]
"processes.zombies" = "50x5"
  [[test.expect]]
  at = "2m"
  actions = [{ rule = "many-zombies", use = "log", level = "warning" }]
''')
    [f] = run_test_file(t).failures
    assert "-many-zombies: log level='warning'" in f.message
    assert "+many-zombies: log level='error'" in f.message


def test_bad_test_input_is_reported_with_position(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", RULE)
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "bad"
[test.series]
"processes.zombiez" = "1x5"
  [[test.expect]]
  at = "90s"
''')
    res = run_test_file(t)
    [d] = res.errors
    assert (d.line, d.col) == (6, 1) and "unknown signal 'processes.zombiez'" in d.message


def test_broken_rule_file_fails_the_test_file(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", RULE.replace("processes.zombies", "processes.zombiez"))
    t = write(tmp_path, "z.test.toml", 'rule_files = ["z.toml"]\n[[test]]\nname = "x"\n')
    res = run_test_file(t)
    assert not res.ok and "unknown signal 'processes.zombiez'" in res.errors[0].message
