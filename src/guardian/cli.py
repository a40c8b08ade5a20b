"""The ``guardian`` command line: check and test rules offline, dry-run them on a host."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import __version__
from .actions import irq as irq_action
from .collector import Collector
from .config import DEFAULT_CONFIG, Config, load_config
from .durations import parse_duration
from .engine import Budget, Decision, Engine
from .executor import Executor
from .host import Host
from .plugins import ActionContext, default_registry
from .policy.loader import TEST_SUFFIX, RuleError, Ruleset, load_rules
from .policy.ruletest import run_test_file
from .policy.schema import json_schema
from .service import EX_CONFIG, Daemon, ServiceOptions
from .signals.kmsg import KmsgConfig
from .snapshot import Snapshot, format_labels

DEFAULT_RULES = "/etc/guardian/rules"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # the journal stamps each line; without systemd, a time helps
    if not os.environ.get("JOURNAL_STREAM"):
        logging.getLogger().handlers[0].setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        rc: int = args.func(args)
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        return 130
    return rc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="guardian",
        description="Watch a Linux node's kernel signals and remediate by TOML rules.",
    )
    p.add_argument("--version", action="version", version=f"guardian {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(required=True, metavar="COMMAND")

    c = sub.add_parser("check", help="check rule files; report every error as path:line:col")
    c.add_argument("paths", nargs="*", default=[DEFAULT_RULES],
                   help=f"rule files or directories (default {DEFAULT_RULES})")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_check)

    t = sub.add_parser("test", help="run rule unit tests (*.test.toml), like promtool test")
    t.add_argument("paths", nargs="+", help="test files, or directories of *.test.toml")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    _config_option(t)
    t.set_defaults(func=cmd_test)

    r = sub.add_parser("run", help="the service loop (or one evaluation with --once)")
    r.add_argument("--rules", nargs="+", metavar="PATH",
                   help=f"rule files or directories (default: the config's, else "
                        f"{DEFAULT_RULES})")
    r.add_argument("--once", action="store_true",
                   help="one evaluation (after a short warm-up sample for rates), then exit")
    r.add_argument("--dry-run", action="store_true",
                   help="plan actions but never apply them")
    r.add_argument("--interval", help="tick interval (default: the config's, else 15s)")
    r.add_argument("--warmup", default="1s",
                   help="with --once: time between the warm-up sample and the evaluation")
    r.add_argument("--root", default="/", help="host root to read (default /)")
    r.add_argument("--audit", metavar="FILE", help="append decisions and outcomes to FILE")
    r.add_argument("--state", metavar="FILE", help="persisted engine state (service)")
    r.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="metrics endpoint port on the configured address; 0 turns it off")
    r.add_argument("--json", action="store_true", help="machine-readable output (--once)")
    _config_option(r)
    r.set_defaults(func=cmd_run)

    a = sub.add_parser("act", help="run one action once on this host, outside any rule "
                       "(same plan, apply, verify and audit path)")
    a.add_argument("action", help="a registered action, e.g. reap.zombies")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter; VALUE is read as TOML (5, \"x\", [1, 2], true) "
                        "or else as a string")
    a.add_argument("--dry-run", action="store_true", help="plan only")
    a.add_argument("--root", default="/", help="host root (default /)")
    a.add_argument("--warmup", default="1s", help="time between the two samples taken")
    a.add_argument("--audit", metavar="FILE", help="append the plan and outcome to FILE")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    _config_option(a)
    a.set_defaults(func=cmd_act)

    q = sub.add_parser("irq", help="IRQ affinity changes made by irq.move")
    q.add_argument("verb", choices=["restore", "show"],
                   help="restore: put every saved affinity back; show: list them")
    q.add_argument("--state", default=irq_action.DEFAULT_STATE, help="state file")
    q.add_argument("--root", default="/", help="host root (default /)")
    q.set_defaults(func=cmd_irq)

    rec = sub.add_parser("record", help="record every signal over time into a file")
    rec.add_argument("-o", "--output", required=True, metavar="FILE",
                     help="the recording (gzip-compressed JSON lines)")
    rec.add_argument("--interval", default="1s", help="time between snapshots (default 1s)")
    rec.add_argument("--duration", default="10m", help="how long (default 10m); Ctrl-C "
                     "stops early and keeps everything written")
    rec.add_argument("--root", default="/", help="host root (default /)")
    _config_option(rec)
    rec.set_defaults(func=cmd_record)

    rp = sub.add_parser("replay", help="run rules over a recording; print the decisions")
    rp.add_argument("recording", help="a file from guardian record")
    rp.add_argument("--rules", nargs="+", default=["rules"], metavar="PATH",
                    help="rule files or directories (default ./rules)")
    rp.add_argument("--plot", metavar="OUT.png", help="draw signals, thresholds and "
                    "firing windows (needs matplotlib: guardian[plot])")
    rp.add_argument("--json", action="store_true", help="decisions as JSON")
    rp.set_defaults(func=cmd_replay)

    ex = sub.add_parser("explain", help="why a rule is inactive, pending, firing or unknown")
    ex.add_argument("rule", help="rule name")
    ex.add_argument("--rules", nargs="+", metavar="PATH", help=f"rule files or directories "
                    f"(default: the config's, else {DEFAULT_RULES})")
    ex.add_argument("--recording", metavar="FILE", help="explain at a point of a "
                    "recording instead of on this host")
    ex.add_argument("--at", metavar="TIME", help="with --recording: time since its start "
                    "(default: its end)")
    ex.add_argument("--warmup", default="1s", help="live: time between the two samples")
    ex.add_argument("--root", default="/", help="host root (default /)")
    ex.add_argument("--json", action="store_true", help="machine-readable output")
    _config_option(ex)
    ex.set_defaults(func=cmd_explain)

    s = sub.add_parser("schema", help="print the rule file JSON Schema (for editors)")
    s.set_defaults(func=cmd_schema)

    g = sub.add_parser("signals", help="list every signal with value, unit, help, source")
    g.add_argument("--root", default="/", help="host root to read (default /)")
    g.add_argument("--warmup", default="1s", help="time between two samples (for rates)")
    g.add_argument("--json", action="store_true", help="machine-readable output")
    _config_option(g)
    g.set_defaults(func=cmd_signals)
    return p


def _config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help=f"guardian config (default {DEFAULT_CONFIG} when it exists)")


def _config(args: argparse.Namespace) -> Config:
    """The config named by --config, else the default file if present. Raises RuleError."""
    path = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    return load_config(path, default_registry())


def _registry_warnings() -> None:
    for err in default_registry().load_errors:
        print(f"guardian: warning: {err}", file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    _registry_warnings()
    try:
        rs = load_rules(args.paths)
    except RuleError as exc:
        if args.json:
            print(json.dumps({"ok": False, "errors": [
                {"path": d.path, "line": d.line, "col": d.col, "message": d.message}
                for d in exc.diagnostics]}, indent=2))
        else:
            for d in exc.diagnostics:
                print(d)
            print(f"{len(exc.diagnostics)} error(s)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": True, "files": rs.files,
                          "rules": [r.name for r in rs.rules]}, indent=2))
    else:
        print(f"ok: {len(rs.rules)} rule(s) in {len(rs.files)} file(s)")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    _registry_warnings()
    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*" + TEST_SUFFIX)) if p.is_dir() else [p])
    if not files:
        print("guardian test: no test files found", file=sys.stderr)
        return 1
    try:
        config = _config(args)
    except RuleError as exc:
        return _print_errors(exc)
    kmsg_cfg = config.sources.get("kmsg") or KmsgConfig()
    assert isinstance(kmsg_cfg, KmsgConfig)
    results = [run_test_file(f, patterns=kmsg_cfg.compiled()) for f in files]
    n_tests = sum(r.tests for r in results)
    n_fail = sum(len(r.failures) for r in results) + sum(len(r.errors) for r in results)
    if args.json:
        print(json.dumps([{
            "path": r.path, "tests": r.tests, "ok": r.ok,
            "errors": [str(d) for d in r.errors],
            "failures": [{"test": f.test, "at": f.at, "message": f.message}
                         for f in r.failures]} for r in results], indent=2))
    else:
        for r in results:
            print(f"{'PASS' if r.ok else 'FAIL'} {r.path} ({r.tests} test(s))")
            for d in r.errors:
                print(f"  {d}")
            for f in r.failures:
                print(f"  test {f.test!r} at {f.at}:\n{f.message}")
        print(f"{n_tests} test(s), {n_fail} problem(s)")
    return 0 if n_fail == 0 else 1


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
    _registry_warnings()
    reg = default_registry()
    cls = reg.actions.get(args.action)
    if cls is None:
        print(f"guardian act: unknown action {args.action!r} (known: "
              f"{', '.join(sorted(reg.actions))})", file=sys.stderr)
        return 2
    try:
        params = cls.Params.model_validate(_parse_set(args.set))
        config = _config(args)
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
        return _print_errors(exc)
    coll = _collector(args.root, config)
    snap = _warm_snapshot(coll, args.warmup)
    audit = None
    if args.audit:
        from .audit import AuditLog
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
        _print_plan(ex.to_dict())
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


def cmd_record(args: argparse.Namespace) -> int:
    from .recording import Writer, header
    try:
        config = _config(args)
        interval, duration = parse_duration(args.interval), parse_duration(args.duration)
    except RuleError as exc:
        return _print_errors(exc)
    except ValueError as exc:
        print(f"guardian record: {exc}", file=sys.stderr)
        return 2
    coll = _collector(args.root, config)
    _report_sources(coll)
    writer = Writer(args.output, header(coll, interval))
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
    from .recording import RecordingError, read
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
    from .replay import decisions_json, replay, timeline
    rec = _load_recording(args.recording)
    if rec is None:
        return 2
    try:
        rules = load_rules(args.rules, catalogue={**default_registry().catalogue(),
                                                  **rec.catalogue})
    except RuleError as exc:
        return _print_errors(exc)
    r = replay(rec, rules)
    if args.json:
        print(json.dumps({"damage": rec.damage, "snapshots": len(rec.snapshots),
                          "decisions": decisions_json(r)}, indent=2, sort_keys=True))
    else:
        h = rec.header
        print(f"recording of {h.get('host')} (kernel {h.get('kernel')}), "
              f"{len(rec.snapshots)} snapshots every {h.get('interval')}s; "
              f"{len(r.decisions)} decision(s)")
        for line in timeline(r):
            print(line)
    if args.plot:
        from .plot import plot
        try:
            plot(rec, rules, r, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian replay: {exc}", file=sys.stderr)
            return 1
    return 1 if rec.damage else 0


def cmd_explain(args: argparse.Namespace) -> int:
    from .policy.explain import explain_condition, missing_signals
    try:
        config = _config(args)
    except RuleError as exc:
        return _print_errors(exc)
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
        return _print_errors(exc)
    rule = rules.by_name(args.rule)
    if rule is None:
        print(f"guardian explain: no rule {args.rule!r} (rules: "
              f"{', '.join(r.name for r in rules.rules)})", file=sys.stderr)
        return 2
    engine = Engine(rules)
    if rec is not None:
        from .replay import replay
        r = replay(rec, rules, parse_duration(args.at) if args.at else None)
        engine = r.engine
        snap = r.last
        if snap is None:
            print("guardian explain: no snapshot at or before --at", file=sys.stderr)
            return 2
    else:
        snap = _warm_snapshot(_collector(args.root, config), args.warmup, engine)
        engine.evaluate(snap)
    st = engine.states[rule.name]
    tree = explain_condition(rule.spec.when, catalogue, snap.values, engine.history)
    missing = missing_signals(rule.condition.refs, snap.values)
    state = _state_words(rule, st, snap.time, missing)
    plans: list[dict[str, Any]] = []
    if rec is None and tree.value:
        executor = Executor(Host(Path(args.root)), dry_run=True)
        d = Decision(snap.time, rule.name, "explain", rule.spec.severity, rule.spec.summary,
                     {}, [a.spec for a in rule.actions if a.spec.on != "resolve"])
        plans = [ex.to_dict() for ex in executor.run(rules, [d], snap)]
    if args.json:
        print(json.dumps({"rule": rule.name, "state": state, "missing": missing,
                          "condition": tree.to_dict(), "plans": plans,
                          "actions": [{"use": a.spec.use, **a.spec.public_params}
                                      for a in rule.actions]}, indent=2, default=str))
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
            _print_plan(p)
    elif rule.actions:
        print("its actions: " + "; ".join(f"{a.spec.use} {json.dumps(a.spec.public_params)}"
                                          for a in rule.actions))
    return 0


def _state_words(rule: Any, st: Any, now: float, missing: list[str]) -> str:
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
        return f"FIRING since {now - st.since:g}s{cool}"
    return "INACTIVE: the condition does not hold"


def _print_errors(exc: RuleError) -> int:
    for d in exc.diagnostics:
        print(d, file=sys.stderr)
    return 1


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0


def _collector(root: str, config: Config) -> Collector:
    return Collector.from_registry(Host(Path(root)), default_registry(), config)


def _warm_snapshot(coll: Collector, warmup: str, engine: Engine | None = None) -> Snapshot:
    """A snapshot taken ``warmup`` after a first one, so per-core percentages and rates
    have values; the first feeds the engine's history when one is given."""
    first = coll.collect(time.monotonic())
    if engine is not None:
        engine.evaluate(first)
    time.sleep(parse_duration(warmup))
    return coll.collect(time.monotonic())


