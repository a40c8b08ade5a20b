"""Helpers the guardian commands share."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardian.core.audit import AuditLog
from guardian.core.defaults import DEFAULT_CONFIG, DEFAULT_RULES
from guardian.core.diagnostics import Diagnostic, RuleError
from guardian.core.durations import format_duration, parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.core.numbers import readable, seconds
from guardian.core.snapshot import SignalSpec, Snapshot
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import once
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config, load_config

if TYPE_CHECKING:
    from guardian.runtime.recording import Recording
    from guardian.runtime.seen import Seen

__all__ = ["DEFAULT_RULES"]


def cli_config(args: argparse.Namespace) -> Config:
    """The config named by --config, else the default file if present. Raises RuleError."""
    path = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    return load_config(path, default_registry())


def registry_warnings() -> None:
    for err in default_registry().load_errors:
        print(f"guardian: warning: {err}", file=sys.stderr)


def json_out(command: str, data: object = None, *, ok: bool = True,
             errors: Sequence[Diagnostic | str] = (), warnings: Sequence[str] = ()) -> None:
    """Every ``--json`` output has this one shape: ``command``, ``ok``, ``errors`` (each
    ``{path, line, col, message}``, or just ``message``), ``warnings`` and the command's
    ``data``."""
    print(json.dumps({
        "command": command, "ok": ok,
        "errors": [{"path": e.path, "line": e.line, "col": e.col, "message": e.message}
                   if isinstance(e, Diagnostic) else {"message": str(e)} for e in errors],
        "warnings": list(warnings), "data": data}, indent=2, default=str))


def print_errors(exc: RuleError, args: argparse.Namespace | None = None) -> ExitCode:
    """Report errors that stop a command: one per line on stderr, or the JSON shape with
    ``--json``."""
    if args is not None and getattr(args, "json", False):
        json_out(args.command, ok=False, errors=exc.diagnostics)
        return ExitCode.FAILED
    for d in exc.diagnostics:
        print(d, file=sys.stderr)
    return ExitCode.FAILED


def host_collector(root: str, config: Config) -> Collector:
    return Collector.from_registry(Host(Path(root)), default_registry(), config)


def warm_snapshot(coll: Collector, warmup: str, engine: Engine | None = None) -> Snapshot:
    """:func:`guardian.runtime.once.warm_snapshot` after ``--warmup`` (a duration)."""
    return once.warm_snapshot(coll, parse_duration(warmup), engine)


def open_audit(path: str) -> AuditLog | None:
    """The --audit log, or None (said on stderr) when it cannot be opened safely."""
    try:
        return AuditLog(path)
    except OSError as exc:
        why = "it is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        print(f"guardian: cannot open the audit log {path}: {why}", file=sys.stderr)
        return None


def load_recording(path: str) -> Recording | None:
    """The recording at ``path``, or None after saying why it cannot be read; damage at
    its end is said too, and what came before it is kept."""
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


def rules_and_recording(args: argparse.Namespace
                        ) -> tuple[Config, Recording | None, Ruleset,
                                   dict[str, SignalSpec]] | ExitCode:
    """The config, the --recording (if any), the rules checked against the signals of
    both, and that catalogue (explain, why); or the exit code after saying what is
    wrong."""
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    rec = None
    catalogue = default_registry().catalogue()
    if args.recording:
        rec = load_recording(args.recording)
        if rec is None:
            return ExitCode.USAGE
        catalogue = {**catalogue, **rec.catalogue}
    try:
        rules = load_rules(args.rules or config.service.rules, catalogue=catalogue)
    except RuleError as exc:
        return print_errors(exc, args)
    return config, rec, rules, catalogue


def report_sources(coll: Collector) -> None:
    names = ", ".join(s.name for s in coll.sources) or "none"
    print(f"guardian: sources available: {names}", file=sys.stderr)
    for name, why in sorted(coll.unavailable.items()):
        state = "not configured" if name in coll.unconfigured else "unavailable"
        print(f"guardian: source {name} {state}: {why}", file=sys.stderr)


def print_plan(p: dict[str, Any], indent: str = " " * 9) -> None:
    for line in plan_lines(p, indent):
        print(line)


def plan_lines(p: dict[str, Any], indent: str = " " * 9) -> list[str]:
    """An action's plan (:meth:`Executed.to_dict`) as lines under its rule (``indent``
    deep): the steps, what was refused or skipped, and its outcome when it ran, in words
    (:func:`outcome_lines`)."""
    if p.get("error"):
        return [f"{indent}{p['use']}: ERROR {p['error']}"]
    plan = p["plan"]
    out = [f"{indent}{p['use']}: {plan.get('note') or ''}".rstrip()]
    out += [f"{indent}  - {step['target']}: {step['change']}" for step in plan["steps"]]
    out += [f"{indent}  ! refused: {r}" for r in plan["refused"]]
    out += [f"{indent}  ! skipped: {r}" for r in plan.get("skipped", [])]
    if p.get("outcome"):
        out += outcome_lines(p["outcome"], indent + "  ")
    return out


def outcome_lines(outcome: dict[str, Any], indent: str = "") -> list[str]:
    """What an applied action did, in words: ``=> ok (verified): nothing to do, in
    0.6ms``, then what it reported as ``name=value`` text (``reaped=0 parents=none``),
    a list of records one per line. ``--json`` and the audit keep the exact form."""
    data = dict(outcome.get("data") or {})
    took = data.pop("seconds", None)
    verified = {True: " (verified)", False: " (NOT verified)"}.get(outcome["verified"], "")
    head = f"ok{verified}: {outcome['detail']}" if outcome["ok"] else \
        f"FAILED: {outcome['error']}"
    head = head.rstrip(": ")
    if isinstance(took, int | float) and not isinstance(took, bool):
        head = f"{head}, in {seconds(float(took))}"
    out = [f"{indent}=> {head}"]
    flat = {k: v for k, v in data.items() if not _records(v)}
    if flat:
        out.append(f"{indent}   {_words(flat)}")
    for k, v in data.items():
        if _records(v):
            out += [f"{indent}   {k}: {_words(item)}" for item in v]
    return out


def _records(v: Any) -> bool:
    """A non-empty list of records (``[{"unit": ..., "ok": true}, ...]``)."""
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _words(data: dict[str, Any], prefix: str = "") -> str:
    """``name=value`` text for people: a number rounded, seconds as a duration, yes/no,
    none for nothing, a list comma-separated, a record's fields ``name.field=value``."""
    out = []
    for k, v in sorted(data.items()):
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.append(_words(v, f"{name}.") if v else f"{name}=none")
        elif isinstance(v, list) and any(isinstance(x, dict | list) for x in v):
            out.append(f"{name}={len(v)}")  # the records are in --json and the audit
        elif isinstance(v, list):
            out.append(f"{name}={','.join(_word(x, k) for x in v) or 'none'}")
        else:
            out.append(f"{name}={_word(v, k)}")
    return " ".join(out)


