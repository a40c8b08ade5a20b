"""`guardian why`: what is wrong, as chains from root cause to symptoms
(:mod:`guardian.runtime.why`), on this host now or at a point of a recording."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guardian.cli.common import host_collector, json_out, rules_and_recording, warm_snapshot
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.engine.engine import Engine


def cmd_why(args: argparse.Namespace) -> ExitCode:
    """The pending and firing rules as chains, root cause first."""
    from guardian.runtime import why
    loaded = rules_and_recording(args)
    if isinstance(loaded, ExitCode):
        return loaded
    config, rec, rules, _ = loaded
    if rec is not None:
        from guardian.runtime.replay import replay
        r = replay(rec, rules, parse_duration(args.at) if args.at else None)
        engine, snap, decisions = r.engine, r.last, r.decisions
        if snap is None:
            print("guardian why: no snapshot at or before --at", file=sys.stderr)
            return ExitCode.USAGE
    else:
        from guardian.runtime import state as state_file
        from guardian.runtime.operate import Operations
        from guardian.runtime.paths import service_paths
        engine = Engine(rules)
        if args.state and Path(args.state).exists():
            state_file.load(engine, Path(args.state))
        # the holds the service sees now (guardian pause's beside the state file)
        Operations(config, Path(args.state) if args.state else service_paths(config).state
                   ).before(engine)
        snap = warm_snapshot(host_collector(args.root, config), args.warmup, engine)
        decisions = engine.evaluate(snap)
    chain = why.links(engine, snap, decisions)
    if args.json:
        json_out("why", {"time": snap.time, "recording": args.recording,
                         "chain": [link.to_dict() for link in chain]})
    else:
        for line in why.text(chain, snap.time, "would act" if rec is not None else "acted"):
            print(line)
    if args.plot:
        from guardian.runtime.plot import plot_why
        try:
            plot_why(chain, snap.time, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian why: {exc}", file=sys.stderr)
            return ExitCode.FAILED
    return ExitCode.OK
