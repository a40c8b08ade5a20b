"""`guardian breaker` (the tripped correlated-failure breakers, [fleet.breaker]) and
`guardian breaker release RULE --why TEXT`: the human's release of a latch, recorded as a
GuardianBreakerReleased Event with who and why (guardian.kube.breaker).

Exit codes: 0 listed (tripped or not) or released; 1 ``release`` found no latch of RULE;
2 a usage error (no RULE or --why, no ``[fleet.breaker]``); 69 the API could not be asked
(no credentials reach it, it did not answer or it refused: the answer is unknown); 78 the
config does not load. With ``--json`` every outcome is one JSON document."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import os
import sys
from typing import TYPE_CHECKING, Any

from guardian.cli.common import cli_config, json_out, print_errors
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode

if TYPE_CHECKING:
    from guardian.kube.breaker import Latch
    from guardian.kube.fleet import FleetParams


def _fail(args: argparse.Namespace, code: ExitCode, message: str) -> ExitCode:
    """Say why the command has no answer: one line on stderr, or the JSON shape."""
    if args.json:
        json_out("breaker", None, ok=False, errors=[message])
    else:
        verb = "breaker release" if args.action == "release" else "breaker"
        print(f"guardian {verb}: {message}", file=sys.stderr)
    return code


def _params(args: argparse.Namespace) -> FleetParams | ExitCode:
    from guardian.kube.fleet import FleetParams
    try:
        config = cli_config(args)
    except RuleError as exc:
        print_errors(exc, args)
        return ExitCode.CONFIG
    fleet = config.fleet
    if not isinstance(fleet, FleetParams) or fleet.breaker is None:
        return _fail(args, ExitCode.USAGE, "[fleet.breaker] is not configured (--config)")
    return fleet


def _record(x: Latch) -> dict[str, Any]:
    return {"rule": x.rule, "group": x.group, "lease": x.name, "tripped_by": x.holder,
            "at": x.at, "why": x.why, "problem": x.problem}


def cmd_breaker(args: argparse.Namespace) -> ExitCode:
    """List the latches, or release one (``release``)."""
    from guardian.kube.actions import API_ERRORS, _why
    from guardian.kube.breaker import latches, release
    from guardian.kube.client import make_client, no_credentials

    if args.action == "release" and (not args.rule or not (args.why or "").strip()):
        return _fail(args, ExitCode.USAGE, "give RULE and --why TEXT")
    fleet = _params(args)
    if isinstance(fleet, ExitCode):
        return fleet
    try:
        client = make_client(fleet)
    except Exception as exc:  # lightkube's ConfigError, a kubeconfig that does not parse
        return _fail(args, ExitCode.UNAVAILABLE, no_credentials(exc))
    ns = fleet.namespace
    try:
        if args.action == "release":
            author = args.author or os.environ.get("SUDO_USER") or getpass.getuser()
            gone = release(fleet, args.rule, args.why, author, args.group, client=client)
            found = [] if gone else latches(client, ns)
        else:
            found = latches(client, ns)
    except API_ERRORS as exc:
        return _fail(args, ExitCode.UNAVAILABLE, f"{_why(exc)} (namespace {ns})")
    unreadable = [x for _, x in found if x.problem is not None]
    if args.action == "release":
        return _released(args, gone, len(unreadable))
    rows = [x for _, x in found]
    if args.json:
        json_out("breaker", [_record(x) for x in rows])
        return ExitCode.OK
    if not rows:
        print("No breaker is tripped.")
    for x in rows:
        if x.problem is not None:
            print(f"lease {x.name}: {x.hold(ns).reason}")
            continue
        at = dt.datetime.fromtimestamp(x.at, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ") if x.at is not None else "at an unknown time"
        print(f"{x.rule} in {x.group}: tripped {at} by node {x.holder}: {x.why} "
              f"(release: guardian breaker release {x.rule} --why TEXT)")
    return ExitCode.OK


def _released(args: argparse.Namespace, gone: list[Latch], unreadable: int) -> ExitCode:
    """What ``release`` did: the latches released, else that none was tripped (exit 1)."""
    if not gone:
        where = f" in {args.group}" if args.group else ""
        note = f"; {unreadable} latch(es) cannot be read: guardian breaker shows them" \
            if unreadable else ""
        message = f"no breaker is tripped on {args.rule}{where}{note}"
        if args.json:
            json_out("breaker", [], ok=False, errors=[message])
        else:
            print(message)
        return ExitCode.FAILED
    if args.json:
        json_out("breaker", [_record(x) for x in gone])
        return ExitCode.OK
    for x in gone:
        print(f"released {x.rule} in {x.group} (lease {x.name}): its disruptive actions "
              f"run again where it still fires")
    return ExitCode.OK
