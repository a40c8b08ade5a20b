"""`guardian test`: rule unit tests (``*.test.toml``), like ``promtool test rules``.

Kernel-log samples (``[[kmsg]]``) are checked with the config the service reads: --config,
else the default config file when it exists, each with its drop-ins
(``guardian.toml.d/*.toml``: an import's patterns are there).

Named ``rule_tests``, not ``test``, so that no test collector mistakes it for tests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guardian.cli.common import cli_config, json_out, print_errors, registry_warnings
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.policy.loader import TEST_SUFFIX
from guardian.policy.ruletest import run_test_file


def cmd_test(args: argparse.Namespace) -> ExitCode:
    registry_warnings()
    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*" + TEST_SUFFIX)) if p.is_dir() else [p])
    if not files:
        if args.json:
            json_out("test", ok=False, errors=["no test files found"])
        else:
            print("guardian test: no test files found", file=sys.stderr)
        return ExitCode.FAILED
    try:  # as the service reads it: the default file, its drop-ins
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    results = [run_test_file(f, source_configs=config.sources) for f in files]
    n_tests = sum(r.tests for r in results)
    n_fail = sum(len(r.failures) for r in results) + sum(len(r.errors) for r in results)
    if args.json:
        json_out("test", [{
            "path": r.path, "tests": r.tests, "ok": r.ok,
            "failures": [{"test": f.test, "at": f.at, "message": f.message}
                         for f in r.failures]} for r in results],
            ok=n_fail == 0, errors=[d for r in results for d in r.errors])
    else:
        for r in results:
            print(f"{'PASS' if r.ok else 'FAIL'} {r.path} ({r.tests} test(s))")
            for d in r.errors:
                print(f"  {d}")
            for f in r.failures:
                print(f"  test {f.test!r} at {f.at}:\n{f.message}")
        print(f"{n_tests} test(s), {n_fail} problem(s)")
    return ExitCode.OK if n_fail == 0 else ExitCode.FAILED
