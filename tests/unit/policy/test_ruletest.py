"""`guardian test`: promtool-style rule unit tests (the command itself:
tests/system/test_ruletest_cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import Snapshot
from guardian.engine.engine import Engine
from guardian.policy import ruletest
from guardian.policy.ruletest import parse_series, run_test_file
from tests.support.checkout import PROMETHEUS, RULES, write
from tests.support.rule_texts import HOT_RULE_TEST, HOT_RULES, ZOMBIE_RULES


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


PROMETHEUS_CASES = PROMETHEUS


@pytest.mark.parametrize("path", sorted(PROMETHEUS_CASES.glob("*.test.toml")),
                         ids=lambda p: p.name)
def test_prometheus_own_cases_pass(path: Path) -> None:
    """Prometheus' tests of rule timing (rules/alerting_test.go, cmd/promtool/testdata),
    translated in tests/support/prometheus/, give Prometheus' answers. Before: keep_firing_for
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


def test_empty_expectation_asserts_nothing_fires(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", ZOMBIE_RULES)
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
    write(tmp_path, "z.toml", ZOMBIE_RULES.replace('use = "log"', 'use = "log"\n  level = "error"'))
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
    write(tmp_path, "z.toml", ZOMBIE_RULES)
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "bad"
[test.series]
"processes.zombiez" = "1x5"
  [[test.expect]]
  at = "90s"
  firing = []
''')
    res = run_test_file(t)
    [d] = res.errors
    assert (d.line, d.col) == (6, 1) and "unknown signal 'processes.zombiez'" in d.message


def test_broken_rule_file_fails_the_test_file(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", ZOMBIE_RULES.replace("processes.zombies", "processes.zombiez"))
    t = write(tmp_path, "z.test.toml", 'rule_files = ["z.toml"]\n[[test]]\nname = "x"\n'
                                       '[[test.expect]]\nat = 0\nfiring = []\n')
    res = run_test_file(t)
    assert not res.ok and "unknown signal 'processes.zombiez'" in res.errors[0].message


# -- rule tests that never lie -----------------------------------------------------------


def _bad(tmp_path: Path, test_text: str) -> list[str]:
    (tmp_path / "r.toml").write_text(HOT_RULES)
    f = tmp_path / "t.test.toml"
    f.write_text(test_text)
    res = run_test_file(f)
    assert res.errors, "no error reported"
    return [str(d).replace(str(f), "t.test.toml") for d in res.errors]


@pytest.mark.parametrize(("old", "new", "want"), [
    ('  firing = ["hot"]', '  firng = ["hot"]',
     "t.test.toml:11:3: unknown key 'firng' (did you mean 'firing'?)"),
    ('[test.series]', '[test.input_series]',  # promtool's name
     "t.test.toml:6:1: unknown key 'input_series' (did you mean 'series'?)"),
    ('  firing = ["hot"]', '',
     "t.test.toml:9:3: test.0.expect.0: an expectation with nothing to check"),
    ('  firing = ["hot"]', '  firing = ["htt"]',
     "t.test.toml:11:13: t: no rule named 'htt' in the rule files (did you mean 'hot'?)"),
    ('  firing = ["hot"]', '  firing = [1]', "t.test.toml:11:13: test.0.expect.0.firing.0: "),
    ('  firing = ["hot"]', '  actions = ["log"]',
     "t.test.toml:11:14: test.0.expect.0.actions.0: "),
    ('  [[test.expect]]', '  [test.expect]', "t.test.toml:9:3: test.0.expect: "),
    ('[test.series]\n"memcg.dying" = "10x3"', 'series = "10x3"',
     "t.test.toml:6:10: test.0.series: "),
    ('  at = "1m"', '  at = "100000w"', "t.test.toml:10:8: test.0.expect.0.at: duration "
     "'100000w' is longer than ten years"),
    ('  at = "1m"', '  at = "500w"', "t.test.toml:10:8: t: expect.at 3500d is 5040000 "
     "evaluations away at 1m; at most 1000000 per test"),
    ('name = "t"', 'name = "t', "t.test.toml:5:10: TOML syntax: "),
    ('rule_files = ["r.toml"]', 'rule_files = "r.toml"', "t.test.toml:1:14: rule_files: "),
], ids=["firng", "input_series", "nothing-to-check", "no-such-rule", "firing-a-number",
        "actions-of-strings", "expect-a-table", "series-a-string", "at-past-ten-years",
        "at-too-many-evaluations", "toml-syntax", "rule_files-a-string"])
def test_bad_test_files_are_located_errors(tmp_path: Path, old: str, new: str,
                                           want: str) -> None:
    """promtool refuses unknown keys; so does guardian, saying which key was meant. Every
    problem is at the offending token, and none is a traceback (before: `firng` was
    ignored and the test passed, `firing = [1]` raised a TypeError, and a TOML syntax
    error's position was in the message at 1:1)."""
    assert old in HOT_RULE_TEST
    got = _bad(tmp_path, HOT_RULE_TEST.replace(old, new))
    assert any(line.startswith(want) for line in got), got


def test_at_zero_is_the_first_evaluation(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(HOT_RULES)
    f = tmp_path / "t.test.toml"
    f.write_text(HOT_RULE_TEST.replace('at = "1m"', "at = 0"))
    res = run_test_file(f)
    assert res.ok and res.tests == 1, (res.errors, res.failures)


def test_a_far_evaluation_time_is_refused_at_once(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before the first evaluation, not after five million of them."""
    evaluated: list[float] = []

    class Counting(Engine):
        def evaluate(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> Any:
            evaluated.append(snapshot.time)
            return super().evaluate(snapshot, *args, **kwargs)

    monkeypatch.setattr(ruletest, "Engine", Counting)
    got = _bad(tmp_path, HOT_RULE_TEST.replace('at = "1m"', 'at = "500w"'))
    assert "evaluations away" in got[0] and evaluated == []
    (tmp_path / "t.test.toml").write_text(HOT_RULE_TEST)  # as it was: it evaluates
    assert run_test_file(tmp_path / "t.test.toml").ok and evaluated


def test_a_test_file_cannot_expand_without_bound(tmp_path: Path) -> None:
    """Before: an 11 KB test file of series like `0x100000 0x100000 ...` expanded to
    2.9 GB and ended in MemoryError; the expansion is bounded, a located error."""
    tokens = " ".join(["0x99999"] * 60)  # 6 million samples in 541 bytes
    t = write(tmp_path, "big.test.toml", f'''rule_files = ["{RULES / "zombies.toml"}"]
interval = "30s"
[[test]]
name = "huge"
[test.series]
"processes.zombies" = "{tokens}"
  [[test.expect]]
  at = "1m"
  firing = []
''')
    res = run_test_file(t)
    assert not res.ok and res.errors
    assert "big.test.toml:6:" in str(res.errors[0]) and "more than 2000000 samples" in \
        str(res.errors[0])


LADDER_RULES = '''version = 1
[[rule]]
name = "stuck"
summary = "zombies pile up"
when = "processes.zombies > 10"
cooldown = "0s"
limit = { runs = 10, within = "1h" }
demote = { after = 1, below = "50%" }
  [[rule.step]]
  verify = "2m"
  [[rule.step.action]]
  use = "log"
  message = "one"
  [[rule.step]]
  verify = "2m"
  [[rule.step.action]]
  use = "log"
  message = "two"
'''


def test_a_ladder_its_human_and_a_demoted_rules_shadow_actions_are_expected(
        tmp_path: Path) -> None:
    write(tmp_path, "l.toml", LADDER_RULES)
    t = write(tmp_path, "l.test.toml", '''rule_files = ["l.toml"]
interval = "1m"
[[test]]
name = "climbs, needs a human, is demoted; its next episode applies nothing"
[test.series]
"processes.zombies" = "50x5 1x1 50x4"
  [[test.expect]]
  at = "0m"
  actions = [{ rule = "stuck", use = "log", message = "one" }]
  step = { stuck = 1 }
  [[test.expect]]
  at = "2m"
  step = { stuck = 2 }
  needs_human = []
  [[test.expect]]
  at = "4m"
  step = { stuck = 0 }
  needs_human = ["stuck"]
  demoted = ["stuck"]
  [[test.expect]]
  at = "8m"
  actions = []
  would = [{ rule = "stuck", use = "log", message = "one" }]
  step = { stuck = 1 }
  needs_human = []
''')
    res = run_test_file(t)
    assert (res.errors, res.failures) == ([], [])
    # a wrong step, a missing human, a demoted rule's action expected as applied: said
    text = t.read_text().replace('step = { stuck = 2 }', 'step = { stuck = 3 }').replace(
        'needs_human = ["stuck"]', 'needs_human = []').replace(
        '  actions = []\n  would', '  actions = [{ rule = "stuck", use = "log" }]\n  would')
    t.write_text(text)
    said = "\n".join(f.message for f in run_test_file(t).failures)
    assert "step of stuck: expected 3, got 2" in said
    assert "needs_human: expected [] (nothing), got ['stuck']" in said
    assert "actions: expected ['stuck: log'], got [] (nothing)" in said
