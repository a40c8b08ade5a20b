"""`guardian why`: what is wrong, as chains from root cause to symptoms
(:mod:`guardian.runtime.why`), and what guardian cannot see (the blind rules,
:mod:`guardian.runtime.coverage`): on this host now, or at a point of a recording.

Where the service runs (it holds the lock on its state directory), the answer is what the
service saw at its last tick, read from its state directory: a fresh process would count a
unit's restarts from zero and start every ``for`` again."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from guardian.cli.common import (
    host_collector,
    json_out,
    rules_and_recording,
    service_saw,
    warm_snapshot,
)
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.engine.engine import Engine
from guardian.runtime import seen as seen_file
from guardian.runtime import why
from guardian.runtime.coverage import Blind, blind_rules, recorded_sight, sight_of


def cmd_why(args: argparse.Namespace) -> ExitCode:
    """The pending and firing rules as chains, root cause first; then the blind rules."""
    loaded = rules_and_recording(args)
    if isinstance(loaded, ExitCode):
        return loaded
    config, rec, rules, _ = loaded
    note = ""
    blind: list[Blind]
    seen: seen_file.Seen | None = None
    evidence: tuple[Path, dict[str, Any]] | None = None
    if rec is not None:
        from guardian.runtime.replay import replay
        r = replay(rec, rules, parse_duration(args.at) if args.at else None)
        engine, snap, decisions = r.engine, r.last, r.decisions
        if snap is None:
            print("guardian why: no snapshot at or before --at", file=sys.stderr)
            return ExitCode.USAGE
        chain = why.links(engine, snap, decisions)
        now, total = snap.time, len(rules.rules)
        blind = blind_rules(rules, engine.states, snap, recorded_sight())
    else:
        from guardian.runtime.paths import service_paths
        state = Path(args.state) if args.state else service_paths(config).state
        seen, note = service_saw(state.parent)
        evidence = _latest_evidence(state.parent)
        if seen is not None:
            # its `since` are on its clock at `now`; it is later by the report's age
            now = seen.now_at(time.time())
            chain, blind, total = seen.chain, seen.blind, seen.rules
        else:
            from guardian.runtime import state as state_file
            from guardian.runtime.operate import Operations
            engine = Engine(rules)
            if args.state and Path(args.state).exists():
                state_file.load(engine, Path(args.state))
            op = Operations(config, state).before()  # the holds the service sees now
            coll = host_collector(args.root, config)
            snap = warm_snapshot(coll, args.warmup, engine)
            decisions = engine.evaluate(snap, holds=op.holds, wall=op.wall,
                                        window=op.window, approvals=op.approvals)
            # this command applies nothing: what the engine decides now, it would do now
            chain = why.links(engine, snap, decisions, when=lambda _: "now")
            now, total = snap.time, len(rules.rules)
            from guardian.plugin.registry import default_registry
            blind = blind_rules(rules, engine.states, snap, sight_of(coll, default_registry()))
    lately = seen.actions[-5:] if seen is not None else []
    if args.json:
        json_out("why", {"time": now, "recording": args.recording,
                         "service_pid": seen.pid if seen is not None else None,
                         "chain": [link.to_dict() for link in chain],
                         "blind": [b.to_dict() for b in blind], "lately": lately,
                         "evidence": None if evidence is None else
                         {"bundle": str(evidence[0]), **evidence[1]}})
    else:
        if note:
            print(note)
        for line in why.text(chain, now, "acted" if seen is not None else "would act",
                             blind, total):
            print(line)
        if lately:
            print("Its last actions:")
            for entry in lately:
                print(f"  {seen_file.action_line(entry)} (rule {entry['rule']})")
        if evidence is not None:
            print(_evidence_line(*evidence))
    if args.plot:
        from guardian.runtime.plot import plot_why
        try:
            plot_why(chain, now, Path(args.plot))
        except RuntimeError as exc:
            print(f"guardian why: {exc}", file=sys.stderr)
            return ExitCode.FAILED
    return ExitCode.OK


EVIDENCE_RECENT = 24 * 3600.0  # `why` names a bundle taken this recently, no older one


def _latest_evidence(state_dir: Path, now: float | None = None
                     ) -> tuple[Path, dict[str, Any]] | None:
    """The newest evidence bundle under the state directory (``evidence.profile``'s) taken
    within :data:`EVIDENCE_RECENT`; an older one is not what is wrong now."""
    from guardian.hostio.bundles import latest
    now = time.time() if now is None else now
    return latest(state_dir, since=now - EVIDENCE_RECENT)


def _evidence_line(bundle: Path, summary: dict[str, Any], now: float | None = None) -> str:
    """``Evidence (rule, 2026-12-04 22:27, 3m ago, perf, 2s, 84 kernel of 380 samples):
    kubelet: 41 of 84 kernel samples (49%) in mem_cgroup_nr_lru_pages; in
    /var/lib/guardian/evidence/…``."""
    at = summary.get("at")
    now = time.time() if now is None else now
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(at))) + \
            f", {_age(now - float(at))} ago"
    else:
        when = "?"
    seconds = summary.get("seconds")
    window = f", {seconds:g}s" if isinstance(seconds, (int, float)) else ""
    kernel = summary.get("kernel_samples")
    samples = f"{kernel} kernel of {summary.get('samples', 0)} samples" \
        if isinstance(kernel, int) else f"{summary.get('samples', 0)} samples"
    return (f"Evidence ({summary.get('rule', '?')}, {when}, {summary.get('method', '?')}"
            f"{window}, {samples}): {summary.get('line', '')}; in {bundle}")


def _age(seconds: float) -> str:
    """``42s``, ``3m``, ``5h12m``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
