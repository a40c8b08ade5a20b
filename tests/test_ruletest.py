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
    assert parse_series("_x2 1.5") == [None, None, 1.5]
    for bad in ("1+", "x3", "a", "_+1x2", "1x99999999"):
        with pytest.raises(ValueError):
            parse_series(bad)


NONE = None
# Prometheus promql/parser/parse_test.go TestParseSeriesDesc: the values of each input
# (the metric part left out), and the ones it must reject.
PROMETHEUS_SERIES = [
    ("1 2 3", [1, 2, 3]),
    ("-1 2 3", [-1, 2, 3]),
    ("1 2 3-10x4", [1, 2, 3, -7, -17, -27, -37]),
    ("1 2 3-0x4", [1, 2, 3, 3, 3, 3, 3]),
    ("1x0", [1]),
    ("1+1x0", [1]),
    ("1 3 _ 5 _x4", [1, 3, NONE, 5, NONE, NONE, NONE, NONE]),
    ("1 -1", [1, -1]),
    ("1 +1", [1, 1]),
    ("1 -1 -3-10x4 7 9 +5", [1, -1, -3, -13, -23, -33, -43, 7, 9, 5]),
    ("1 +1 +4 -6 -2 8", [1, 1, 4, -6, -2, 8]),
    ("1 2 3    ", [1, 2, 3]),
]


@pytest.mark.parametrize(("text", "values"), PROMETHEUS_SERIES)
def test_series_notation_as_prometheus_parses_it(text: str, values: list[float | None]) -> None:
    """Before: `_x4` gave five missing samples, and `+1` was refused."""
    assert parse_series(text) == values


@pytest.mark.parametrize("text", ["1+1", "1 3 _ 5 _a4"])
def test_series_prometheus_rejects_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_series(text)


PROMETHEUS_CASES = Path(__file__).parent / "prometheus"


@pytest.mark.parametrize("path", sorted(PROMETHEUS_CASES.glob("*.test.toml")),
                         ids=lambda p: p.name)
def test_prometheus_own_cases_pass(path: Path) -> None:
    """Prometheus' tests of rule timing (rules/alerting_test.go, cmd/promtool/testdata),
    translated in tests/prometheus/, give Prometheus' answers. Before: keep_firing_for
    resolved an interval early, a 1m window held 61 one-second samples, and `for = 300ms`
    missed 1.0 s in floating point."""
    res = run_test_file(path)
    assert res.ok, (res.errors, res.failures)
    assert res.tests > 0


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
