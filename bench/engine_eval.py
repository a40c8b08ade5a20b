"""Evaluate 1,000 rules over a snapshot of 10,000 signals with history, against a
hand-written Python function computing the same conditions in the same run."""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from guardian import Engine, Snapshot
from guardian.plugins import Registry, default_registry
from guardian.policy.loader import load_text
from guardian.snapshot import SignalSpec, labels_of

N_SIGNALS = 10_000
N_RULES = 1_000
N_CORES = 64
TICK = 15.0
WARM_TICKS = 40  # history: 10 minutes of 15 s ticks


def _catalogue() -> dict[str, SignalSpec]:
    cat = {f"bench.s{i}": SignalSpec(f"bench.s{i}", "synthetic") for i in range(N_SIGNALS)}
    for f in range(10):
        cat[f"bench.core{f}"] = SignalSpec(f"bench.core{f}", "synthetic", labels=("cpu",))
    return cat


def _rules(rng: random.Random) -> tuple[str, list[tuple[int, str, str, float]]]:
    """The rule file text and the same conditions as data for the hand-written peer."""
    specs: list[tuple[int, str, str, float]] = []
    parts = ["version = 1\n"]
    for i in range(N_RULES):
        kind = i % 4
        a, b = f"bench.s{rng.randrange(N_SIGNALS)}", f"bench.s{rng.randrange(N_SIGNALS)}"
        k = float(rng.randrange(100))
        if kind == 0:
            when = f"{a} > {k:g}"
        elif kind == 1:
            when = f"{a} > {k:g} and {a} > 2 * {b}"
        elif kind == 2:
            a = f"bench.s{i % 50}"  # time functions on a few counters (history bounded)
            when = f'rate({a}, "5m") > {k:g}'
        else:
            a = f"bench.core{i % 10}"
            when = f"max({a}) > {k:g}"
        specs.append((kind, a, b, k))
        parts.append(f'[[rule]]\nname = "r{i}"\nsummary = "s"\nwhen = \'{when}\'\n'
                     f'for = "1m"\n')
    return "".join(parts), specs


def _snapshot(t: float, rng: random.Random) -> dict[str, Any]:
    values: dict[str, Any] = {f"bench.s{i}": rng.random() * 100 for i in range(N_SIGNALS)}
    for i in range(50):
        values[f"bench.s{i}"] = t * (i + 1)  # counters
    for f in range(10):
        values[f"bench.core{f}"] = {labels_of({"cpu": str(c)}): rng.random() * 100
                                    for c in range(N_CORES)}
    return values


def _hand_written(specs: list[tuple[int, str, str, float]]) -> Callable[[float, dict[str, Any]],
                                                                         list[bool | None]]:
    """What a careful engineer would write by hand: the same conditions, None-aware."""
    hist: dict[str, deque[tuple[float, float]]] = {}

    def evaluate(now: float, values: dict[str, Any]) -> list[bool | None]:
        for i in range(50):
            name = f"bench.s{i}"
            dq = hist.setdefault(name, deque())
            dq.append((now, values[name]))
            while dq[0][0] < now - 300:
                dq.popleft()
        out: list[bool | None] = []
        for kind, a, b, k in specs:
            if kind == 0:
                v = values.get(a)
                out.append(None if v is None else v > k)
            elif kind == 1:
                v, w = values.get(a), values.get(b)
                out.append(None if v is None or w is None else v > k and v > 2 * w)
            elif kind == 2:
                s = [p for p in hist.get(a, ()) if p[0] >= now - 300]
                if len(s) < 2:
                    out.append(None)
                    continue
                inc = sum(c - p if c >= p else c for (_, p), (_, c) in pairwise(s))
                out.append(inc / (s[-1][0] - s[0][0]) > k)
            else:
                fam = values.get(a)
                out.append(None if fam is None else max(fam.values()) > k)
        return out

    return evaluate


def run() -> list[dict[str, Any]]:
    rng = random.Random(42)
    reg = Registry()
    reg.actions = dict(default_registry().actions)
    text, specs = _rules(rng)
    t0 = time.perf_counter()
    ruleset = load_text(text, "bench.toml", registry=reg, catalogue=_catalogue())
    load_s = time.perf_counter() - t0
    engine = Engine(ruleset)
    hand = _hand_written(specs)
    snaps = [_snapshot(i * TICK, rng) for i in range(WARM_TICKS + 60)]
    for i in range(WARM_TICKS):
        engine.evaluate(Snapshot(i * TICK, snaps[i]))
        hand(i * TICK, snaps[i])
    eng_times, hand_times = [], []
    for i in range(WARM_TICKS, len(snaps)):  # interleaved: both see the same machine noise
        t = i * TICK
        s0 = time.perf_counter()
        engine.evaluate(Snapshot(t, snaps[i]))
        s1 = time.perf_counter()
        hand(t, snaps[i])
        s2 = time.perf_counter()
        eng_times.append(s1 - s0)
        hand_times.append(s2 - s1)
    eng_times.sort()
    hand_times.sort()
    eng = eng_times[len(eng_times) // 2] * 1000
    peer = hand_times[len(hand_times) // 2] * 1000
    return [
        {"name": "engine.evaluate_1000_rules_10000_signals", "value": round(eng, 3),
         "unit": "ms", "peer": "hand-written python", "peer_value": round(peer, 3),
         "ratio": round(eng / peer, 2)},
        {"name": "rules.load_and_compile_1000", "value": round(load_s * 1000, 1), "unit": "ms",
         "peer": "", "peer_value": None, "ratio": None},
    ]
