"""`guardian check`, `test` and `schema`: rules offline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import Config, load_config
from ..diagnostics import RuleError
from ..plugins import default_registry
from ..policy.loader import TEST_SUFFIX, load_rules
from ..policy.ruletest import run_test_file
from .common import (
    cli_config,
    print_errors,
    registry_warnings,
)


def cmd_check(args: argparse.Namespace) -> int:
    """Check rule files and, with --config, guardian's config file too: every error of
    every file, as path:line:col."""
    registry_warnings()
    errors = []
    warnings: list[str] = []
    config = Config()
    if args.config:
        try:
            config = load_config(args.config, default_registry())
        except RuleError as exc:
            errors.extend(exc.diagnostics)
    for name, cls in sorted(default_registry().sources.items()):
        where = f"{args.config}: [sources.{name}]" if name in config.sources else \
            f"source {name} (defaults)"
        warnings += [f"{where}: {w}" for w in
                     cls.config_warnings(config.sources.get(name) or cls.Config())]
    try:
        rs = load_rules(args.paths)
    except RuleError as exc:
        errors.extend(exc.diagnostics)
    if errors:
        if args.json:
            print(json.dumps({"ok": False, "errors": [
                {"path": d.path, "line": d.line, "col": d.col, "message": d.message}
                for d in errors]}, indent=2))
        else:
            for d in errors:
                print(d)
            print(f"{len(errors)} error(s)", file=sys.stderr)
        return 1
    if args.config:
        rs.files.insert(0, args.config)
    if args.json:
        print(json.dumps({"ok": True, "files": rs.files, "warnings": warnings,
                          "rules": [r.name for r in rs.rules]}, indent=2))
    else:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(f"ok: {len(rs.rules)} rule(s) in {len(rs.files)} file(s)")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    registry_warnings()
    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*" + TEST_SUFFIX)) if p.is_dir() else [p])
    if not files:
        print("guardian test: no test files found", file=sys.stderr)
        return 1
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc)
    results = [run_test_file(f, source_configs=config.sources) for f in files]
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


def cmd_schema(args: argparse.Namespace) -> int:
    from ..schemas import schema_for
    print(json.dumps(schema_for(args.kind), indent=2))
    return 0
