"""`guardian backtest DIR`: a rule set run over a fleet's recordings on one clock, and
what it would have done: when, on which nodes, how many disrupted at once, which
recorded problems it caught or missed."""

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
    from guardian.runtime.fleetdir import read_fleet
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
    eb = config.engine.budget
    bt = backtest(fleet, rules, align=args.align, engine_budget=Budget(eb.runs, eb.within),
                  window=config.engine.window,
                  fleet_budget=BudgetParams.of(config.fleet) if config.fleet else None,
                  breaker=getattr(config.fleet, "breaker", None), groups=config.groups)
    damaged = [f"{n.path.name}: {n.recording.damage}" for n in fleet.nodes
               if n.recording.damage]
    failed = _failed(bt, args.fail_on or [])
    if args.json:
        json_out("backtest", data(bt), ok=not failed and not damaged, warnings=damaged)
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
    if "missed" in fail_on and bt.missed():
        out.append(f"{len(bt.missed())} recorded problem(s) missed")
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
        out.append("no rule fired on any node")
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
    caught = [(r.name, c) for r in bt.nodes for c in r.caught]
    if caught:
        hit = sum(1 for _, c in caught if c.caught)
        out.append(f"problems: {hit} caught, {len(caught) - hit} missed")
        out += columns([[f"  {name}", c.problem, _caught_words(c)] for name, c in caught])
    else:
        out.append("problems: none named (no node file lists problems)")
    fp = bt.false_positives()
    if fp:
        out.append("possible false positives (fired on a node whose recording names no "
                   "problem):")
        out += columns([[f"  {node}", rule, f"fired at {at(t)}"] for node, rule, t in fp])
    else:
        out.append("possible false positives: none")
    return out


def _caught_words(c: Caught) -> str:
    from guardian.runtime.status import at
    if c.caught and c.time is not None:
        return f"caught{' through ' + c.how if c.how else ''}: {c.rule} fired at " \
               f"{at(c.time)}"
    if not c.known:
        return "missed: the rule set has no rule of that name"
    return "missed: neither it nor a cause it names fired"


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
        "false_positives": [{"node": n, "rule": r, "time": round(t, 3)}
                            for n, r, t in bt.false_positives()],
    }