def _report_sources(coll: Collector) -> None:
    names = ", ".join(s.name for s in coll.sources) or "none"
    print(f"guardian: sources available: {names}", file=sys.stderr)
    for name, why in sorted(coll.unavailable.items()):
        print(f"guardian: source {name} unavailable: {why}", file=sys.stderr)


def cmd_signals(args: argparse.Namespace) -> int:
    _registry_warnings()
    try:
        config = _config(args)
    except RuleError as exc:
        return _print_errors(exc)
    coll = _collector(args.root, config)
    _report_sources(coll)
    snap = _warm_snapshot(coll, args.warmup)
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
    _registry_warnings()
    try:
        config = _config(args)
    except RuleError as exc:
        _print_errors(exc)
        return EX_CONFIG
    if not args.once:
        return _serve(args, config)
    try:
        rules = load_rules(args.rules or config.service.rules)
    except RuleError as exc:
        return _print_errors(exc)
    coll = _collector(args.root, config)
    _report_sources(coll)
    audit = None
    if args.audit:
        from .audit import AuditLog
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
    snap = _warm_snapshot(coll, args.warmup, engine)
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
        vals = " ".join(f"{k}={_short(v)}" for k, v in e["values"].items())
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
            _print_plan(plan)
    return 0


def _short(v: Any) -> str:
    if isinstance(v, dict):
        items = list(v.items())
        body = ", ".join(f"{k}: {x}" for k, x in items[:4])
        return "{" + body + (f", … {len(items) - 4} more" if len(items) > 4 else "") + "}"
    return str(v)


def _print_plan(p: dict[str, Any]) -> None:
    if p.get("error"):
        print(f"         {p['use']}: ERROR {p['error']}")
        return
    plan = p["plan"]
    print(f"         {p['use']}: {plan.get('note') or ''}".rstrip())
    for step in plan["steps"]:
        print(f"           - {step['target']}: {step['change']}")
    for r in plan["refused"]:
        print(f"           ! refused: {r}")
    out = p.get("outcome")
    if out:
        verified = {True: " (verified)", False: " (NOT verified)"}.get(out["verified"], "")
        head = f"ok{verified}: {out['detail']}" if out["ok"] else f"FAILED: {out['error']}"
        print(f"           => {head}")
        if out["data"]:
            print(f"              {json.dumps(out['data'], sort_keys=True, default=str)}")


def _print_executed(ex: Any) -> None:
    _print_plan(ex.to_dict())
