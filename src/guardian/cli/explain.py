"""`guardian explain`: why a rule is inactive, pending, firing or unknown, on this host
now or at a point of a recording."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from guardian.cli.common import (
    host_collector,
    json_out,
    print_plan,
    rules_and_recording,
    warm_snapshot,
)
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.runtime.executor import Executor
from guardian.runtime.status import acted_line, at, for_people, held_by, state_words


def cmd_explain(args: argparse.Namespace) -> ExitCode:
    from guardian.policy.explain import explain_condition, missing_signals
    loaded = rules_and_recording(args)
    if isinstance(loaded, ExitCode):
        return loaded
    config, rec, rules, catalogue = loaded
    rule = rules.by_name(args.rule)
    if rule is None:
        print(f"guardian explain: no rule {args.rule!r} (rules: "
              f"{', '.join(r.name for r in rules.rules)})", file=sys.stderr)
        return ExitCode.USAGE
    engine = Engine(rules)
    where = ""
    if rec is not None:
        from guardian.runtime.replay import replay
        until = parse_duration(args.at) if args.at else None
        r = replay(rec, rules, until)
        engine, decisions = r.engine, r.decisions
        snap = r.last
        if snap is None:
            print("guardian explain: no snapshot at or before --at", file=sys.stderr)
            return ExitCode.USAGE
        where = f"at {at(snap.time)} of the recording"
        if until is not None and snap is rec.snapshots[-1] and until > snap.time:
            where += f" (its last snapshot: it ends before --at {for_people(until)})"
    else:
        snap = warm_snapshot(host_collector(args.root, config), args.warmup, engine)
        decisions = engine.evaluate(snap)
    st = engine.states[rule.name]
    tree = explain_condition(rule.spec.when, catalogue, snap.values, engine.history)
    missing = missing_signals(rule.condition.refs, snap.values)
    verb = "would act"  # over a recording nothing was applied, as `why` says
    state = state_words(engine, rule, decisions, snap.time, missing, dry_run=True)
    # live, explain's engine is new and acts on nothing: only a recording has a past
    last = acted_line(rule, st, decisions, verb) if rec is not None else ""
    plans: list[dict[str, Any]] = []
    if rec is None and tree.value:
        executor = Executor(Host(Path(args.root)), dry_run=True)
        d = Decision(snap.time, rule.name, "explain", rule.spec.severity, rule.spec.summary,
                     {}, [a for a in rule.actions if a.spec.on != "resolve"])
        plans = [ex.to_dict() for ex in executor.run([d], snap)]  # dry run: never applies
    if args.json:
        json_out("explain", {"rule": rule.name, "state": state, "missing": missing,
                             "time": snap.time, "acted": last,
                             "held_by": held_by(engine, rule),
                             "condition": tree.to_dict(), "plans": plans,
                             "actions": [{"use": a.use, **a.public_params}
                                         for a in rule.actions]})
        return ExitCode.OK
    if where:
        print(where)
    print(f"{rule.name}: {state}")
    if last:
        print(last)
    print("condition:")
    for line in tree.lines(1):
        print(line)
    if missing:
        print(f"no value for: {', '.join(missing)}")
    if plans:
        print("it would run:")
        for p in plans:
            print_plan(p)
    elif rule.actions:
        print("its actions: " + "; ".join(f"{a.use} {json.dumps(a.public_params)}"
                                          for a in rule.actions))
    return ExitCode.OK
