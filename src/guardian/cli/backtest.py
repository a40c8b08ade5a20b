"""`guardian backtest DIR`: a rule set run over a fleet's recordings on one clock, and
what it would have done: when, on which nodes, how many disrupted at once, which
recorded problems it caught, missed or could not judge (its rule had no value), and which
rules had no value where."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardian.cli.common import cli_config, json_out, print_errors
from guardian.cli.table import columns
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules

if TYPE_CHECKING:
    from guardian.runtime.backtest import Backtest, Caught

# the decisions the timeline leaves out (--json has them)
HIDDEN = ("pending", "inactive")


def cmd_backtest(args: argparse.Namespace) -> ExitCode:
    from guardian.engine.bounds import Budget
    from guardian.runtime.backtest import BudgetParams, backtest
    from guardian.runtime.fleetdir import read_fleet, unknown_problems
    try:
        config = cli_config(args)
    except RuleError as exc:
        print_errors(exc, args)
        return ExitCode.CONFIG
    try:
        fleet = read_fleet(Path(args.directory))
    except RuleError as exc:
        print_errors(exc, args)
        return ExitCode.USAGE
    catalogue = dict(default_registry().catalogue())
    for n in fleet.nodes:
        catalogue.update(n.recording.catalogue)
    try:
        rules = load_rules(args.rules or args.rules_default, catalogue=catalogue)
    except RuleError as exc:
        return print_errors(exc, args)
    try:  # a problem no rule of the set names could never be judged: a typo, said where
        unknown = unknown_problems(fleet, {r.name for r in rules.rules})
    except RuleError as exc:
        unknown = list(exc.diagnostics)
    if unknown:
        print_errors(RuleError(unknown), args)
        return ExitCode.USAGE
    eb = config.engine.budget
    bt = backtest(fleet, rules, align=args.align, engine_budget=Budget(eb.runs, eb.within),
                  window=config.engine.window,
                  fleet_budget=BudgetParams.of(config.fleet) if config.fleet else None,
                  breaker=getattr(config.fleet, "breaker", None), groups=config.groups)
    damaged = [f"{n.path.name}: {n.recording.damage}" for n in fleet.nodes
               if n.recording.damage]
    failed = _failed(bt, args.fail_on or [])
    if args.json:
        json_out("backtest", data(bt), ok=not failed and not damaged,
                 errors=[f"--fail-on: {line}" for line in failed],
                 warnings=damaged + blind_warnings(bt))
    else:
        for line in report(bt, len(fleet.holds), [g.name for g in config.groups]):
            print(line)
        for line in damaged:
            print(f"guardian backtest: {line}", file=sys.stderr)
        for line in failed:
            print(f"failed (--fail-on): {line}")
    return ExitCode.FAILED if failed or damaged else ExitCode.OK


def _failed(bt: Backtest, fail_on: list[str]) -> list[str]:
    """What makes the backtest fail for ``--fail-on``, in words."""
    out = []
    missed, unjudged = bt.missed(), bt.not_judged()
    if "missed" in fail_on and (missed or unjudged):  # not caught, whatever the reason
        out.append(f"{len(missed) + len(unjudged)} recorded problem(s) not caught: "
                   f"{len(missed)} missed, {len(unjudged)} not judged (no value)")
    never = bt.blind_everywhere()
    if "blind" in fail_on and (never or unjudged):
        out.append(", ".join(part for part in (
            f"{len(never)} rule(s) with no value on any node" if never else "",
            f"{len(unjudged)} recorded problem(s) not judged (no value)" if unjudged
            else "") if part))
    if "false-positive" in fail_on and bt.false_positives():
        out.append(f"{len(bt.false_positives())} possible false positive(s)")
    refused = [e for e in bt.events if e.refused or e.breaker]
    if "refused" in fail_on and refused:
        out.append(f"{len(refused)} action run(s) refused by the fleet budget or held by "
                   f"the breaker")
    return out


def report(bt: Backtest, holds: int, groups: list[str]) -> list[str]:
    """The backtest for people."""
    from guardian.runtime.backtest import describe, timeline_rows
    from guardian.runtime.status import at, for_people
    n = len(bt.nodes)
    how = "each recording's start at +0s" if bt.align == "start" else \
        "as recorded, the first recording's start at +0s"
    out = [f"backtest of {n} node{'s' if n != 1 else ''} over {for_people(bt.end)}, "
           f"on one clock ({how})"]
    out.append("fleet budget: " + (bt.budget.describe(n) if bt.budget else
                                   "none ([fleet] not configured: a fleet = true rule's "
                                   "disruptive actions are refused)"))
    for group, own, count in bt.group_budgets():
        out.append(f"node group {group.name}'s own budget: {describe(own, count)}"
                   + (", and the fleet budget's" if bt.budget else ""))
    if bt.breaker is not None:
        b = bt.breaker
        out.append(f"breaker: trips when a rule's condition begins to hold (pending or "
                   f"firing) within {for_people(b.window)} on more than {b.share * 100:g}% "
                   f"of a group's nodes (and at least {b.min_nodes}); groups: "
                   f"{', '.join(['the fleet', *b.by])}")
    else:
        out.append("breaker: none ([fleet.breaker] not configured)")
    if holds:
        out.append(f"holds: {holds} from holds.toml, judged at each node's recorded time")
    if groups:
        out.append(f"node groups: {', '.join(groups)} (first match by each node's labels)")
    out.append("")
    rows = [["NODE", "RECORDING", "SNAPSHOTS", "LABELS", "PROBLEMS"]]
    for r in bt.nodes:
        snaps = r.node.recording.snapshots
        span = f" over {for_people(snaps[-1].time)}" if snaps else ""
        start = f", from {at(r.offset)}" if bt.align == "wall" else ""
        labels = ",".join(f"{k}={v}" for k, v in sorted(r.node.labels.items())) or "-"
        rows.append([r.name, r.node.path.name, f"{len(snaps)}{span}{start}", labels,
                     ",".join(r.node.problems) or "-"])
    out += columns(rows)
    out.append("")
    rows = timeline_rows(bt, HIDDEN)
    if rows:
        out += columns([["TIME", "NODE", "RULE", "DECISION", "WHAT"], *rows], right={0})
    else:
        blinded = len(bt.blind_everywhere())
        out.append("no rule fired on any node" + (
            f" ({blinded} of {len(bt.rule_names)} rules had no value on any node: they "
            f"could not fire)" if blinded else ""))
    pending = sum(1 for e in bt.events if e.decision.kind in HIDDEN)
    if pending:
        out.append(f"({pending} pending or inactive decision{'s' if pending != 1 else ''} "
                   f"not shown; --json has every decision)")
    out.append("")
    peak, when, names = bt.peak
    if peak:
        last = bt.disrupted[-1][1] if bt.disrupted else ()
        out.append(f"disrupted at once: at most {peak} node{'s' if peak != 1 else ''} "
                   f"({', '.join(names)}), first at {at(when or 0.0)}; {len(last)} at "
                   f"the end")
    else:
        out.append("disrupted at once: none (no disruptive action would have run)")
    refused = [e for e in bt.events if e.refused]
    tripped = [e for e in bt.events if e.breaker]
    if refused:
        out.append(f"refused by the fleet budget: {len(refused)} action run(s) on "
                   f"{len({e.node for e in refused})} node(s)")
    if bt.trips:
        for t, trip in bt.trips:
            out.append(f"breaker tripped at {at(t)}: {trip.why} "
                       f"({', '.join(trip.names)}); latched until a human releases it")
        out.append(f"held by the breaker: {len(tripped)} action run(s)")
    elif bt.breaker is not None:
        out.append("breaker: did not trip")
    out += blind_lines(bt)
    caught = [(r.name, c) for r in bt.nodes for c in r.caught]
    if caught:
        hit = sum(1 for _, c in caught if c.caught)
        out.append(f"problems: {hit} caught, {len(bt.missed())} missed, "
                   f"{len(bt.not_judged())} not judged")
        out += columns([[f"  {name}", c.problem, _caught_words(c)] for name, c in caught])
    else:
        out.append("problems: none named (no node file lists problems)")
    fp = bt.false_positives()
    never = bt.blind_everywhere()
    if fp:
        out.append("possible false positives (fired on a node whose recording names no "
                   "problem):")
        out += columns([[f"  {node}", rule, f"fired at {at(t)}"] for node, rule, t in fp])
    elif never:
        out.append(f"possible false positives: none, but {len(never)} of "
                   f"{len(bt.rule_names)} rules had no value on any node (they could not "
                   f"fire)")
    else:
        out.append("possible false positives: none")
    return out


def blind_lines(bt: Backtest, width: int = 100) -> list[str]:
    """The rules that had no value, by where: ``blind (no value) the whole time on every
    node (9 rules): ...``, then those blind on some nodes or part of the time, each
    group of rules with the nodes (and snapshots without a value, of how many) it
    names; wrapped at ``width``, never inside a name."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for rule, (whole, part) in bt.blind().items():
        where: list[str] = []
        if whole and len(whole) == len(bt.nodes):
            where += ["the", "whole", "time", "on", "every", "node"]
        elif whole:
            where += ["the", "whole", "time", "on", *_listed(whole)]
        if part:
            where[-1:] = [f"{where[-1]};"] if where else []
            where += ["part", "of", "the", "time", "on", *_listed(
                [f"{node} ({k}/{of} snapshots)" for node, k, of in part])]
        groups.setdefault(tuple(where), []).append(rule)
    out = []
    for said, rules in sorted(groups.items(), key=lambda g: (g[0][:6] != (
            "the", "whole", "time", "on", "every", "node"), g[0])):
        n = len(rules)
        out += _pack(["blind", "(no", "value)", *said, f"({n}", f"rule{'s' if n != 1 else ''}):",
                      *_listed(rules)], width)
    return out


