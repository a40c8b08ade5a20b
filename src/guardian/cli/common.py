"""Helpers the guardian commands share."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guardian.core.defaults import DEFAULT_CONFIG, DEFAULT_RULES
from guardian.core.diagnostics import Diagnostic, RuleError
from guardian.core.durations import parse_duration
from guardian.core.snapshot import Snapshot
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.plugin.registry import default_registry
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config, load_config

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


def print_errors(exc: RuleError, args: argparse.Namespace | None = None) -> int:
    """Report errors that stop a command: one per line on stderr, or the JSON shape with
    ``--json``."""
    if args is not None and getattr(args, "json", False):
        json_out(args.command, ok=False, errors=exc.diagnostics)
        return 1
    for d in exc.diagnostics:
        print(d, file=sys.stderr)
    return 1


def host_collector(root: str, config: Config) -> Collector:
    return Collector.from_registry(Host(Path(root)), default_registry(), config)


def warm_snapshot(coll: Collector, warmup: str, engine: Engine | None = None) -> Snapshot:
    """A snapshot taken ``warmup`` after a first one, so per-core percentages and rates
    have values; the first feeds the engine's history (never its decisions) when one is
    given."""
    first = coll.collect(time.monotonic())
    if engine is not None:
        engine.observe(first)
    time.sleep(parse_duration(warmup))
    return coll.collect(time.monotonic())


def report_sources(coll: Collector) -> None:
    names = ", ".join(s.name for s in coll.sources) or "none"
    print(f"guardian: sources available: {names}", file=sys.stderr)
    for name, why in sorted(coll.unavailable.items()):
        print(f"guardian: source {name} unavailable: {why}", file=sys.stderr)


def print_plan(p: dict[str, Any]) -> None:
    if p.get("error"):
        print(f"         {p['use']}: ERROR {p['error']}")
        return
    plan = p["plan"]
    print(f"         {p['use']}: {plan.get('note') or ''}".rstrip())
    for step in plan["steps"]:
        print(f"           - {step['target']}: {step['change']}")
    for r in plan["refused"]:
        print(f"           ! refused: {r}")
    for r in plan.get("skipped", []):
        print(f"           ! skipped: {r}")
    out = p.get("outcome")
    if out:
        verified = {True: " (verified)", False: " (NOT verified)"}.get(out["verified"], "")
        head = f"ok{verified}: {out['detail']}" if out["ok"] else f"FAILED: {out['error']}"
        print(f"           => {head}")
        if out["data"]:
            print(f"              {json.dumps(out['data'], sort_keys=True, default=str)}")


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
