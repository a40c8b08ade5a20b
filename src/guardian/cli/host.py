"""`guardian run`, `signals`, `act` and `irq`: this host, live."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..actions import irq as irq_action
from ..collector import Collector
from ..config import Config
from ..durations import parse_duration
from ..engine import Budget, Decision, Engine
from ..executor import Executor
from ..host import Host
from ..plugins import ActionContext, default_registry
from ..policy.loader import RuleError, Ruleset, load_rules
from ..service import EX_CONFIG, Daemon, ServiceOptions
from ..snapshot import format_labels
from .common import (
    cli_config,
    host_collector,
    print_errors,
    print_plan,
    registry_warnings,
    report_sources,
    short,
    warm_snapshot,
)


def cmd_signals(args: argparse.Namespace) -> int:
    registry_warnings()
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc)
    coll = host_collector(args.root, config)
    report_sources(coll)
    snap = warm_snapshot(coll, args.warmup)
    reg = default_registry()
    rows = []
    for src_name, src in sorted(reg.sources.items()):
        for spec in src.specs:
            v = snap.values.get(spec.name)
            rows.append({
                "name": spec.name, "source": src_name, "unit": spec.unit,
                "labels": list(spec.labels), "counter": spec.counter, "help": spec.help,
                "value": _jsonable(v),
                "unavailable": coll.unavailable.get(src_name) or snap.errors.get(src_name),
            })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        v = row["value"]
        shown = ("-" if v is None else
                 ", ".join(f"{k}={x}" for k, x in list(v.items())[:8])
                 + (" …" if len(v) > 8 else "") if isinstance(v, dict) else str(v))
        print(f"{row['name']:<36} {shown:<40} {row['unit']:<10} {row['help']}")
    return 0


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {format_labels(labels): val for labels, val in sorted(v.items())}
    return v


def cmd_run(args: argparse.Namespace) -> int:
    registry_warnings()
    try:
        config = cli_config(args)
    except RuleError as exc:
        print_errors(exc)
        return EX_CONFIG
    if not args.once:
        return _serve(args, config)
    try:
        rules = load_rules(args.rules or config.service.rules)
    except RuleError as exc:
        return print_errors(exc)
    coll = host_collector(args.root, config)
    report_sources(coll)
    audit = None
    if args.audit:
        from ..audit import AuditLog
        audit = AuditLog(args.audit)
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    engine = Engine(rules, Budget(config.engine.budget.runs, config.engine.budget.within))
    return _run_once(args, rules, coll, engine, executor)


def _serve(args: argparse.Namespace, config: Config) -> int:
    svc = config.service
    state_dir = os.environ.get("STATE_DIRECTORY", "/var/lib/guardian").split(":")[0]
    logs_dir = os.environ.get("LOGS_DIRECTORY", "/var/log/guardian").split(":")[0]
    port: int | None = svc.metrics.port if svc.metrics.enabled else None
    if args.metrics_port is not None:
        port = args.metrics_port or None
    opts = ServiceOptions(
        rules=args.rules or svc.rules,
        dry_run=args.dry_run or svc.dry_run,
        interval=parse_duration(args.interval) if args.interval else config.engine.interval,
        state_path=Path(args.state or svc.state_file or f"{state_dir}/state.json"),
        audit_path=Path(args.audit or svc.audit_log or f"{logs_dir}/audit.jsonl"),
        metrics_address=svc.metrics.address, metrics_port=port,
        textfile=svc.metrics.textfile or None, apply_timeout=svc.apply_timeout,
        root=Path(args.root))
    return Daemon(opts, config).run()


def _run_once(args: argparse.Namespace, rules: Ruleset, coll: Collector, engine: Engine,
              executor: Executor) -> int:
    """Evaluate once and show, for every rule, whether its condition holds now and, for
    those that hold, the exact plan of each action (never applied with --dry-run)."""
    snap = warm_snapshot(coll, args.warmup, engine)
    decisions = engine.evaluate(snap)
    report = []
    for rule in rules.rules:
        result = rule.condition.fn(snap.values, engine.history)
        state = "unknown" if result is None else ("holds" if result else "ok")
        missing = [ref.key for ref in rule.condition.refs if ref.value(snap.values) is None]
        entry: dict[str, Any] = {
            "rule": rule.name, "severity": rule.spec.severity, "condition": state,
            "phase": engine.states[rule.name].phase, "values": Engine.decision_values(
                rule, snap.values, result), "missing": missing, "plans": []}
        if not rule.spec.enabled:
            entry["condition"] = "disabled"
        elif result:
            fired = [d for d in decisions if d.rule == rule.name and d.actions]
            d = fired[0] if fired else Decision(
                snap.time, rule.name, "would-fire", rule.spec.severity, rule.spec.summary,
                entry["values"], [a.spec for a in rule.actions if a.spec.on != "resolve"])
            for ex in executor.run(rules, [d], snap):
                entry["plans"].append(ex.to_dict())
        report.append(entry)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "sources": [s.name for s in coll.sources],
                          "unavailable": coll.unavailable, "source_errors": snap.errors,
                          "rules": report}, indent=2, default=str))
        return 0
    for name, err in snap.errors.items():
        print(f"guardian: source {name} failed: {err}", file=sys.stderr)
    for e in report:
        vals = " ".join(f"{k}={short(v)}" for k, v in e["values"].items())
        flag = {"holds": "HOLDS", "ok": "ok", "unknown": "UNKNOWN"}.get(e["condition"],
                                                                     e["condition"])
        print(f"{flag:<8} {e['rule']:<28} {vals}")
        if e["missing"]:
            print(f"         no value for: {', '.join(e['missing'])}")
        compiled = rules.by_name(e["rule"])
        assert compiled is not None
        if e["condition"] == "holds" and compiled.spec.for_ > 0 and e["phase"] != "firing":
            print(f"         would fire after holding for {compiled.spec.for_:g}s, then:")
        for plan in e["plans"]:
            print_plan(plan)
    return 0


def _parse_set(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            params[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            params[key.strip()] = value
    return params


def cmd_act(args: argparse.Namespace) -> int:
    registry_warnings()
    reg = default_registry()
    cls = reg.actions.get(args.action)
    if cls is None:
        print(f"guardian act: unknown action {args.action!r} (known: "
              f"{', '.join(sorted(reg.actions))})", file=sys.stderr)
        return 2
    try:
        params = cls.Params.model_validate(_parse_set(args.set))
        config = cli_config(args)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"]) or "(parameters)"
            print(f"guardian act: {args.action}: --set {where}: {err['msg']}",
                  file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"guardian act: {exc}", file=sys.stderr)
        return 2
    except RuleError as exc:
        return print_errors(exc)
    coll = host_collector(args.root, config)
    snap = warm_snapshot(coll, args.warmup)
    audit = None
    if args.audit:
        from ..audit import AuditLog
        audit = AuditLog(args.audit)
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    decision = Decision(snap.time, "manual", "manual", "info",
                        f"guardian act {args.action}", {}, [])
    ctx = ActionContext("manual", snap, coll.host, args.dry_run)
    ex = executor.execute(decision, args.action, cls(params), ctx)
    coll.close()
    if args.json:
        print(json.dumps(ex.to_dict(), indent=2, default=str))
    else:
        print_plan(ex.to_dict())
    if ex.error or (ex.outcome is not None and not ex.outcome.ok):
        return 1
    return 0


def cmd_irq(args: argparse.Namespace) -> int:
    host = Host(Path(args.root))
    if args.verb == "show":
        for irq, cpus in sorted(irq_action.load_state(args.state).items()):
            print(f"irq {irq}: saved smp_affinity_list {cpus}")
        return 0
    results = irq_action.restore(host, args.state)
    for r in results:
        state = "restored to " + r["new"] if r["ok"] else "FAILED: " + r["error"]
        print(f"irq {r['irq']}: {state}")
    if not results:
        print("nothing to restore")
    return 0 if all(r["ok"] for r in results) else 1
