"""`guardian replay`: rules run over a recording, and the decisions they make."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guardian.cli.common import json_out, load_recording, print_errors
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules


def cmd_replay(args: argparse.Namespace) -> ExitCode:
    from guardian.runtime.replay import decisions_json, replay, timeline
    from guardian.runtime.status import for_people
    rec = load_recording(args.recording)
    if rec is None:
        return ExitCode.USAGE
    try:
        rules = load_rules(args.rules or args.rules_default,
                           catalogue={**default_registry().catalogue(), **rec.catalogue})
    except RuleError as exc:
        return print_errors(exc, args)
    r = replay(rec, rules)
    if args.json:
        json_out("replay", {"damage": rec.damage, "snapshots": len(rec.snapshots),
                            "decisions": decisions_json(r),
                            "blind": {n: k for n, k in sorted(r.blind.items())}})
    else:
        h = rec.header
        interval = h.get("interval")
        every = f" every {for_people(float(interval))}" \
            if isinstance(interval, int | float) and not isinstance(interval, bool) else ""
        span = f" over {for_people(rec.snapshots[-1].time)}" if rec.snapshots else ""
        print(f"recording of {h.get('host')} (kernel {h.get('kernel')}), "
              f"{len(rec.snapshots)} snapshots{every}{span}; "
              f"{len(r.decisions)} decision(s)")
        for line in timeline(r):
            print(line)
        for line in r.blind_lines():  # 0 decisions over a rule with no value is no all-clear
            print(line)
    if args.plot:
        from guardian.runtime.plot import plot
        try:
            plot(rec, rules, r, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian replay: {exc}", file=sys.stderr)
            return ExitCode.FAILED
    return ExitCode.FAILED if rec.damage else ExitCode.OK
