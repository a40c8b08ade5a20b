"""`guardian check`: rule files and guardian's config checked offline, every error as
path:line:col."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from guardian.cli.common import json_out, registry_warnings
from guardian.core.defaults import DEFAULT_CONFIG
from guardian.core.diagnostics import Diagnostic, RuleError, meant
from guardian.core.exitcodes import ExitCode
from guardian.model.nodegroups import unmatched
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import preflight
from guardian.runtime.config import Config, dropin_dir, load_config
from guardian.runtime.holds import check_dropin


def cmd_check(args: argparse.Namespace) -> ExitCode:
    """Check rule files and, with --config, guardian's config file and its drop-ins
    (``guardian.toml.d/*.toml``) too: every error of every file, as path:line:col. With
    neither, what the service would load: its config (when it exists, with its drop-ins)
    and that config's rules, as ``nginx -t`` checks nginx's."""
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
    warnings += fleet_role(config)
    rs = None
    try:
        rs = load_rules(args.paths or config.service.rules)
    except RuleError as exc:
        errors.extend(exc.diagnostics)
    if errors:
        return _failed(args, errors, warnings)
    assert rs is not None
    warnings += group_rules(config, [r.name for r in rs.rules])
    errors += preflight.errors(rs, config)
    if errors:
        return _failed(args, errors, warnings)
    unit = getattr(args, "unit", None)
    elsewhere = None if unit else _not_under_the_unit(args.config)
    try:
        box = None if elsewhere else preflight.sandbox(rs, config, Path(unit) if unit else None)
    except OSError as exc:
        return _failed(args, [Diagnostic(unit or "guardian.service", 0, 0,
                                         f"cannot read the unit: {exc.strerror or exc}")],
                       warnings)
    if box is not None:
        warnings += box.warnings
    said_unit = box.unit if box else f"not compared ({elsewhere}; --unit FILE compares)"
    dropins = f" with {len(config.dropins)} drop-in(s) in {dropin_dir(args.config)}" \
        if config.dropins else ""
    files = f"{len(rs.files)} file(s)" + (f" and the config {args.config}{dropins}"
                                          if args.config else "")
    if args.config:
        rs.files[:0] = [args.config, *config.dropins]
    if args.json:
        json_out("check", {"files": rs.files, "rules": [r.name for r in rs.rules],
                           "unit": box.unit if box else None,
                           "unit_not_compared": elsewhere,
                           "dropin": box.dropin() if box else ""}, warnings=warnings)
    else:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        if getattr(args, "dropin", False):
            print(box.dropin() if box else "", end="")
            print(f"ok: {len(rs.rules)} rule(s) in {files}; unit: {said_unit}",
                  file=sys.stderr)
        else:
            print(f"ok: {len(rs.rules)} rule(s) in {files}"
                  + (f"; unit: {said_unit}" if box is None else ""))
    return ExitCode.OK


def fleet_role(config: Config) -> list[str]:
    """The fleet budget's slots (``[fleet]``'s, a ``[[group]]``'s own) whose Leases the
    shipped Role does not grant by name (:func:`guardian.kube.fleet.role_gaps`), in one
    warning at the key that sets the first pool's size."""
    if config.fleet is None:
        return []
    from guardian.kube.fleet import FleetParams, role_gaps, role_warning  # [fleet] is set

    assert isinstance(config.fleet, FleetParams)
    gaps = role_gaps(config.fleet, config.groups)
    if not gaps:
        return []
    i = gaps[0][0]
    if i is None:
        loc: tuple[str | int, ...] = ("fleet", "max_nodes")
    else:
        g = config.groups[i]
        loc = ("group", i, next(k for k in ("max_nodes", "max_percent", "min_healthy")
                                if getattr(g, k) is not None))
    return [str(config.located(loc, role_warning(gaps)))]


def group_rules(config: Config, names: list[str]) -> list[str]:
    """A ``[[group]]``'s ``rules`` entry that matches none of the rules ``names``, located
    and with the name likely meant (as ``guardian pause`` says of a rule it does not know):
    a misspelt name leaves the rule it meant in shadow on the group's nodes."""
    out = []
    for i, group in enumerate(config.groups):
        for k, pattern in unmatched(group, names):
            then = "; only the rules it lists act on its nodes, the others run in shadow " \
                "there" if group.mode == "act" else ""
            out.append(str(config.located(
                ("group", i, "rules", k), f"[[group]] {group.name!r}: rules: {pattern!r} "
                f"matches no loaded rule ({meant(pattern, names, listed=10)}){then}")))
    return out


def _not_under_the_unit(config: str | None) -> str | None:
    """Why the configuration checked does not run under guardian.service, whose sandbox
    is then not compared with what its actions need; None where it does. In a Kubernetes
    pod (the DaemonSet) guardian runs under no unit; on a host, the unit runs the config
    its ExecStart= names (``--config``, else /etc/guardian/guardian.toml), so another
    config file (a DaemonSet's, rendered to be checked here) is not the unit's. Rule files
    checked alone are compared: the unit runs the rules it is given."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "in a Kubernetes pod guardian runs under no systemd unit"
    if config is None:
        return None
    from guardian.core.unitsandbox import parse, service_config
    from guardian.hostio.sandbox import unit_sources

    try:
        sources = unit_sources()
    except OSError:
        return None  # the comparison says what cannot be read
    runs = service_config(parse(sources), str(DEFAULT_CONFIG))
    if Path(config).resolve() == Path(runs).resolve():
        return None
    return f"{sources[0][0]} runs {runs}, not {config}"


def _failed(args: argparse.Namespace, errors: list[Diagnostic], warnings: list[str]
            ) -> ExitCode:
    if args.json:
        json_out("check", ok=False, errors=errors, warnings=warnings)
    else:
        for d in errors:
            print(d)
        print(f"{len(errors)} error(s)", file=sys.stderr)
    return ExitCode.FAILED
