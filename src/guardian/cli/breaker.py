"""`guardian breaker` (the tripped correlated-failure breakers, [fleet.breaker]) and
`guardian breaker release RULE --why TEXT`: the human's release of a latch, recorded as a
GuardianBreakerReleased Event with who and why (guardian.kube.breaker)."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import os

from guardian.cli.common import cli_config, json_out, print_errors
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode


def _params(args: argparse.Namespace) -> object | ExitCode:
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    fleet = config.fleet
    if fleet is None or getattr(fleet, "breaker", None) is None:
        print("guardian breaker: [fleet.breaker] is not configured (--config)")
        return ExitCode.USAGE
    return fleet


def cmd_breaker(args: argparse.Namespace) -> ExitCode:
    """List the latches, or release one (``release``)."""
    from guardian.kube.actions import API_ERRORS, _why
    from guardian.kube.breaker import latches, release
    from guardian.kube.client import make_client
    from guardian.kube.fleet import FleetParams

    fleet = _params(args)
    if isinstance(fleet, ExitCode):
        return fleet
    assert isinstance(fleet, FleetParams)
    try:
        if args.action == "release":
            if not args.rule or not (args.why or "").strip():
                print("guardian breaker release: give RULE and --why TEXT")
                return ExitCode.USAGE
            author = args.author or os.environ.get("SUDO_USER") or getpass.getuser()
            gone = release(fleet, args.rule, args.why, author, args.group)
            if args.json:
                json_out("breaker", [{"rule": x.rule, "group": x.group, "lease": x.name}
                                     for x in gone], ok=bool(gone))
            for x in gone:
                print(f"released {x.rule} in {x.group} (lease {x.name}): its disruptive "
                      f"actions run again where it still fires")
            if not gone:
                print(f"no breaker is tripped on {args.rule}"
                      + (f" in {args.group}" if args.group else ""))
            return ExitCode.OK if gone else ExitCode.FAILED
        found = latches(make_client(fleet), fleet.namespace)
    except API_ERRORS as exc:
        print(f"guardian breaker: {_why(exc)}")
        return ExitCode.FAILED
    rows = [x for _, x in found if x is not None]
    if args.json:
        json_out("breaker", [{"rule": x.rule, "group": x.group, "lease": x.name,
                              "tripped_by": x.holder, "at": x.at, "why": x.why}
                             for x in rows])
        return ExitCode.OK
    if not rows:
        print("No breaker is tripped.")
    for x in rows:
        at = dt.datetime.fromtimestamp(x.at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(f"{x.rule} in {x.group}: tripped {at} by node {x.holder}: {x.why} "
              f"(release: guardian breaker release {x.rule} --why TEXT)")
    return ExitCode.OK