def _word(v: Any, key: str = "") -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return seconds(float(v)) if key in ("seconds", "elapsed") or \
            key.endswith("_seconds") else readable(float(v))
    text = str(v)
    return text if text and not any(c.isspace() or c in '"=,' for c in text) \
        else json.dumps(text, ensure_ascii=False)


LISTEN_ADDRESS_ENV = "GUARDIAN_METRICS_ADDRESS"
LISTEN_PORT_ENV = "GUARDIAN_METRICS_PORT"


def listen_override() -> tuple[str | None, int | None]:
    """Where the service's metrics and /healthz listen, from the environment: the
    DaemonSet sets the node's address there, so `guardian run` listens on it and
    `guardian health` (an exec probe, in the same environment) asks it there. Arguments
    come before these, the config after."""
    address = os.environ.get(LISTEN_ADDRESS_ENV) or None
    port = os.environ.get(LISTEN_PORT_ENV, "")
    return address, int(port) if port.isdigit() and int(port) < 65536 else None


def service_saw(directory: Path) -> tuple[Seen | None, str]:
    """What the running service saw at its last tick, and a line saying so; or None,
    and a line saying why this command evaluates on its own."""
    from guardian.runtime.seen import SEEN_NAME, clock, read
    from guardian.service.instancelock import holder
    pid = holder(directory)
    if pid is None:
        return None, (f"(no guardian service holds {directory}: evaluated by this command "
                      "alone, which remembers nothing: restarts within a window, rates and "
                      "`for` start from now)")
    try:
        seen = read(directory / SEEN_NAME)
    except (OSError, ValueError) as exc:
        why_not = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, (f"(the guardian service{f' (pid {pid})' if pid else ''} runs, but what "
                      f"it saw cannot be read: {why_not}; evaluated by this command alone, "
                      "which remembers nothing)")
    import time
    age = max(time.time() - seen.wall, 0.0)
    return seen, (f"As the guardian service (pid {seen.pid}) sees it (it writes what it "
                  f"sees when that changes, and every minute; last at {clock(seen.wall)}, "
                  f"{format_duration(round(age))} ago):")
