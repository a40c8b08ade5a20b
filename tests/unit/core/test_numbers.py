"""Numbers as people read them (issue 40: `signals` printed 1.1428571428571428, 58.58585858585859
and 7292.0)."""

from __future__ import annotations

import pytest

from guardian.core.numbers import NO_VALUE, readable, seconds


@pytest.mark.parametrize(("value", "unit", "text"), [
    (1.1428571428571428, "ratio", "1.14"),      # memcg.dying_ratio, as the issue saw it
    (58.58585858585859, "percent", "58.6"),     # cpu.core.user_pct
    (7292.0, "packets", "7292"),                # a counter is a whole number
    (100.0, "percent", "100"),
    (190.022, "seconds", "3m10s"),              # one duration format everywhere
    (0.25, "seconds", "250ms"),
    (12345.67, "", "12346"),
    (123.456, "", "123.5"),
    (0.0001234, "", "1.23e-04"),
    (float("inf"), "", "+Inf"),                 # as Prometheus writes them
    (float("-inf"), "", "-Inf"),
    (float("nan"), "", "NaN"),
    (None, "percent", NO_VALUE),                # one form for no value
])
def test_readable_rounds_to_what_the_number_means(value: float | None, unit: str,
                                                  text: str) -> None:
    assert readable(value, unit) == text


def test_seconds_are_whole_from_one_second_up() -> None:
    assert seconds(1609.98) == "26m50s" and seconds(-1.0) == "0s"


def test_a_span_under_a_millisecond_is_not_said_as_none() -> None:
    """An action that took 0.000446 s: before, `0s`."""
    assert seconds(0.000446) == "0.4ms" and seconds(0.00004) == "0.04ms"
    assert seconds(0.0012) == "1ms" and seconds(0.0) == "0s"
