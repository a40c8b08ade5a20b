"""`guardian check`, `test` and `schema`: rules offline."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from guardian.cli.common import cli_config, json_out, print_errors, registry_warnings
from guardian.core.defaults import DEFAULT_CONFIG
from guardian.core.diagnostics import Diagnostic, RuleError
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import TEST_SUFFIX, load_rules
from guardian.policy.ruletest import run_test_file
from guardian.runtime.config import Config, load_config
from guardian.runtime.holds import check_dropin


def cmd_check(args: argparse.Namespace) -> int:
    """Check rule files and, with --config, guardian's config file too: every error of
    every file, as path:line:col. With neither, what the service would load: its config
    (when it exists) and that config's rules, as ``nginx -t`` checks nginx's."""
    registry_warnings()
    errors = []
    warnings: list[str] = []
    config = Config()
    if not args.paths and not args.config and DEFAULT_CONFIG.exists():
        args.config = str(DEFAULT_CONFIG)
    if args.config:
        try:
            config = load_config(args.config, default_registry())
        except RuleError as exc:
            errors.extend(exc.diagnostics)
        else:  # a drop-in hold file the service cannot parse holds every rule
            if config.holds.dropin:
                errors.extend(check_dropin(Path(config.holds.dropin)))
    for name, cls in sorted(default_registry().sources.items()):
        where = f"{args.config}: [sources.{name}]" if name in config.sources else \
            f"source {name} (defaults)"
        warnings += [f"{where}: {w}" for w in
                     cls.config_warnings(config.sources.get(name) or cls.Config())]
    rs = None
    try:
        rs = load_rules(args.paths or config.service.rules)
    except RuleError as exc:
        errors.extend(exc.diagnostics)
    if errors:
        return _failed(args, errors, warnings)
    assert rs is not None
    errors += [Diagnostic(r.path, r.line, 1, why) for r, why in _reboot_errors(rs, config)]
    errors += [Diagnostic(r.path, r.line, 1, why) for r, why in _drain_errors(rs, config)]
    if errors:
        return _failed(args, errors, warnings)
    warnings += sandbox_warnings(rs)
    if args.config:
        rs.files.insert(0, args.config)
    if args.json:
        json_out("check", {"files": rs.files, "rules": [r.name for r in rs.rules]},
                 warnings=warnings)
    else:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(f"ok: {len(rs.rules)} rule(s) in {len(rs.files)} file(s)")
    return 0


def _failed(args: argparse.Namespace, errors: list[Diagnostic], warnings: list[str]
            ) -> int:
    if args.json:
        json_out("check", ok=False, errors=errors, warnings=warnings)
    else:
        for d in errors:
            print(d)
        print(f"{len(errors)} error(s)", file=sys.stderr)
    return 1


def _reboot_errors(rs: Any, config: Config) -> list[tuple[Any, str]]:
    """A reboot on a Kubernetes node (in-cluster credentials or a kubelet here) without
    the fleet budget could take every node down at once."""
    if not any(a.use == "node.reboot" for r in rs.rules for a in [*r.actions, *r.escalate]):
        return []
    from guardian.actions.reboot import check

    kubernetes = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or \
        Path("/var/lib/kubelet").is_dir()
    return check(rs.rules, config.fleet is not None, kubernetes)


def _drain_errors(rs: Any, config: Config) -> list[tuple[Any, str]]:
    """A drain that may outlast the executor's apply_timeout."""
    drains = any(a.use == "kube.drain" or (a.use == "node.reboot" and a.params.get("drain"))
                 for r in rs.rules for a in [*r.actions, *r.escalate])
    if not drains:
        return []
    from guardian.kube.drain import check

    return check(rs.rules, config.service.apply_timeout)


def cmd_test(args: argparse.Namespace) -> int:
    registry_warnings()
    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*" + TEST_SUFFIX)) if p.is_dir() else [p])
    if not files:
        if args.json:
            json_out("test", ok=False, errors=["no test files found"])
        else:
            print("guardian test: no test files found", file=sys.stderr)
        return 1
    try:
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
    return 0 if n_fail == 0 else 1


def cmd_schema(args: argparse.Namespace) -> int:
    from guardian.runtime.schemas import schema_for
    print(json.dumps(schema_for(args.kind), indent=2))
    return 0


def sandbox_warnings(rs: Ruleset) -> list[str]:
    """Actions that the systemd unit's sandbox would make fail when the unit runs them:
    a dry run, outside the unit, cannot show it."""
    from guardian.actions.memcg import MemcgRelease, sandbox_problem
    from guardian.hostio.sandbox import unit_texts
    unit = unit_texts()
    out = []
    for rule in rs.rules:
        for bound in [*rule.actions, *rule.escalate]:
            if isinstance(bound.action, MemcgRelease):
                why = sandbox_problem(bound.action.params, unit)
                if why:
                    out.append(f"{rule.path}:{rule.line}: rule {rule.spec.name!r}: "
                               f"memcg.release: {why}")
    return out
