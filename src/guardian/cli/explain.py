"""`guardian explain`: why a rule is inactive, pending, firing or unknown, on this host
now or at a point of a recording."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from pathlib import Path
from typing import Any

from guardian.cli.common import (
    host_collector,
    json_out,
    print_plan,
    rules_and_recording,
    service_saw,
    warm_snapshot,
)
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.core.numbers import seconds
from guardian.engine.decision import Decision, decision_values
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.model.ruleset import BoundAction, CompiledRule, Ruleset
from guardian.plugin.registry import default_registry
from guardian.runtime.coverage import blind_rules, recorded_sight, sight_of
from guardian.runtime.executor import Executor
from guardian.runtime.replay import params_text
from guardian.runtime.status import (
    acted_line,
    at,
    climb_words,
    for_people,
    held_by,
    record_line,
    state_words,
)


def cmd_explain(args: argparse.Namespace) -> ExitCode:
    from guardian.policy.explain import explain_condition, missing_signals
    loaded = rules_and_recording(args)
    if isinstance(loaded, ExitCode):
        return loaded
    config, rec, rules, catalogue = loaded
    rule = rules.by_name(args.rule)
    if rule is None:
        names = [r.name for r in rules.rules]
        hint = difflib.get_close_matches(args.rule, names, n=1)
        print(f"guardian explain: no rule {args.rule!r}" + (
            f"; did you mean {hint[0]!r}?" if hint else f" (rules: {', '.join(names)})"),
            file=sys.stderr)
        return ExitCode.USAGE
    engine = Engine(rules)
    where = ""
    sight = recorded_sight()
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
        from guardian.runtime import state as state_file
        from guardian.runtime.paths import service_paths
        saved = Path(args.state) if args.state else service_paths(config).state
        if args.state:  # this command's evaluation starts where the service's state is
            state_file.load(engine, saved)
        coll = host_collector(args.root, config)
        snap = warm_snapshot(coll, args.warmup, engine)
        decisions = engine.evaluate(snap)
        where = _as_the_service_saw(rule, rules, saved, own=bool(args.state))
        sight = sight_of(coll, default_registry())
    st = engine.states[rule.name]
    tree = explain_condition(rule.spec.when, catalogue, snap.values, engine.history)
    missing = missing_signals(rule.condition.refs, snap.values)
    verb = "would act"  # over a recording nothing was applied, as `why` says
    state = state_words(engine, rule, decisions, snap.time, missing, dry_run=True,
                        own=rec is None)
    # live, explain's engine is new and acts on nothing: only a recording has a past
    last = acted_line(rule, st, decisions, verb) if rec is not None else ""
    # its record: the recording's, or live the service's (kept in its state file)
    record = record_line(rule, st) if rec is not None else _service_record(rule, saved)
    plans: list[dict[str, Any]] = []
    if rec is None and tree.value:
        executor = Executor(Host(Path(args.root)), dry_run=True)
        result = rule.condition.fn(snap.values, engine.history)
        d = Decision(snap.time, rule.name, "explain", rule.spec.severity, rule.spec.summary,
                     decision_values(rule, snap.values, result),  # $values as the engine's
                     [a for a in rule.actions if a.spec.on != "resolve"])
        plans = [ex.to_dict() for ex in executor.run([d], snap)]  # dry run: never applies
    if args.json:
        json_out("explain", {"rule": rule.name, "state": state, "missing": missing,
                             "time": snap.time, "acted": last, "record": record,
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
    if record:
        print(record)
    print("condition:")
    for line in tree.lines(1):
        print(line)
    if missing:
        print(f"no value for: {', '.join(missing)}")
    for blind in blind_rules(rules, {rule.name: st}, snap, sight):
        print("BLIND, because: " + "; ".join(blind.reasons or ("a computed value",)))
    for cause in rule.spec.caused_by:
        if cause in engine.states and engine.states[cause].unknown:
            print(f"its cause {cause} is BLIND: whether it is active is not seen")
    if plans:
        print("it would run:")
        for p in plans:
            print_plan(p)
    else:
        for n, step in enumerate(rule.steps, 1):
            recurs = f", once it fired in {step.recurs.boots} boots within " \
                f"{seconds(step.recurs.within)}" if step.recurs else ""
            print(f"its step {n} of {len(rule.steps)} (verify {seconds(step.verify)}"
                  f"{recurs}): " + _actions_text(step.actions))
        if rule.actions:
            print(("its clean-up: " if rule.steps else "its actions: ")
                  + _actions_text(rule.actions))
    return ExitCode.OK


def _actions_text(actions: list[BoundAction]) -> str:
    """``log message="…"; irq.move driver=ena``: each action and its parameters."""
    return "; ".join(f"{a.use} {params_text(a.public_params)}".rstrip() for a in actions)


def _service_record(rule: CompiledRule, saved: Path) -> str:
    """The rule's record as the running service keeps it in its state file ("" when
    there is none to read)."""
    from guardian.runtime import state as state_file
    try:
        raw = json.loads(saved.read_text())
        return record_line(rule, state_file.rule_state(raw["rules"][rule.name]))
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _service_climb(rule: CompiledRule, rules: Ruleset, saved: Path) -> str:
    """Where the service's climb of ``rule`` is, or that it needs a human, from its
    saved state ("" when it says neither)."""
    from guardian.runtime import state as state_file
    engine = Engine(rules)
    if rule.name not in state_file.load(engine, saved):
        return ""
    st = engine.states[rule.name]
    if st.escalated or (rule.steps and st.phase == "firing" and st.step):
        return climb_words(engine, rule, st, time.monotonic())
    return ""


def _as_the_service_saw(rule: CompiledRule, rules: Ruleset, saved: Path, *,
                        own: bool) -> str:
    """Live: what the running service saw of ``rule`` at its last tick, and where its
    climb is (from its state file ``saved``), or a line saying no service runs. This
    command's engine acts on nothing; it is new (its `for` starts from now) unless it
    starts from the saved state (``own``)."""
    from guardian.runtime.seen import action_line
    seen, note = service_saw(saved.parent)
    if seen is None:
        return note
    lines = [note.rstrip(":")]
    link = next((lk for lk in seen.chain if lk.rule == rule.name), None)
    blind = next((b for b in seen.blind if b.rule == rule.name), None)
    if link is not None:
        now = seen.now_at(time.time())
        began = "" if link.since is None else \
            f", began {for_people(max(now - link.since, 0.0))} ago"
        lines.append(f"  the service: {link.phase.upper()}{began}")
        climb = _service_climb(rule, rules, saved)
        if climb:
            lines.append(f"  the service: {climb}")
    elif blind is not None:
        lines.append(f"  the service: BLIND: {blind.line()}")
    else:
        lines.append("  the service: neither pending nor firing")
    lines += [f"  the service acted: {action_line(e)}" for e in seen.actions
              if e["rule"] == rule.name][-3:]
    lines.append("this command's own evaluation, which applies nothing ("
                 + ("from the saved state):" if own else "a new engine: `for` starts from "
                    "now):"))
    return "\n".join(lines)
