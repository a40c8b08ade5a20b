"""`guardian replay --plot`: each rule's signals over the recording, with the thresholds
its condition compares against and its firing windows shaded. Needs matplotlib
(``pip install node-guardian[plot]``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from guardian.core.snapshot import format_labels
from guardian.model.ruleset import Ruleset
from guardian.policy.expr import parse_condition
from guardian.runtime.recording import Recording
from guardian.runtime.replay import Replay
from guardian.runtime.why import Link

MAX_LINES = 8  # members of a family drawn per signal


def thresholds(when: str) -> list[float]:
    """Numbers the condition compares something against."""
    tree = parse_condition(when)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and isinstance(side.value, int | float) \
                        and not isinstance(side.value, bool):
                    out.append(float(side.value))
    return sorted(set(out))


def _pyplot() -> Any:
    try:
        import logging

        import matplotlib
        matplotlib.use("Agg")
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("plotting needs matplotlib: pip install 'node-guardian[plot]'") from exc
    return plt


def plot_why(chain: list[Link], now: float, out: Path) -> None:
    """The links of `guardian why` on one time axis, root cause at the top: a bar from
    when each began to now, its phase as the colour, an x where guardian held actions."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.6 * max(len(chain), 1) + 1.2))
    for row, link in enumerate(chain):
        start = (link.since if link.since is not None else now) / 60
        ax.barh(row, now / 60 - start, left=start, height=0.5,
                color="tab:red" if link.phase == "firing" else "tab:orange")
        causes = f"  ← {', '.join(link.causes)}" if link.causes else "  (root cause)"
        ax.text(start, row - 0.35, link.rule + causes, fontsize=8)
        for t in link.held_at:
            ax.plot(t / 60, row, marker="x", color="black")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the recording started (or since guardian started)")
    ax.set_title("guardian why: root cause at the top, symptoms below", fontsize=9,
                 loc="left")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def plot(rec: Recording, ruleset: Ruleset, r: Replay, out: Path) -> None:
    plt = _pyplot()
    rules = [rule for rule in ruleset.rules if rule.spec.enabled]
    fig, axes = plt.subplots(len(rules), 1, figsize=(11, 2.4 * len(rules)), sharex=True,
                             squeeze=False)
    times = [s.time / 60 for s in rec.snapshots]
    for ax, rule in zip(axes[:, 0], rules, strict=True):
        series: dict[str, list[float | None]] = {}
        for ref in rule.condition.refs:  # only the members the condition selects
            for i, snap in enumerate(rec.snapshots):
                v = ref.value(snap.values)
                members = v if isinstance(v, dict) else ({(): v} if v is not None else {})
                for labels, x in members.items():
                    key = ref.name + (format_labels(labels) if labels else "")
                    series.setdefault(key, [None] * len(rec.snapshots))[i] = x
        if series:
            for key in sorted(series)[:MAX_LINES]:
                ax.plot(times, [float("nan") if x is None else x for x in series[key]],
                        label=key, linewidth=1)
        for th in thresholds(rule.spec.when):
            ax.axhline(th, color="red", linestyle="--", linewidth=0.8)
        end = times[-1] if times else 0
        for start, stop in r.firing.get(rule.name, []):
            ax.axvspan(start / 60, (stop / 60) if stop is not None else end, color="orange",
                       alpha=0.25)
        ax.set_title(f"{rule.name}: {' '.join(rule.spec.when.split())}", fontsize=8,
                     loc="left")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left")
    axes[-1, 0].set_xlabel("minutes since the recording started")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
