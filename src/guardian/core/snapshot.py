"""Signals and snapshots: the flat, read-only data every rule is evaluated against.

A signal is either a scalar (one float) or a *family*: floats keyed by label sets,
e.g. ``cpu.core.sys_pct`` keyed by ``(("cpu", "3"),)``. A signal with no value is absent
from the snapshot: absence is "unknown", never zero.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
Family = dict[Labels, float]
Value = float | Family

SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


@dataclass(frozen=True)
class SignalSpec:
    """What a source promises to provide: name, label names (empty = scalar), unit, help.
    With ``open_labels``, members carry other labels besides ``labels`` (an exporter's own,
    any names): a selector may name any label, and each member has ``labels`` at least."""

    name: str
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    counter: bool = False
    open_labels: bool = False

    @property
    def is_family(self) -> bool:
        return bool(self.labels)

    @property
    def label_order(self) -> tuple[str, ...]:
        """The label names in the order a canonical label set has them (sorted)."""
        return tuple(sorted(self.labels))


@dataclass
class Snapshot:
    """Signal values at one instant. ``time`` is seconds (monotonic or replayed).

    ``checked`` says the values were held to their signals' specs already (the collector
    and :meth:`build` do); the engine checks the signals its rules use in any other."""

    time: float
    values: dict[str, Value] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    checked: bool = False

    def get(self, name: str) -> Value | None:
        return self.values.get(name)

    @classmethod
    def build(cls, time: float, values: Mapping[str, object],
              specs: Iterable[SignalSpec]) -> Snapshot:
        """A snapshot of ``values`` as a source would return them, checked against
        ``specs``: a signal that breaks its spec has no value, and ``errors`` says why."""
        good, problems = check_values(values, {s.name: s for s in specs})
        return cls(time, good, problems, checked=True)


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """A canonical label set: sorted (name, value) pairs."""
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


@functools.lru_cache(maxsize=8192)
def label(name: str, value: str) -> Labels:
    """The label set of one label, made once (sources build per-CPU and per-interface
    families every tick, with the same members)."""
    return ((name, value),)


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


def check_values(raw: Mapping[str, object], specs: Mapping[str, SignalSpec],
                 undeclared: bool = True) -> tuple[dict[str, Value], dict[str, str]]:
    """Hold a source's output to its specs (by name): the values that keep them, and for
    each signal that does not (or, with ``undeclared``, a name no spec declares) why.
    ``None`` means "no value now" and is no error."""
    good: dict[str, Value] = {}
    problems: dict[str, str] = {}
    for name, value in raw.items():
        spec = specs.get(name)
        if spec is None:
            if undeclared:
                problems[name] = "not a signal this source declares"
            continue
        if value is None:
            continue
        if not spec.labels:  # the common cases: a finite float (inf - inf is nan), an int
            if type(value) is float and value - value == 0.0:
                good[name] = value
                continue
            if type(value) is int and -2**63 <= value < 2**64:
                good[name] = float(value)
                continue
        checked, why = check_value(spec, value)
        if checked is None:
            problems[name] = why
        else:
            good[name] = checked
    return good, problems


# label sets already found canonical, by label names (and open or not): a family's
# members recur each tick
_CANONICAL: dict[tuple[tuple[str, ...], bool], set[Labels]] = {}


def check_value(spec: SignalSpec, value: object) -> tuple[Value | None, str]:
    """``value`` as a value of ``spec`` (a finite number, or a family keyed by exactly the
    spec's label names, or with ``open_labels`` by at least them), or None and why not."""
    if not spec.is_family:
        return _number(value)
    if not isinstance(value, dict):
        return None, f"a family keyed by {', '.join(spec.labels)} was expected, " \
                     f"not {type(value).__name__}"
    want = spec.label_order
    is_open = spec.open_labels
    known = _CANONICAL.setdefault((want, is_open), set())
    if len(known) > 100_000:  # a bound, whatever the sources' label churn
        known.clear()
    fam: Family = {}
    same = True  # every key canonical and every member a float: keep the family as it is
    for key, member in value.items():
        if key not in known:  # not checked before: canonical, with these label names?
            try:
                names = tuple(k for k, _ in key)
            except (TypeError, ValueError):
                return None, f"member key {key!r} is not a label set ((name, value) pairs)"
            if names != want and not (is_open and _has(names, want)):
                try:  # not canonical: sort, then it must be
                    key = tuple(sorted(key))
                except TypeError:
                    return None, f"member key {key!r} is not a label set ((name, value) " \
                                 "pairs)"
                sorted_names = tuple(k for k, _ in key)
                if sorted_names != want and not (is_open and _has(sorted_names, want)):
                    return None, f"member {key!r} does not have the labels " \
                                 f"{', '.join(want)}"
                same = False
            if not all(type(v) is str for _, v in key):
                return None, f"member key {key!r} is not a label set ((name, value) pairs)"
            known.add(key)
        if type(member) is float and member - member == 0.0:
            fam[key] = member
            continue
        number, why = _number(member)
        if number is None:
            return None, f"member {format_labels(key)}: {why}"
        fam[key] = number
        same = False
    return (value if same else fam), ""


def _has(names: tuple[str, ...], want: tuple[str, ...]) -> bool:
    """``names`` are strings, sorted, each once, and include every one of ``want``."""
    return all(type(n) is str for n in names) and set(want) <= set(names) \
        and names == tuple(sorted(set(names)))


def _number(value: object) -> tuple[float | None, str]:
    if not isinstance(value, int | float):  # bool is an int: 0 or 1
        return None, f"a number was expected, not {type(value).__name__}"
    f = float(value)
    if not math.isfinite(f):
        return None, f"{f} is not a finite number"
    return f, ""