def _listed(items: list[str]) -> list[str]:
    """``a, b, c`` as tokens that wrap only between items."""
    return [f"{x}," for x in items[:-1]] + items[-1:]


def _pack(tokens: list[str], width: int, indent: str = "    ") -> list[str]:
    """Tokens joined by spaces into lines of at most ``width`` (a longer token alone),
    the lines after the first indented."""
    lines: list[str] = []
    line = ""
    for t in tokens:
        if line and len(line) + 1 + len(t) > width:
            lines.append(line)
            line = indent + t
        else:
            line = f"{line} {t}" if line else t
    return [*lines, line] if line else lines


def blind_warnings(bt: Backtest) -> list[str]:
    """What ``--json`` warns of: rules the backtest judged nothing of, problems it could
    not judge."""
    out = []
    never = bt.blind_everywhere()
    if never:
        out.append(f"{len(never)} rule(s) had no value on any node the whole time (the "
                   f"backtest judged nothing of them): {', '.join(never)}")
    for node, c in bt.not_judged():
        out.append(f"{node}: problem {c.problem} not judged: {_unjudged(c)}")
    return out


def _unjudged(c: Caught) -> str:
    if not c.known:
        return "the rule set has no rule of that name"
    return f"the rule had no value on that node (none in its {c.snapshots} snapshots)"


