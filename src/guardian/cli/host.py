"""`guardian run`, `signals`, `act` and `irq`: this host, live."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from guardian.actions import irq as irq_action
from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    listen_override,
    print_errors,
    print_plan,
    registry_warnings,
    report_sources,
    warm_snapshot,
)
from guardian.core import tomlread
from guardian.core.audit import AuditLog
from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.snapshot import format_labels
from guardian.engine.bounds import Budget
from guardian.engine.decision import Decision, render_values, short
from guardian.engine.engine import Engine
from guardian.engine.lifecycle import RuleState
from guardian.hostio.host import Host
from guardian.model.ruleset import CompiledRule, Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import state as state_file
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.executor import Executor
from guardian.service.daemon import EX_CONFIG, Daemon, ServiceOptions


def cmd_signals(args: argparse.Namespace) -> int:
    registry_warnings()
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
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
        json_out("signals", rows)
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
        print_errors(exc, args)
        return EX_CONFIG
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
            return 2
    engine = Engine(rules, Budget(config.engine.budget.runs, config.engine.budget.within))
    # Live, one evaluation acts only on the engine's decisions, with its state carried
    # from one invocation to the next, so `for`, cooldowns and limits hold for cron-style
    # runs as they do in the service. A dry run neither reads nor writes the state.
    state_path = None if args.dry_run else Path(args.state or _service_paths(config)[0])
    if state_path is not None:
        state_file.load(engine, state_path)
    from guardian.runtime.operate import (
        Operations,  # the holds and the default window, as the service
    )
    Operations(config, Path(args.state or _service_paths(config)[0])).before(engine)
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    try:
        return _run_once(args, rules, coll, engine, executor, state_path)
    finally:
        coll.close()


def _service_paths(config: Config) -> tuple[str, str]:
    """The state file and audit log the service uses (systemd's directories)."""
    state_dir = os.environ.get("STATE_DIRECTORY", "/var/lib/guardian").split(":")[0]
    logs_dir = os.environ.get("LOGS_DIRECTORY", "/var/log/guardian").split(":")[0]
    svc = config.service
    return (svc.state_file or f"{state_dir}/state.json",
            svc.audit_log or f"{logs_dir}/audit.jsonl")


def _serve(args: argparse.Namespace, config: Config) -> int:
    svc = config.service
    state_path, audit_path = _service_paths(config)
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
        state_path=Path(args.state or state_path),
        audit_path=Path(args.audit or audit_path),
        metrics_address=args.metrics_address or address or svc.metrics.address,
        metrics_port=port,
        textfile=svc.metrics.textfile or None, apply_timeout=svc.apply_timeout,
        act_deadline=svc.apply_timeout + 60,
        root=Path(args.root))
    daemon = Daemon(opts, config)
    daemon.install_signal_handlers()
    return daemon.run()


def _run_once(args: argparse.Namespace, rules: Ruleset, coll: Collector, engine: Engine,
              executor: Executor, state_path: Path | None) -> int:
    """Evaluate once and carry out the engine's decisions (planned only with --dry-run).
    With --dry-run, a rule whose condition holds but that the engine does not act on yet
    (pending, cooldown) also shows the plan it would run, from an executor that cannot
    apply."""
    snap = warm_snapshot(coll, args.warmup, engine)
    decisions = engine.evaluate(snap)
    if state_path is not None:
        state_file.save(engine, state_path)  # before acting, as the service does
    executed = executor.run(decisions, snap)
    preview = Executor(coll.host, dry_run=True)
    report = []
    for rule in rules.rules:
        result = rule.condition.fn(snap.values, engine.history)
        state = "unknown" if result is None else ("holds" if result else "ok")
        missing = [ref.key for ref in rule.condition.refs if ref.value(snap.values) is None]
        st = engine.states[rule.name]
        evidence = Engine.decision_values(rule, snap.values, result)
        entry: dict[str, Any] = {
            "rule": rule.name, "severity": rule.spec.severity, "condition": state,
            "phase": st.phase,
            "values": render_values(evidence),
            "missing": missing, "decisions": [d.kind for d in decisions if d.rule == rule.name],
            "actions": [{"use": a.use, **a.public_params} for a in rule.actions],
            "plans": [ex.to_dict() for ex in executed if ex.decision.rule == rule.name]}
        if not rule.spec.enabled:
            entry["condition"] = "disabled"
        elif result and not entry["plans"] and args.dry_run:
            d = Decision(snap.time, rule.name, "would-fire", rule.spec.severity,
                         rule.spec.summary, evidence,
                         [a for a in rule.actions if a.spec.on != "resolve"])
            entry["plans"] = [ex.to_dict() for ex in preview.run([d], snap)]
        report.append(entry)
    if args.json:
        json_out("run", {"dry_run": args.dry_run, "sources": [s.name for s in coll.sources],
                         "unavailable": coll.unavailable, "source_errors": snap.errors,
                         "state": str(state_path) if state_path else None,
                         "rules": report},
                 warnings=[f"source {n} failed: {e}" for n, e in snap.errors.items()])
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
        if e["condition"] == "holds" and not any(p.get("outcome") for p in e["plans"]):
            print(f"         {_not_acting(compiled, engine.states[e['rule']], snap.time)}")
        for plan in e["plans"]:
            print_plan(plan)
    return 0


