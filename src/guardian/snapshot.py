"""Signals and snapshots: the flat, read-only data every rule is evaluated against.

A signal is either a scalar (one float) or a *family*: floats keyed by label sets,
e.g. ``cpu.core.sys_pct`` keyed by ``(("cpu", "3"),)``. A signal with no value is absent
from the snapshot: absence is "unknown", never zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
Family = dict[Labels, float]
Value = float | Family

SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


@dataclass(frozen=True)
class SignalSpec:
    """What a source promises to provide: name, label names (empty = scalar), unit, help."""

    name: str
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    counter: bool = False

    @property
    def is_family(self) -> bool:
        return bool(self.labels)


@dataclass
class Snapshot:
    """Signal values at one instant. ``time`` is seconds (monotonic or replayed)."""

    time: float
    values: dict[str, Value] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Value | None:
        return self.values.get(name)


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """A canonical label set: sorted (name, value) pairs."""
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


def format_labels(labels: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}"


def format_key(name: str, labels: Labels = ()) -> str:
    return name + format_labels(labels) if labels else name


_SELECTOR = re.compile(r'^\s*([a-z][a-z0-9_.]*)\s*(?:\{(.*)\})?\s*$')
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"\s*(?:,|$)')


def parse_series_key(text: str) -> tuple[str, Labels]:
    """Parse ``name`` or ``name{label="value", ...}`` (as in rule tests). Raises ValueError."""
    m = _SELECTOR.match(text)
    if not m:
        raise ValueError(f'bad series name {text!r}; expected name or name{{label="value"}}')
    name, body = m.group(1), m.group(2)
    if body is None or not body.strip():
        return name, ()
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        lm = _MATCHER.match(body, pos)
        if not lm or lm.end() == pos:
            raise ValueError(f'bad label matcher in {text!r} near {body[pos:]!r}')
        labels[lm.group(1)] = lm.group(2)
        pos = lm.end()
    return name, labels_of(labels)


def clean_value(value: object) -> Value | None:
    """Coerce a source's output to a signal value; NaN, None and junk become no value."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        f = float(value)
        return None if math.isnan(f) else f
    if isinstance(value, dict):
        fam: Family = {}
        for k, v in value.items():
            cv = clean_value(v)
            if isinstance(cv, float) and isinstance(k, tuple):
                fam[k] = cv
        return fam
    return None
