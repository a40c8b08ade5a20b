"""`guardian run`: the service loop, or one pass of it with ``--once``
(:mod:`guardian.runtime.once`)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    listen_override,
    open_audit,
    plan_lines,
    print_errors,
    registry_warnings,
    report_sources,
)
from guardian.cli.table import pack, paint, wants_colour, width
from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.core.snapshot import SignalSpec
from guardian.engine.engine import Engine
from guardian.model.ruleset import CompiledRule, Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import once
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.evidence import compared
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
                             operating=once.operating(config, state, executor))
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
    for line in report_lines(rules, engine, done, default_registry().catalogue(),
                             dry_run=args.dry_run, summary=summary,
                             blind=counts.blind, colour=wants_colour(), room=width()):
        print(line)


STATUS_COLOUR = {"FIRING": "red", "PENDING": "yellow", "HOLDS": "yellow",
                 "UNKNOWN": "magenta", "ok": "green", "disabled": "dim"}
INDENT = " " * 9  # a rule's own lines under it: what the engine says, its plans


def status_word(r: once.RuleReport) -> str:
    """The rule in one word, in the buckets of the summary line: FIRING, PENDING, HOLDS
    (holds, neither pending nor firing), UNKNOWN (no value), ok, disabled."""
    if r.condition in ("disabled", "unknown"):
        return "disabled" if r.condition == "disabled" else "UNKNOWN"
    if r.phase in ("firing", "pending"):
        return r.phase.upper()
    return "HOLDS" if r.condition == "holds" else "ok"


def report_lines(rules: Ruleset, engine: Engine, done: once.Pass,
                 catalogue: Mapping[str, SignalSpec], *, dry_run: bool, summary: str,
                 blind: Sequence[tuple[str, str]], colour: bool = False,
                 room: int | None = None) -> Iterator[str]:
    """``run --once`` for people: a line per rule (its status, its name in a column as
    wide as the longest, and what its condition compared: :func:`evidence`), what the
    engine says of a rule that holds or is not inactive and the plans it ran or would
    run; an unknown rule in one line naming its cause, each cause once at the end with
    the rules it blinds; then the summary. On a terminal ``room`` columns wide, what a
    rule compared wraps under itself (None: one line each, for grep)."""
    snap = done.snapshot
    name_w = max((len(r.rule) for r in done.rules), default=0)
    by_why: dict[str, list[str]] = {}
    for name, why in blind:
        by_why.setdefault(why, []).append(name)
    for r in done.rules:
        word = status_word(r)
        compiled = rules.by_name(r.rule)
        assert compiled is not None
        if r.condition == "unknown":
            cause = _cause(r.blind)
            said = ["blind:", *cause.split(" ")] + \
                (["(see below)"] if cause != r.blind else [])
        else:
            said = evidence(compiled, catalogue, snap.values, engine,
                            holds=r.condition == "holds")
        pad = " " * (8 - len(word))
        start = 9 + name_w + 2
        first, *more = pack(said, None if room is None else max(room - start, 30))
        yield f"{paint(word, STATUS_COLOUR.get(word, ''), colour)}{pad} " \
              f"{r.rule:<{name_w}}  {first}".rstrip()
        yield from (" " * start + line for line in more)
        if r.condition == "holds" or r.plans or r.decisions or r.phase != "inactive":
            words = now_words(engine, compiled, done.decisions, snap.time, dry_run=dry_run)
            if any(p.get("result") == "preview" for p in r.plans):
                words += ", then it would run:"
            yield INDENT + words
        held = False
        for plan in r.plans:
            if plan.get("result") == "held" and not held:
                held = True
                yield INDENT + "held (planned, not applied):"
            yield from plan_lines(plan)
    for why, names in by_why.items():  # one line per cause, its rules named
        first, *more = pack(f"blind (no value): {', '.join(names)} ({why})".split(" "),
                            None if room is None else max(room - 4, 30))
        yield paint("blind (no value):", "magenta", colour) + first[len("blind (no value):"):]
        yield from ("    " + line for line in more)
    yield summary


_SOURCE_CAUSE = re.compile(r"source (\S+) (unavailable|not configured|disabled|failing|"
                           r"reports no such value now|gave no such value)")


def _cause(why: str) -> str:
    """A blind rule's cause in a few words (``source exposition unavailable``), for its
    line; the whole of it is said once, on the cause's line at the end."""
    short = [m.group(0) for m in _SOURCE_CAUSE.finditer(why)]
    return ", ".join(dict.fromkeys(short)) if short else why


def evidence(rule: CompiledRule, catalogue: Mapping[str, SignalSpec],
             values: Mapping[str, Any], engine: Engine, *, holds: bool) -> list[str]:
    """What the condition compared (:func:`guardian.runtime.evidence.compared`)."""
    return compared(rule, catalogue, values, engine.history, holds=holds)


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
