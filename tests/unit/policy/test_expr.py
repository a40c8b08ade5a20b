"""The condition language: semantics of compiled conditions and their errors."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from guardian.core.snapshot import SignalSpec, labels_of
from guardian.engine.history import History
from guardian.policy.expr import ExprError, compile_condition

CAT = {s.name: s for s in (
    SignalSpec("a.x", "x"), SignalSpec("a.y", "y"), SignalSpec("a.z", "z"),
    SignalSpec("c.core", "per core", labels=("cpu",)),
    SignalSpec("n.stat", "per nic", labels=("iface", "stat")),
)}


def fam(**members: float) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels_of({"cpu": k.lstrip("c")}): v for k, v in members.items()}


def ev(text: str, values: Mapping[str, object], hist: History | None = None) -> object:
    cond = compile_condition(text, CAT)
    return cond.fn(values, hist or History({}))


def test_scalar_comparisons_and_arithmetic() -> None:
    assert ev("a.x > 10 and a.x > 20 * a.y", {"a.x": 30.0, "a.y": 1.0}) is True
    assert ev("a.x > 10 and a.x > 20 * a.y", {"a.x": 30.0, "a.y": 2.0}) is False
    assert ev("(a.x + a.y) / 2 == 5", {"a.x": 4.0, "a.y": 6.0}) is True
    assert ev("a.x % 3 == 1", {"a.x": 7.0}) is True
    assert ev("-a.x < 0", {"a.x": 1.0}) is True
    assert ev("0 < a.x < 5", {"a.x": 3.0}) is True
    assert ev("0 < a.x < 5", {"a.x": 6.0}) is False


def test_missing_value_is_unknown_with_kleene_logic() -> None:
    assert ev("a.x > 1", {}) is None
    assert ev("a.x > 1 and a.y > 1", {"a.x": 0.0}) is False  # false and unknown
    assert ev("a.x > 1 and a.y > 1", {"a.x": 5.0}) is None  # true and unknown
    assert ev("a.x > 1 or a.y > 1", {"a.x": 5.0}) is True  # true or unknown
    assert ev("a.x > 1 or a.y > 1", {"a.x": 0.0}) is None  # false or unknown
    assert ev("not a.x > 1", {}) is None
    assert ev("a.x / a.y > 1", {"a.x": 1.0, "a.y": 0.0}) is None  # division by zero


def test_family_selection_comparison_and_aggregation() -> None:
    cores = {"c.core": fam(c0=95.0, c1=10.0, c2=99.0)}
    hot = ev("c.core > 90", cores)
    assert hot == {labels_of({"cpu": "0"}): 95.0, labels_of({"cpu": "2"}): 99.0}
    assert ev('c.core{cpu="1"} > 90', cores) == {}
    assert ev("count(c.core > 90) >= 2", cores) is True
    assert ev("max(c.core) > 98 and min(c.core) < 20", cores) is True
    assert ev("avg(c.core) > 60", cores) is True
    assert ev("sum(c.core) == 204", cores) is True
    assert ev('c.core(cpu="2") > 90', cores) == {labels_of({"cpu": "2"}): 99.0}


def test_empty_family_is_false_not_unknown() -> None:
    empty: dict[str, object] = {"c.core": {}}
    assert ev("max(c.core) > 50", empty) is False
    assert ev("count(c.core > 1) > 0", empty) is False
    assert ev("c.core > 50", empty) == {}
    assert ev("max(c.core) > 50", {}) is None  # no family at all: unknown


def test_label_globs_and_two_labels() -> None:
    stats = {"n.stat": {
        labels_of({"iface": "eth0", "stat": "pps_allowance_exceeded"}): 5.0,
        labels_of({"iface": "eth0", "stat": "bw_in_allowance_exceeded"}): 7.0,
        labels_of({"iface": "eth1", "stat": "pps_allowance_exceeded"}): 1.0,
        labels_of({"iface": "eth0", "stat": "tx_timeout"}): 100.0,
    }}
    assert ev('sum(n.stat{stat="*_allowance_exceeded"}) == 13', stats) is True
    assert ev('sum(n.stat{iface="eth0", stat="*_allowance_*"}) == 12', stats) is True


def test_family_arithmetic_matches_on_labels() -> None:
    v = {"c.core": fam(c0=50.0, c1=10.0)}
    assert ev("c.core * 2 > 90", v) == {labels_of({"cpu": "0"}): 100.0}
    assert ev("c.core + c.core > 90", v) == {labels_of({"cpu": "0"}): 100.0}


def test_time_functions_use_history() -> None:
    cond = compile_condition('rate(a.x, "1m") > 1 and increase(c.core, "1m") > 0', CAT)
    assert cond.windows == {"a.x": 60.0, "c.core": 60.0}
    hist = History(cond.windows)
    for t, x, core in ((0, 0.0, 5.0), (30, 60.0, 5.0), (60, 120.0, 6.0)):
        values = {"a.x": x, "c.core": fam(c0=core)}
        hist.record(float(t), values)
    assert cond.fn(values, hist) is True
    assert hist.query("rate", "a.x", None, 60.0) == pytest.approx(2.0)
    assert hist.query("delta", "a.x", None, 60.0) == pytest.approx(60.0)
    # a window is open on the left, (t - 30s, t]: it holds one sample here, and a delta
    # needs two (as Prometheus' delta() over [30s] would return nothing)
    assert hist.query("delta", "a.x", None, 30.0) is None
    assert hist.query("max_over_time", "a.x", None, 60.0) == 120.0


def test_counter_reset_and_short_history() -> None:
    hist = History({"a.x": 300.0})
    for t, v in ((0, 100.0), (10, 150.0), (20, 5.0), (30, 25.0)):
        hist.record(float(t), {"a.x": v})
    # 100 -> 150 (+50), reset to 5 (+5), 5 -> 25 (+20)
    assert hist.query("increase", "a.x", None, 300.0) == 75.0
    one = History({"a.x": 300.0})
    one.record(0.0, {"a.x": 1.0})
    assert one.query("rate", "a.x", None, 300.0) is None  # one sample: no rate, not zero


def test_absent_is_never_unknown() -> None:
    assert ev("absent(a.x)", {}) is True
    assert ev("absent(a.x)", {"a.x": 0.0}) is False
    assert ev('absent(c.core{cpu="9"})', {"c.core": fam(c0=1.0)}) is True


def test_abs_and_scalar_max() -> None:
    assert ev("abs(a.x) > 2", {"a.x": -3.0}) is True
    assert ev("max(a.x, a.y, 3) == 7", {"a.x": 7.0, "a.y": 1.0}) is True
    assert ev("min(a.x, a.y) > 0", {"a.x": 7.0}) is None


@pytest.mark.parametrize(("text", "fragment", "col"), [
    ("a.xx > 1", "unknown signal 'a.xx'; did you mean a.x", 0),
    ("a.x >", "syntax error", 5),
    ("a.x", "must compare or test something", 0),
    ("foo(a.x) > 1", "unknown function 'foo'", 0),
    ('rate(a.x) > 1', "rate() takes 2 arguments, got 1", 0),
    ('rate(a.x, "5q") > 1', "bad duration '5q'", 10),
    ('rate(a.x, 5) > 1', "needs a window as a duration string", 10),
    ('c.core{core="1"} > 1', "has no label 'core' (its labels: cpu)", 12),
    ('a.x{cpu="1"} > 1', "has no labels; it cannot be selected", 0),
    ("a.x[0] > 1", "indexing ([]) is not allowed", 0),
    ("__import__('os') > 0", "unknown function '__import__'", 0),
    ("__import__('os').system('id') > 0", "a method cannot be called", 0),
    ("(lambda: 1)() > 0", "cannot be called", 0),
    ("a.x > 1 and 3", "'and' needs conditions, got a number", 12),
    ("(a.x > 1) + 1 > 0", "arithmetic needs numbers", 1),
    ("a.x ** 2 > 1", "operator '**' is not allowed", 0),
    ('a.x > "1"', "a string is only allowed", 6),
    ("count(a.x) > 1", "count() needs a family, got a number", 6),
    ("max > 1", "max is a function", 0),
    ("a.x if a.y else a.z", "if/else is not allowed", 0),
])
def test_errors_name_the_problem_and_column(text: str, fragment: str, col: int) -> None:
    with pytest.raises(ExprError) as info:
        compile_condition(text, CAT)
    assert fragment in info.value.message
    assert (info.value.line, info.value.col) == (1, col)


def test_deep_nesting_is_a_clean_error() -> None:
    text = "(" * 5000 + "a.x" + ")" * 5000 + " > 1"
    with pytest.raises(ExprError):
        compile_condition(text, CAT)


def test_generated_code_never_contains_rule_text() -> None:
    cond = compile_condition("""n.stat{stat='x"); import os; ("y'} > 1""", CAT)
    assert "import os" not in cond.source  # label values live in a constant table
    assert cond.fn({"n.stat": {}}, History({})) == {}


def test_infinite_values_compare_sanely() -> None:
    assert ev("a.x > 1e308 * 10", {"a.x": math.inf}) is False


def test_modulo_takes_the_dividends_sign_as_promql() -> None:
    """Before: Python's modulo, (5-12) % 3 == 2; PromQL's is Go's math.Mod: -1."""
    assert ev("(5 - 12) % 3 == -1", {}) is True
    assert ev("a.x % 3 == -1", {"a.x": -7.0}) is True
    assert ev("c.core % 3 < 0", {"c.core": fam(c0=-7.0, c1=7.0)}) == {labels_of({"cpu": "0"}):
                                                                      -1.0}


def test_clamps() -> None:
    assert ev("clamp_max(c.core, 50) == 50", {"c.core": fam(c0=70.0, c1=20.0)}) == {
        labels_of({"cpu": "0"}): 50.0}
    assert ev("clamp_min(a.x, 0) == 0", {"a.x": -3.0}) is True
    with pytest.raises(ExprError, match="clamps to a number"):
        compile_condition("clamp_min(a.x, c.core) > 0", CAT)
