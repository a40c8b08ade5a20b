"""`guardian signals`: every signal of this host, with value, unit, help and source."""

from __future__ import annotations

import argparse
from typing import Any

from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    print_errors,
    registry_warnings,
    report_sources,
    warm_snapshot,
)
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.core.snapshot import format_labels
from guardian.plugin.registry import default_registry


def cmd_signals(args: argparse.Namespace) -> ExitCode:
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
        return ExitCode.OK
    for row in rows:
        v = row["value"]
        shown = ("-" if v is None else
                 ", ".join(f"{k}={x}" for k, x in list(v.items())[:8])
                 + (" …" if len(v) > 8 else "") if isinstance(v, dict) else str(v))
        print(f"{row['name']:<36} {shown:<40} {row['unit']:<10} {row['help']}")
    return ExitCode.OK


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {format_labels(labels): val for labels, val in sorted(v.items())}
    return v