def _not_acting(rule: CompiledRule, st: RuleState, now: float) -> str:
    """Why a rule whose condition holds does not act at this evaluation."""
    if st.phase == "pending" and st.since is not None:
        left = max(rule.spec.for_ - (now - st.since), 0.0)
        return f"pending: fires after holding for {rule.spec.for_:g}s ({left:g}s left), then:"
    if st.phase == "firing":
        return "firing: no action now (cooldown, limit or budget; see `guardian explain`)"
    return "would fire, then:"


def _parse_set(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            params[key.strip()] = tomlread.loads(f"v = {value}")["v"]
        except tomlread.TOMLDecodeError:
            params[key.strip()] = value
    return params


def cmd_act(args: argparse.Namespace) -> int:
    registry_warnings()
    reg = default_registry()
    cls = reg.actions.get(args.action)
    if cls is None:
        why = reg.action_failure(args.action)
        print(f"guardian act: action {args.action!r} could not be loaded: {why}" if why else
              f"guardian act: unknown action {args.action!r} (known: "
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
        return print_errors(exc, args)
    coll = host_collector(args.root, config)
    snap = warm_snapshot(coll, args.warmup)
    audit = None
    if args.audit:
        audit = open_audit(args.audit)
        if audit is None:
            return 2
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    rails = [] if args.dry_run else _act_rails(config, bool(cls.disruptive))
    if rails and not args.force:
        for why in rails:
            executor.audit_entry({"type": "refused", "manual": True, "use": args.action,
                                  "reason": why})
            print(f"guardian act: {args.action}: refused: {why} (--force overrides, "
                  f"audited)", file=sys.stderr)
        coll.close()
        if args.json:
            json_out("act", {"refused": rails}, ok=False, errors=rails)
        return 1
    if rails:
        executor.audit_entry({"type": "forced", "manual": True, "use": args.action,
                              "overrides": rails})
    ex = executor.act(args.action, cls(params), snap)
    coll.close()
    failed = bool(ex.error or (ex.outcome is not None and not ex.outcome.ok))
    if args.json:
        json_out("act", ex.to_dict(), ok=not failed,
                 errors=[ex.error] if ex.error else [])
    else:
        print_plan(ex.to_dict())
    return 1 if failed else 0


def _act_rails(config: Config, disruptive: bool) -> list[str]:
    """Why `guardian act` must not apply now, as the service would not: a hold on every
    rule in force (from any source the config names; an unreadable one counts), and for a
    disruptive action the config's maintenance window closed or a fleet budget (which
    `act` does not take a slot of) configured."""
    from guardian.runtime.operate import Operations  # the service's sources of holds

    wall = time.time()
    out = [f"a hold on every rule is in force ({h.describe()}) [{h.source}]"
           for h in Operations(config, Path(_service_paths(config)[0])).holds(wall)
           if h.rule == "*" and not h.labels]
    window = config.engine.window
    if disruptive and window is not None and not window.is_open(wall):
        out.append(f"outside the maintenance window ({window.describe()})")
    if disruptive and config.fleet is not None:
        out.append("[fleet] is configured, and guardian act takes no slot of the fleet "
                   "budget")
    return out


def open_audit(path: str) -> AuditLog | None:
    """The --audit log, or None (said on stderr) when it cannot be opened safely."""
    try:
        return AuditLog(path)
    except OSError as exc:
        why = "it is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        print(f"guardian: cannot open the audit log {path}: {why}", file=sys.stderr)
        return None


def cmd_irq(args: argparse.Namespace) -> int:
    host = Host(Path(args.root))
    state = args.state or irq_action.DEFAULT_STATE
    if args.verb == "show":
        for irq, cpus in sorted(irq_action.load_state(state).items()):
            print(f"irq {irq}: saved smp_affinity_list {cpus}")
        return 0
    results = irq_action.restore(host, state)
    for r in results:
        said = "restored to " + r["new"] if r["ok"] else "FAILED: " + r["error"]
        print(f"irq {r['irq']}: {said}")
    if not results:
        print("nothing to restore")
    return 0 if all(r["ok"] for r in results) else 1
