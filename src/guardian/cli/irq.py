"""`guardian irq`: show or restore the IRQ affinities irq.move saved."""

from __future__ import annotations

import argparse
from pathlib import Path

from guardian.actions import irq as irq_action
from guardian.core.exitcodes import ExitCode
from guardian.hostio.host import Host


def cmd_irq(args: argparse.Namespace) -> ExitCode:
    host = Host(Path(args.root))
    state = args.state or irq_action.DEFAULT_STATE
    if args.verb == "show":
        for irq, cpus in sorted(irq_action.load_state(state).items()):
            print(f"irq {irq}: saved smp_affinity_list {cpus}")
        return ExitCode.OK
    results = irq_action.restore(host, state)
    for r in results:
        said = "restored to " + r["new"] if r["ok"] else "FAILED: " + r["error"]
        print(f"irq {r['irq']}: {said}")
    if not results:
        print("nothing to restore")
    return ExitCode.OK if all(r["ok"] for r in results) else ExitCode.FAILED
