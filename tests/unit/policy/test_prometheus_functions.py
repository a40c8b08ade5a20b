"""The range functions and clamps guardian shares with PromQL pass Prometheus' own test
cases for them (tests/support/prometheus/functions.test, from promql/promqltest/testdata), run
through guardian's compiler and history by tests/support/prometheus/promqltest.py.

Evaluations that need what guardian has no words for (histograms, `@`, subqueries, regex
and negative matchers, selectors without a name, NaN samples) are skipped and counted;
each function keeps cases that run. last_over_time's only cases there select by a
regular expression over histograms: tests/system/test_promql_differential.py checks it against
promtool instead.
"""

from __future__ import annotations

from tests.support.checkout import PROMETHEUS
from tests.support.prometheus import promqltest

FUNCTIONS = ("count_over_time", "sum_over_time", "quantile_over_time", "stddev_over_time",
             "absent_over_time", "changes", "resets", "predict_linear", "clamp_min",
             "clamp_max", "last_over_time")
CASES = PROMETHEUS / "functions.test"


def test_prometheus_own_function_cases_pass() -> None:
    result = promqltest.run(CASES.read_text(), FUNCTIONS)
    assert result.failed == [], [(e.line, e.expr, e.want, got) for e, got in result.failed]
    ran = [e.expr for e in result.passed + result.nan_is_no_value]
    for fn in FUNCTIONS[:-1]:
        assert any(f"{fn}(" in expr for expr in ran), fn
    assert len(ran) >= 60
    assert sum(result.skipped.values()) < len(ran)