def _caught_words(c: Caught) -> str:
    from guardian.runtime.status import at
    if c.caught and c.time is not None:
        return f"caught{' through ' + c.how if c.how else ''}: {c.rule} fired at " \
               f"{at(c.time)}"
    if not c.judged:
        return f"not judged: {_unjudged(c)}"
    part = f" (no value in {c.blind} of its {c.snapshots} snapshots)" if c.blind else ""
    return f"missed: neither it nor a cause it names fired{part}"


def data(bt: Backtest) -> dict[str, Any]:
    """The backtest as ``--json``'s ``data`` (docs/commands.md lists its keys)."""
    peak, when, names = bt.peak
    return {
        "align": bt.align,
        "end": round(bt.end, 3),
        "budget": None if bt.budget is None else {
            "max_nodes": bt.budget.max_nodes, "max_percent": bt.budget.max_percent,
            "min_healthy": bt.budget.min_healthy,
            "groups": {g.name: {"max_nodes": own.max_nodes, "max_percent": own.max_percent,
                                "min_healthy": own.min_healthy, "nodes": count}
                       for g, own, count in bt.group_budgets()}},
        "breaker": None if bt.breaker is None else bt.breaker.model_dump(),
        "nodes": [{
            "name": r.name, "recording": r.node.path.name, "labels": r.node.labels,
            "problems": r.node.problems, "offset": round(r.offset, 3),
            "snapshots": len(r.node.recording.snapshots), "damage": r.node.recording.damage,
            "fired": {k: round(v, 3) for k, v in sorted(r.fired.items())},
            "caught": [c.to_dict() for c in r.caught],
            "blind": {k: v for k, v in sorted(r.replay.blind.items())},
        } for r in bt.nodes],
        "events": [e.to_dict() for e in bt.events],
        "disrupted": [{"time": round(t, 3), "nodes": list(n)} for t, n in bt.disrupted],
        "peak": {"nodes": peak, "time": None if when is None else round(when, 3),
                 "names": list(names)},
        "trips": [{"time": round(t, 3), "rule": tr.rule, "group": tr.group,
                   "holding": tr.holding, "of": tr.nodes, "names": list(tr.names),
                   "why": tr.why} for t, tr in bt.trips],
        "missed": [{"node": n, "problem": c.problem} for n, c in bt.missed()],
        "not_judged": [{"node": n, "problem": c.problem, "why": _unjudged(c)}
                       for n, c in bt.not_judged()],
        "blind": {rule: {"whole": whole, "part": {n: k for n, k, _ in part}}
                  for rule, (whole, part) in bt.blind().items()},
        "blind_everywhere": bt.blind_everywhere(),
        "false_positives": [{"node": n, "rule": r, "time": round(t, 3)}
                            for n, r, t in bt.false_positives()],
    }
