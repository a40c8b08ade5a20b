"""Evidence as people read it (issue 40): ``$values`` in a log line, a node condition
or an alert, and the evidence lines of ``replay``, ``why`` and ``explain``. Members by
their label values (``ecs.service``), numbers rounded with the signal's unit
(``711 restarts``); machines keep the structured form (``$values_json``, the audit,
``--json``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from guardian.core.numbers import readable
from guardian.core.snapshot import Labels, format_labels, parse_series_key

MAX_MEMBERS = 5  # a family's members said in one line of text; the rest are counted
# units a number says by itself: a duration ("3m10s"), a bare count or ratio
_UNSAID = {"", "count", "ratio", "seconds", "s", "milliseconds", "ms"}


class Said(NamedTuple):
    """One piece of evidence for people: the signal (or ``matched``), its value or
    members as text, and whether it is a family (members) or one value."""

    name: str
    text: str
    family: bool

    def line(self) -> str:
        """``systemd.unit_restarts_recent: ecs.service 711 restarts``,
        ``memcg.dying 18804 cgroups``."""
        return f"{self.name}: {self.text}" if self.family or self.text == "no value" \
            else f"{self.name} {self.text}"


def evidence_said(values: Mapping[str, Any], units: Mapping[str, str] | None = None
                  ) -> list[Said]:
    """Evidence (rendered as the audit has it, or typed) for people, what fired
    first: a family condition's ``matched`` members under the family they equal, said
    once (``matched`` by that name only where it equals none of them); members by their
    label values, the largest first, at most :data:`MAX_MEMBERS`; numbers rounded with
    the signal's unit."""
    units = units or {}
    rest = dict(values)
    matched = rest.pop("matched", None)
    out: list[Said] = []
    if isinstance(matched, dict):
        same = next((k for k, v in rest.items() if _selected(k, v, matched)), None)
        name = "matched" if same is None else same
        unit, pinned = _unit(units, name), _pinned(name)
        if same is not None and not isinstance(rest[same], dict) and \
                not any(member(k, pinned) for k in matched):
            # every label pinned: the selector names the one member; said as a value
            out.append(Said(name, amount(rest[same], unit), False))
        else:
            out.append(Said(name, members_text(matched, unit, pinned), True))
        rest.pop(name, None)
    for k, v in rest.items():
        unit = _unit(units, k)
        out.append(Said(k, members_text(v, unit, _pinned(k)), True) if isinstance(v, dict)
                   else Said(k, amount(v, unit), False))
    return out


def values_text(values: Mapping[str, Any], units: Mapping[str, str] | None = None) -> str:
    """``$values``: the evidence as one line of text for people. A family condition says
    the members that matched first, bare (``ecs.service 711 restarts``); then the other
    signals, ``;``-separated where any is a family (``memcg.dying 18804 cgroups,
    memcg.live 4 cgroups`` for scalars). ``$values_json``, the audit and ``--json`` keep
    the structured form (``render_values`` in guardian.engine.decision)."""
    said = evidence_said(values, units)
    if not said:
        return "no values"
    parts = [s.line() for s in said]
    matched = values.get("matched")
    if isinstance(matched, dict) and said[0].family:  # first and bare, each member named
        pinned = _pinned(said[0].name)
        parts[0] = members_text(matched, _unit(units or {}, said[0].name),
                                pinned if all(member(k, pinned) for k in matched) else ())
    return ("; " if any(s.family for s in said) else ", ").join(parts)


def _unit(units: Mapping[str, str], key: str) -> str:
    return units.get(key.split("{", 1)[0], "")


