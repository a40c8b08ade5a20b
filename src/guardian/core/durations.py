"""Durations as rule files write them: "90s", "5m", "1h30m", "2d"."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, Field, WithJsonSchema

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


MAX_DURATION = 10 * 365 * 86400.0  # ten years: longer is a mistake, not a window


def parse_duration(text: str | int | float) -> float:
    """Seconds in a duration string; a bare number is seconds. Raises ValueError for
    anything that is not a finite duration from zero to ten years."""
    return _bounded(_parse(text), text)


def _bounded(seconds: float, text: object) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be a finite number of seconds, not {text!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration {text!r} is longer than ten years")
    return seconds


def _parse(text: str | int | float) -> float:
    if isinstance(text, bool):
        raise ValueError("a duration is a string such as \"90s\" or \"5m\", not a boolean")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"a duration cannot be negative: {text}")
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"a duration is a string such as \"90s\", not {type(text).__name__}")
    s = text.strip()
    if not s:
        raise ValueError("empty duration; expected e.g. \"90s\", \"5m\", \"1h30m\"")
    pos = 0
    total = 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(
            f"bad duration {text!r}; expected a number with a unit (ms, s, m, h, d, w), "
            "e.g. \"90s\", \"5m\", \"1h30m\""
        )
    return total


def format_duration(seconds: float) -> str:
    """The shortest readable form of a duration ("1h30m", "90s" → "1m30s")."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts = []
    rest = seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        n = int(rest // size)
        if n:
            parts.append(f"{n}{unit}")
            rest -= n * size
    if rest:
        parts.append(f"{rest:g}s")
    return "".join(parts)


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema({
        "type": ["string", "number"],
        "pattern": r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$",
        "description": 'a duration such as "90s", "5m", "1h30m", or seconds as a number',
    }),
]

# A window (a limit's span, a budget's, the tick interval): zero would divide or spin.
PositiveDuration = Annotated[Duration, Field(gt=0)]
