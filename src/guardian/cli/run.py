"""`guardian run`: the service loop, or one pass of it with ``--once``
(:mod:`guardian.runtime.once`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    listen_override,
    open_audit,
    print_errors,
    print_plan,
    registry_warnings,
    report_sources,
)
from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.engine.decision import short
from guardian.engine.engine import Engine
from guardian.model.ruleset import Ruleset
from guardian.policy.loader import load_rules
from guardian.runtime import once
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.executor import Executor
from guardian.runtime.paths import service_paths
from guardian.runtime.status import now_words, tally
from guardian.service.daemon import Daemon, ServiceOptions


def cmd_run(args: argparse.Namespace) -> ExitCode:
    registry_warnings()
    try:
        config = cli_config(args)
    except RuleError as exc:
        print_errors(exc, args)
        return ExitCode.CONFIG
    if not args.once:
        return _serve(args, config)
    try:
        rules = load_rules(args.rules or config.service.rules)
    except RuleError as exc:
        return print_errors(exc, args)
    coll = host_collector(args.root, config)
    report_sources(coll)
    audit = None
    if args.audit:
        audit = open_audit(args.audit)
        if audit is None:
            return ExitCode.USAGE
    # Live, one evaluation acts only on the engine's decisions, with its state carried
    # from one invocation to the next, so `for`, cooldowns and limits hold for cron-style
    # runs as they do in the service. A dry run neither reads nor writes the state.
    state = Path(args.state) if args.state else service_paths(config).state
    state_path = None if args.dry_run else state
    engine = once.engine_for(rules, config, state_path, state)
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    try:
        done = once.run_once(rules, coll, engine, executor,
                             warmup=parse_duration(args.warmup), state_path=state_path,
                             operating=once.operating(config, state))
        _report(args, rules, engine, coll, done, state_path)
    finally:
        coll.close()
    return ExitCode.OK


def _report(args: argparse.Namespace, rules: Ruleset, engine: Engine, coll: Collector,
            done: once.Pass, state_path: Path | None) -> None:
    snap = done.snapshot
    counts = tally((r.rule, r.condition, r.phase, r.blind, r.results) for r in done.rules)
    summary = counts.line(args.dry_run)
    if args.json:
        json_out("run", {"dry_run": args.dry_run, "sources": [s.name for s in coll.sources],
                         "unavailable": coll.unavailable, "source_errors": snap.errors,
                         "state": str(state_path) if state_path else None,
                         "summary": summary, "counts": counts.to_dict(),
                         "blind": [{"rule": n, "why": why} for n, why in counts.blind],
                         "rules": [r.to_dict() for r in done.rules]},
                 warnings=[f"source {n} failed: {e}" for n, e in snap.errors.items()])
        return
    for name, err in snap.errors.items():
        print(f"guardian: source {name} failed: {err}", file=sys.stderr)
    for r in done.rules:
        vals = " ".join(f"{k}={short(v)}" for k, v in r.values.items())
        flag = {"holds": "HOLDS", "ok": "ok", "unknown": "UNKNOWN"}.get(r.condition,
                                                                     r.condition)
        print(f"{flag:<8} {r.rule:<28} {vals}")
        if r.missing:
            print(f"         no value for: {', '.join(r.missing)}")
        compiled = rules.by_name(r.rule)
        assert compiled is not None
        if r.condition == "holds" or r.plans or r.decisions or r.phase != "inactive":
            words = now_words(engine, compiled, done.decisions, snap.time,
                              dry_run=args.dry_run)
            if any(p.get("result") == "preview" for p in r.plans):
                words += ", then it would run:"
            print(f"         {words}")
        held = False
        for plan in r.plans:
            if plan.get("result") == "held" and not held:
                held = True
                print("         held (planned, not applied):")
            print_plan(plan)
    by_why: dict[str, list[str]] = {}
    for name, why in counts.blind:
        by_why.setdefault(why, []).append(name)
    for why, names in by_why.items():  # one line per cause, its rules named
        print(f"blind (no value): {', '.join(names)} ({why})")
    print(summary)


def _serve(args: argparse.Namespace, config: Config) -> ExitCode:
    svc = config.service
    paths = service_paths(config)
    port: int | None = svc.metrics.port if svc.metrics.enabled else None
    address, env_port = listen_override()
    if args.metrics_port is not None:
        port = args.metrics_port or None
    elif env_port is not None:
        port = env_port or None
    opts = ServiceOptions(
        rules=args.rules or svc.rules,
        dry_run=args.dry_run or svc.dry_run,
        interval=parse_duration(args.interval) if args.interval else config.engine.interval,
        state_path=Path(args.state or paths.state),
        audit_path=Path(args.audit or paths.audit),
        metrics_address=args.metrics_address or address or svc.metrics.address,
        metrics_port=port,
        textfile=svc.metrics.textfile or None, apply_timeout=svc.apply_timeout,
        act_deadline=svc.apply_timeout + 60,
        root=Path(args.root))
    daemon = Daemon(opts, config)
    daemon.install_signal_handlers()
    return daemon.run()