def members_text(family: Mapping[Any, Any], unit: str = "",
                 pinned: Collection[str] = frozenset(), limit: int = MAX_MEMBERS) -> str:
    """A family's members for people: ``ecs.service 711 restarts, foo.service 3
    restarts``, the largest first, at most ``limit`` (``…and 12 more``); labels in
    ``pinned`` (the selector names them exactly) are not said again."""
    if not family:
        return "no member"

    def order(item: tuple[Any, Any]) -> tuple[float, str]:
        x = _number(item[1])
        return (-x if x is not None and not math.isnan(x) else math.inf, str(item[0]))

    items = sorted(family.items(), key=order)
    text = ", ".join(f"{member(k, pinned)} {amount(x, unit)}".lstrip()
                     for k, x in items[:limit])
    more = len(items) - limit
    return text + (f", …and {more} more" if more > 0 else "")


def _pinned(key: str) -> frozenset[str]:
    """The labels a selector (``script.problem{check="mon.ntp"}``) names exactly."""
    if "{" not in key:
        return frozenset()
    try:
        labels = parse_series_key(key)[1]
    except ValueError:
        return frozenset()
    return frozenset(k for k, v in labels if not any(c in v for c in "*?["))


def member(key: Any, pinned: Collection[str] = ()) -> str:
    """A member by what identifies it, the labels in ``pinned`` left out: ``ecs.service``
    for ``{unit="ecs.service"}``; ``name=value`` for a number (``cpu=1``) and where it has
    several labels; a value that would split the list (commas, quotes, ``=``; blanks
    beside other labels) quoted (``message="disk, sick"``); empty when every label is
    pinned."""
    labels: Labels
    if isinstance(key, tuple):
        labels = key
    else:
        try:
            labels = parse_series_key("x" + str(key))[1]
        except ValueError:
            return str(key)
    labels = tuple((k, v) for k, v in labels if k not in pinned)
    if len(labels) == 1 and _bare(labels[0][1]) and not labels[0][1].lstrip("-").isdigit():
        return labels[0][1]
    return " ".join(f"{k}={v}" if _plain(v) else f'{k}="{v}"' for k, v in labels)


def _bare(v: str) -> bool:
    """A value said alone as it is (``ntp is down``): nothing that would split a list."""
    return bool(v) and not any(c in ',"=' for c in v)


def _plain(v: str) -> bool:
    """A value said after ``name=`` as it is, among other labels."""
    return _bare(v) and not any(c.isspace() for c in v)


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None if x is None else float(x)
    try:
        return float(x)  # numbers, and "+Inf" as rendered
    except (TypeError, ValueError):
        return None


def amount(x: Any, unit: str = "") -> str:
    """One value for people: rounded, with its unit where the number does not say it
    (``711 restarts``, ``97%``, ``3m10s``); ``no value`` for none."""
    v = _number(x)
    if v is None:
        return "no value" if x is None else str(x)
    text = readable(v, unit)
    if unit in _UNSAID or not math.isfinite(v):
        return text
    if unit == "percent":
        return text + "%"
    if v == 1 and unit.endswith("s") and not unit.endswith("/s"):
        unit = unit[:-3] + "y" if unit.endswith("ies") else \
            unit[:-2] if unit.endswith("sses") else unit[:-1]
    return f"{text} {unit}"


def _selected(key: str, value: Any, matched: Mapping[Any, Any]) -> bool:
    """Whether the evidence ``key: value`` is the family ``matched`` came from, as the
    engine gives it: the same members, or, for a selector of exact matchers that kept one
    member, that member's value alone (``cpu.core.idle_pct{cpu="0"}: 56``) where the
    member has the labels the selector names."""
    if isinstance(value, dict):
        return _same(value, matched)
    if "{" not in key or len(matched) != 1 or value is None:
        return False
    [(k, x)] = matched.items()
    try:
        wanted = parse_series_key(key)[1]
        labels = k if isinstance(k, tuple) else parse_series_key("x" + str(k))[1]
    except ValueError:
        return False
    return bool(wanted) and set(wanted) <= set(labels) and _number(x) == _number(value)


def _same(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    """Two families alike once rendered (label tuples or their text; 711 or 711.0)."""
    def norm(f: Mapping[Any, Any]) -> dict[str, float | None]:
        return {format_labels(k) if isinstance(k, tuple) else str(k): _number(x)
                for k, x in f.items()}
    return norm(a) == norm(b)
