"""`guardian record`, `replay` and `explain`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.snapshot import SignalSpec
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime.config import Config
from guardian.runtime.executor import Executor

if TYPE_CHECKING:
    from guardian.runtime.recording import Recording
from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    print_errors,
    print_plan,
    report_sources,
    warm_snapshot,
)


def cmd_record(args: argparse.Namespace) -> int:
    from guardian.runtime.recording import Writer, header
    try:
        config = cli_config(args)
        interval, duration = parse_duration(args.interval), parse_duration(args.duration)
    except RuleError as exc:
        return print_errors(exc, args)
    except ValueError as exc:
        print(f"guardian record: {exc}", file=sys.stderr)
        return 2
    coll = host_collector(args.root, config)
    report_sources(coll)
    try:
        writer = Writer(args.output, header(coll, interval, args.note))
    except FileExistsError:
        print(f"guardian record: {args.output} exists; record into a new file",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"guardian record: cannot create {args.output}: {exc.strerror}", file=sys.stderr)
        return 2
    start = time.monotonic()
    tty = sys.stderr.isatty()
    try:
        while True:
            t = time.monotonic()
            writer.write(coll.collect(t))
            elapsed = t - start
            line = (f"recorded {writer.count} snapshots, {writer.size() / 1024:.0f} KiB, "
                    f"{elapsed:.0f}s of {duration:g}s")
            print(("\r" + line) if tty else line, end="" if tty else "\n",
                  file=sys.stderr, flush=True)
            if elapsed >= duration:
                break
            time.sleep(max(0.0, interval - (time.monotonic() - t)))
    except KeyboardInterrupt:
        print("\nguardian record: stopped; everything recorded so far is kept",
              file=sys.stderr)
    finally:
        writer.close()
        coll.close()
    if tty:
        print(file=sys.stderr)
    return 0


def _load_recording(path: str) -> Any:
    from guardian.runtime.recording import RecordingError, read
    try:
        rec = read(path)
    except RecordingError as exc:
        print(f"guardian: {exc}", file=sys.stderr)
        return None
    if rec.damage:
        print(f"guardian: {path}: {rec.damage}; replaying what came before",
              file=sys.stderr)
    return rec


def cmd_replay(args: argparse.Namespace) -> int:
    from guardian.runtime.replay import decisions_json, replay, timeline
    rec = _load_recording(args.recording)
    if rec is None:
        return 2
    try:
        rules = load_rules(args.rules or args.rules_default,
                           catalogue={**default_registry().catalogue(), **rec.catalogue})
    except RuleError as exc:
        return print_errors(exc, args)
    r = replay(rec, rules)
    if args.json:
        json_out("replay", {"damage": rec.damage, "snapshots": len(rec.snapshots),
                            "decisions": decisions_json(r)})
    else:
        h = rec.header
        print(f"recording of {h.get('host')} (kernel {h.get('kernel')}), "
              f"{len(rec.snapshots)} snapshots every {h.get('interval')}s; "
              f"{len(r.decisions)} decision(s)")
        for line in timeline(r):
            print(line)
    if args.plot:
        from guardian.runtime.plot import plot
        try:
            plot(rec, rules, r, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian replay: {exc}", file=sys.stderr)
            return 1
    return 1 if rec.damage else 0


def _rules_and_recording(args: argparse.Namespace
                         ) -> tuple[Config, Recording | None, Ruleset,
                                    dict[str, SignalSpec]] | int:
    """The config, the --recording (if any), the rules checked against the signals of
    both, and that catalogue; or the exit code after saying what is wrong."""
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    rec = None
    catalogue = default_registry().catalogue()
    if args.recording:
        rec = _load_recording(args.recording)
        if rec is None:
            return 2
        catalogue = {**catalogue, **rec.catalogue}
    try:
        rules = load_rules(args.rules or config.service.rules, catalogue=catalogue)
    except RuleError as exc:
        return print_errors(exc, args)
    return config, rec, rules, catalogue


def cmd_explain(args: argparse.Namespace) -> int:
    from guardian.policy.explain import explain_condition, missing_signals
    loaded = _rules_and_recording(args)
    if isinstance(loaded, int):
        return loaded
    config, rec, rules, catalogue = loaded
    rule = rules.by_name(args.rule)
    if rule is None:
        print(f"guardian explain: no rule {args.rule!r} (rules: "
              f"{', '.join(r.name for r in rules.rules)})", file=sys.stderr)
        return 2
    engine = Engine(rules)
    if rec is not None:
        from guardian.runtime.replay import replay
        r = replay(rec, rules, parse_duration(args.at) if args.at else None)
        engine = r.engine
        snap = r.last
        if snap is None:
            print("guardian explain: no snapshot at or before --at", file=sys.stderr)
            return 2
    else:
        snap = warm_snapshot(host_collector(args.root, config), args.warmup, engine)
        engine.evaluate(snap)
    st = engine.states[rule.name]
    tree = explain_condition(rule.spec.when, catalogue, snap.values, engine.history)
    missing = missing_signals(rule.condition.refs, snap.values)
    state = _state_words(rule, st, snap.time, missing, engine.holders(rule))
    plans: list[dict[str, Any]] = []
    if rec is None and tree.value:
        executor = Executor(Host(Path(args.root)), dry_run=True)
        d = Decision(snap.time, rule.name, "explain", rule.spec.severity, rule.spec.summary,
                     {}, [a for a in rule.actions if a.spec.on != "resolve"])
        plans = [ex.to_dict() for ex in executor.run([d], snap)]  # dry run: never applies
    if args.json:
        json_out("explain", {"rule": rule.name, "state": state, "missing": missing,
                             "held_by": [name for name, _ in engine.holders(rule)],
                             "condition": tree.to_dict(), "plans": plans,
                             "actions": [{"use": a.use, **a.public_params}
                                         for a in rule.actions]})
        return 0
    print(f"{rule.name}: {state}")
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
    return 0


def _state_words(rule: Any, st: Any, now: float, missing: list[str],
                 holders: list[tuple[str, str]]) -> str:
    spec = rule.spec
    if not spec.enabled:
        return "disabled"
    if st.unknown:
        return ("UNKNOWN: the condition has no value (missing: "
                f"{', '.join(missing) or 'a computed value'}); it neither fires nor clears")
    if st.phase == "pending":
        left = spec.for_ - (now - st.since)
        return (f"PENDING: holds since {now - st.since:g}s; fires in {max(left, 0):g}s "
                f"(for = {spec.for_:g}s)")
    if st.phase == "firing":
        cool = ""
        if st.last_run is not None and now - st.last_run < spec.cooldown:
            cool = f"; actions again in {spec.cooldown - (now - st.last_run):g}s (cooldown)"
        held = ""
        if holders:
            held = ("; its disruptive actions are held while its cause " +
                    ", ".join(f"{name} is {phase}" for name, phase in holders))
        return f"FIRING since {now - st.since:g}s{cool}{held}"
    return "INACTIVE: the condition does not hold"


def cmd_why(args: argparse.Namespace) -> int:
    """The pending and firing rules as chains, root cause first (see guardian.runtime.why)."""
    from guardian.runtime import why
    loaded = _rules_and_recording(args)
    if isinstance(loaded, int):
        return loaded
    config, rec, rules, _ = loaded
    if rec is not None:
        from guardian.runtime.replay import replay
        r = replay(rec, rules, parse_duration(args.at) if args.at else None)
        engine, snap, decisions = r.engine, r.last, r.decisions
        if snap is None:
            print("guardian why: no snapshot at or before --at", file=sys.stderr)
            return 2
    else:
        from guardian.runtime import state as state_file
        engine = Engine(rules)
        if args.state and Path(args.state).exists():
            state_file.load(engine, Path(args.state))
        from guardian.cli.host import _service_paths
        from guardian.runtime.operate import Operations
        # the holds the service sees now (guardian pause's beside the state file)
        Operations(config, Path(args.state or _service_paths(config)[0])).before(engine)
        snap = warm_snapshot(host_collector(args.root, config), args.warmup, engine)
        decisions = engine.evaluate(snap)
    chain = why.links(engine, snap, decisions)
    if args.json:
        json_out("why", {"time": snap.time, "recording": args.recording,
                         "chain": [link.to_dict() for link in chain]})
    else:
        for line in why.text(chain, snap.time, "would act" if rec is not None else "acted"):
            print(line)
    if args.plot:
        from guardian.runtime.plot import plot_why
        try:
            plot_why(chain, snap.time, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian why: {exc}", file=sys.stderr)
            return 1
    return 0
