"""`guardian signals`: every signal of this host, with value, unit, source and help."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    print_errors,
    registry_warnings,
    report_sources,
    warm_snapshot,
)
from guardian.cli.table import NO_VALUE, natural, width, wrap
from guardian.core.diagnostics import RuleError
from guardian.core.evidence import member
from guardian.core.exitcodes import ExitCode
from guardian.core.numbers import readable
from guardian.core.snapshot import Value, format_labels
from guardian.plugin.registry import Registry, default_registry

HEADER = ("SIGNAL", "VALUE", "UNIT", "SOURCE", "HELP")
MEMBERS = 8  # a family's members shown under it, the largest first; the rest counted
HELP_ROOM = 40  # a narrower help column goes on its own lines under its row


def cmd_signals(args: argparse.Namespace) -> ExitCode:
    registry_warnings()
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    coll = host_collector(args.root, config)
    report_sources(coll)
    snap = warm_snapshot(coll, args.warmup)
    rows = signal_rows(default_registry(), snap.values,
                       {**snap.errors, **coll.unavailable})
    if args.json:
        json_out("signals", rows)
        return ExitCode.OK
    for line in table(rows, width()):
        print(line)
    return ExitCode.OK


def signal_rows(reg: Registry, values: Mapping[str, Value],
                unavailable: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per signal of every registered source, by source: what ``--json``
    prints and :func:`table` lays out."""
    rows = []
    for src_name, src in sorted(reg.sources.items()):
        for spec in src.specs:
            v = values.get(spec.name)
            rows.append({
                "name": spec.name, "source": src_name, "unit": spec.unit,
                "labels": list(spec.labels), "counter": spec.counter, "help": spec.help,
                "value": _jsonable(v), "unavailable": unavailable.get(src_name)})
    return rows


def table(rows: Sequence[Mapping[str, Any]], room: int | None = None) -> list[str]:
    """The rows for people: a header, then a line per signal with its value rounded
    (:func:`~guardian.core.numbers.readable`; ``-`` for no value), unit, source and
    help, a family's members on indented lines under it by their labels (``cpu=0``,
    ``ecs.service``), their values under VALUE (``MEMBERS`` of them, the largest
    first, when there are more). Columns are as wide as their widest cell; help
    is wrapped to ``room`` columns (None: one line each, for grep)."""
    body: list[tuple[list[str], list[tuple[str, str]], str]] = []
    for row in rows:
        v, unit = row["value"], row["unit"]
        shown: list[tuple[str, str]] = []
        if isinstance(v, dict) and v:
            value = f"{len(v)} member{'s' if len(v) != 1 else ''}"
            shown = _members(v, unit)
        else:
            value = NO_VALUE if isinstance(v, dict) else readable(v, unit)
        body.append(([row["name"], value, unit, row["source"]], shown, row["help"]))
    cells = [list(HEADER[:4])] + [c for c, _, _ in body]
    w = [max(len(r[i]) for r in cells) for i in range(4)]
    w[1] = max([w[1]] + [len(val) for _, shown, _ in body for label, val in shown if label])
    start = sum(w) + 2 * 4
    help_room = None if room is None else room - start

    def line(c: Sequence[str], help_text: str) -> list[str]:
        head = "  ".join([c[0].ljust(w[0]), c[1].rjust(w[1]), c[2].ljust(w[2]),
                          c[3].ljust(w[3])])
        if help_room is not None and help_room < HELP_ROOM:  # help under the row
            return [head.rstrip()] + [f"    {t}" for t in wrap(help_text, room - 4)
                                      if t] if room is not None else [head]
        first, *rest = wrap(help_text, help_room)
        return [f"{head}  {first}".rstrip()] + [" " * start + t for t in rest]

    out = line(HEADER[:4], HEADER[4])
    for c, shown, help_text in body:
        out.extend(line(c, help_text))
        for label, val in shown:
            out.extend(_member_lines(label, val, w[0], w[1]))
    return out


def _member_lines(label: str, value: str, name_w: int, value_w: int) -> list[str]:
    """A member under its family: its labels (:func:`~guardian.core.evidence.member`)
    indented in the SIGNAL column, its value right-aligned under VALUE; labels that do
    not fit before the value are cut between labels into lines the SIGNAL column holds
    (the rest further indented), the value on the last, or on a line of its own where a
    label alone is too wide; the ``… N more`` line as it is."""
    if not label:
        return [f"  {value}"]
    end = name_w + 2 + value_w - len(value)  # where the value starts
    room = end - 2  # a label's line may run into VALUE, two blanks before the value
    lines = ["  " + label]
    if len(lines[0]) > room:
        first, *rest = wrap(label, name_w - 2)
        lines = ["  " + first] + (["    " + t for t in wrap(" ".join(rest), name_w - 4)]
                                  if rest else [])
        if len(lines[-1]) > room:
            lines.append("")
    return [*lines[:-1], f"{lines[-1]:<{end}}{value}"]


def _members(v: Mapping[str, Any], unit: str) -> list[tuple[str, str]]:
    """A family's members as (labels, value) lines: all of them in label order, or,
    past ``MEMBERS`` (and two), the largest ``MEMBERS`` and a line counting the rest."""
    items = sorted(v.items(), key=lambda kv: natural(kv[0]))
    if len(items) <= MEMBERS + 2:
        return [(member(k), readable(x, unit)) for k, x in items]
    items.sort(key=lambda kv: -_num(kv[1]))  # stable: ties stay in label order
    top, rest = items[:MEMBERS], [_num(x) for _, x in items[MEMBERS:]]
    lo, hi = readable(min(rest), unit), readable(max(rest), unit)
    span = f"all {lo}" if lo == hi else f"{lo} to {hi}"
    return [(member(k), readable(x, unit)) for k, x in top] + \
        [("", f"… {len(rest)} more ({span})")]


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {format_labels(labels): val for labels, val in sorted(v.items())}
    return v
