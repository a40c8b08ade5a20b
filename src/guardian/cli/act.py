"""`guardian act`: one action run by hand on this host, outside any rule, through the
executor's plan, apply, verify and audit path and the rails of
:mod:`guardian.runtime.manual`."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any

from pydantic import ValidationError

from guardian.cli.common import (
    cli_config,
    host_collector,
    json_out,
    open_audit,
    print_errors,
    print_plan,
    registry_warnings,
    warm_snapshot,
)
from guardian.core import tomlread
from guardian.core.audit import ForcedRecord, RefusedRecord
from guardian.core.diagnostics import RuleError, unknown_key
from guardian.core.exitcodes import ExitCode
from guardian.plugin.registry import default_registry
from guardian.runtime.executor import Executor
from guardian.runtime.manual import refusals


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


# act's words above the plan: what became of it (Executed.result)
_HEADING = {"planned": "would run (dry run, nothing changed):",
            "refused": "not run (refused, nothing changed):",
            "error": "not run (its plan failed, nothing changed):"}


def cmd_act(args: argparse.Namespace) -> ExitCode:
    registry_warnings()
    reg = default_registry()
    cls = reg.actions.get(args.action)
    if cls is None:
        why = reg.action_failure(args.action)
        hint = difflib.get_close_matches(args.action, list(reg.actions), n=1)
        print(f"guardian act: action {args.action!r} could not be loaded: {why}" if why else
              f"guardian act: unknown action {args.action!r}" + (
                  f"; did you mean {hint[0]!r}?" if hint else
                  f" (known: {', '.join(sorted(reg.actions))})"), file=sys.stderr)
        return ExitCode.USAGE
    try:
        params = cls.Params.model_validate(_parse_set(args.set))
        config = cli_config(args)
    except ValidationError as exc:
        keys = [f.alias or name for name, f in cls.Params.model_fields.items()]
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"]) or "(parameters)"
            msg = f"--set {where}: {err['msg']}"
            if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
                msg = f"--set: {unknown_key(where, keys)}" if keys else \
                    f"--set {where}: it takes no parameters"
            print(f"guardian act: {args.action}: {msg}", file=sys.stderr)
        return ExitCode.USAGE
    except ValueError as exc:
        print(f"guardian act: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except RuleError as exc:
        return print_errors(exc, args)
    coll = host_collector(args.root, config)
    snap = warm_snapshot(coll, args.warmup)
    audit = None
    if args.audit:
        audit = open_audit(args.audit)
        if audit is None:
            return ExitCode.USAGE
    executor = Executor(coll.host, dry_run=args.dry_run, audit=audit)
    from guardian.runtime.evidencebundle import RecentSignals
    signals = RecentSignals(coll, args.warmup)  # an evidence bundle's history: this moment
    signals.add(snap)
    executor.on_result.append(signals.on_result)
    rails = [] if args.dry_run else refusals(config, bool(cls.disruptive))
    if rails and not args.force:
        for why in rails:
            executor.audit_entry(RefusedRecord(manual=True, use=args.action, reason=why))
            print(f"guardian act: {args.action}: refused: {why} (--force overrides, "
                  f"audited)", file=sys.stderr)
        coll.close()
        if args.json:
            json_out("act", {"refused": rails}, ok=False, errors=rails)
        return ExitCode.FAILED
    if rails:
        executor.audit_entry(ForcedRecord(manual=True, use=args.action, overrides=rails))
    ex = executor.act(args.action, cls(params), snap)
    coll.close()
    failed = bool(ex.error or (ex.outcome is not None and not ex.outcome.ok))
    if args.json:
        json_out("act", ex.to_dict(), ok=not failed,
                 errors=[ex.error] if ex.error else [])
    else:
        print(_HEADING.get(ex.result, "ran:"))
        print_plan(ex.to_dict(), "  ")
    return ExitCode.FAILED if failed else ExitCode.OK
