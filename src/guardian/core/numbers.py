"""Numbers as people read them (issue 40): rounded to what they mean, one form for "no
value". Machines get the exact figure (``--json``, the audit log); people get this."""

from __future__ import annotations

import math

from guardian.core.durations import format_duration

NO_VALUE = "-"  # the one way a table shows a signal or member with no value
_DURATION_UNITS = {"seconds": 1.0, "s": 1.0, "milliseconds": 0.001, "ms": 0.001}


def readable(value: float | None, unit: str = "") -> str:
    """``value`` rounded for a person: a percentage to one decimal ("58.6"), a whole
    number without ".0" ("7292"), seconds as a duration ("3m10s"), anything else to three
    significant figures below 100 ("1.14") and to a whole number from 1000 up; ``-`` for
    no value, ``NaN``/``+Inf``/``-Inf`` as Prometheus writes them."""
    if value is None:
        return NO_VALUE
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if unit in _DURATION_UNITS and v >= 0:
        return seconds(v * _DURATION_UNITS[unit])
    if unit == "percent":
        return _trim(f"{v:.1f}") if not v.is_integer() else str(int(v))
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    if abs(v) >= 1000:
        return str(round(v))
    if abs(v) >= 100:
        return _trim(f"{v:.1f}")
    return _trim(f"{v:.3g}") if abs(v) >= 0.001 else f"{v:.2e}"


def seconds(value: float) -> str:
    """A span as people read it: whole seconds from one second up ("3m10s", never
    "190.022s"), milliseconds below ("250ms"), below one a tenth of one ("0.4ms", never
    "0s" for a span that lasted)."""
    value = max(value, 0.0)
    if 0 < value < 0.00095:
        return f"{value * 1000:.1g}ms"
    return format_duration(round(value) if value >= 1 else round(value, 3))


def _trim(text: str) -> str:
    if "e" in text or "." not in text:
        return text
    return text.rstrip("0").rstrip(".")
