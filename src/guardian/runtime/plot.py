"""`guardian replay --plot`: a panel per rule with a value in the recording, its signals
over time, the thresholds its condition compares against and its firing windows shaded.
Needs matplotlib (``pip install node-guardian[plot]``)."""

from __future__ import annotations

import ast
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardian.core.snapshot import format_key
from guardian.engine.decision import Decision
from guardian.model.ruleset import CompiledRule, Ruleset
from guardian.policy.expr import parse_condition
from guardian.runtime.recording import Recording
from guardian.runtime.replay import Replay
from guardian.runtime.why import Link

MAX_LINES = 8  # lines per panel (the members that made the rule fire are drawn even past it)


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

FIRED = {"pending", "firing", "retry", "held", "suppressed", "escalated"}  # "it holds"
PANEL_IN = 1.9  # inches of figure height per rule panel
DPI = 90


@dataclass
class Panel:
    """One rule's lines: each member its condition selects, and those that made it fire."""

    rule: CompiledRule
    series: dict[str, list[float | None]]
    fired: set[str]  # the members that matched at a pending or firing decision

    def drawn(self, cap: int = MAX_LINES) -> tuple[list[str], int]:
        """The members to draw: those that made the rule fire, always, then the others by
        their largest value up to ``cap`` lines in all; and how many are not drawn."""
        fired = sorted(k for k in self.fired if k in self.series)
        rest = sorted((k for k in self.series if k not in self.fired),
                      key=lambda k: (-_peak(self.series[k]), k))
        keys = fired + rest[:max(cap - len(fired), 0)]
        return keys, len(self.series) - len(keys)


def _peak(values: list[float | None]) -> float:
    finite = [x for x in values if x is not None and not math.isnan(x)]
    return max(finite) if finite else -math.inf


def _isolated(values: list[float | None]) -> bool:
    """True when some value has no value on either side: a line alone would not show it."""
    padded = [None, *values, None]
    return any(x is not None and padded[i - 1] is None and padded[i + 1] is None
               for i, x in enumerate(padded) if 0 < i < len(padded) - 1)


def panels(rec: Recording, ruleset: Ruleset, r: Replay) -> tuple[list[Panel], list[str]]:
    """A panel per enabled rule with a value at some snapshot, in the ruleset's order, and
    the names of the enabled rules with no value the whole recording."""
    fired_at: dict[str, list[Decision]] = {}
    for d in r.decisions:
        if d.kind in FIRED:
            fired_at.setdefault(d.rule, []).append(d)
    out, empty = [], []
    for rule in ruleset.rules:
        if not rule.spec.enabled:
            continue
        series: dict[str, list[float | None]] = {}
        of_ref: dict[str, set[str]] = {}
        for ref in rule.condition.refs:  # only the members the condition selects
            for i, snap in enumerate(rec.snapshots):
                v = ref.value(snap.values)
                members = v if isinstance(v, dict) else ({(): v} if v is not None else {})
                for labels, x in members.items():
                    key = format_key(ref.name, labels)
                    series.setdefault(key, [None] * len(rec.snapshots))[i] = x
                    of_ref.setdefault(ref.key, set()).add(key)
        if not any(x is not None for xs in series.values() for x in xs):
            empty.append(rule.name)
            continue
        fired: set[str] = set()
        for d in fired_at.get(rule.name, []):
            for ref in rule.condition.refs:
                v = d.evidence.get(ref.key)
                if isinstance(v, dict):  # a family: only the members that matched
                    fired.update(format_key(ref.name, labels) for labels in v)
                elif v is not None:  # one value: the ref selects one member
                    fired.update(of_ref.get(ref.key, ()))
        out.append(Panel(rule, series, fired))
    return out, empty


def no_panel(empty: list[str], r: Replay) -> str:
    """The rules without a panel, and why, as the note above the panels says it: those
    blind the whole time (no value in any snapshot, as ``replay`` says them) apart from
    those that had a value but nothing to draw (what they select matched no member)."""
    blind = [n for n in empty if r.ticks and r.blind.get(n, 0) == r.ticks]
    nothing = [n for n in empty if n not in blind]
    parts = []
    if nothing:
        parts.append(f"{_rules(nothing)} with nothing to draw (what they select matched no "
                     f"member in any snapshot): {', '.join(nothing)}")
    if blind:
        parts.append(f"{_rules(blind) if not nothing else len(blind)} blind the whole time "
                     f"(no value in any snapshot): {', '.join(blind)}")
    return f"no panel for {'; '.join(parts)}" if parts else ""


def _rules(names: list[str]) -> str:
    return f"{len(names)} rule{'s' if len(names) != 1 else ''}"


def plot(rec: Recording, ruleset: Ruleset, r: Replay, out: Path) -> None:
    """The replay's figure (see :func:`figure`) as a PNG at ``out``."""
    plt = _pyplot()
    fig = figure(rec, ruleset, r)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def figure(rec: Recording, ruleset: Ruleset, r: Replay) -> Any:
    """A panel per rule with data: its members (those that made it fire always drawn and
    labelled "matched", the others by largest value, up to MAX_LINES), its thresholds, its
    firing windows shaded.
    The rules without a panel are named in a line above the panels (:func:`no_panel`)."""
    plt = _pyplot()
    from matplotlib.lines import Line2D
    shown, empty = panels(rec, ruleset, r)
    note = textwrap.fill(no_panel(empty, r), width=170, break_on_hyphens=False,
                         break_long_words=False)
    note_in = 0.16 * (note.count("\n") + 1) + 0.1 if note else 0.0
    fig, axes = plt.subplots(max(len(shown), 1), 1, squeeze=False, sharex=True,
                             figsize=(11, PANEL_IN * max(len(shown), 1) + 0.5 + note_in),
                             layout="constrained")
    if note:
        fig.suptitle(note, fontsize=7, x=0.01, ha="left", ma="left")
    times = [s.time / 60 for s in rec.snapshots]
    end = times[-1] if times else 0
    if not shown:
        axes[0, 0].set_axis_off()
        axes[0, 0].text(0.5, 0.5, "no rule has a value in this recording", ha="center")
    for ax, p in zip(axes[:, 0], shown, strict=False):
        keys, left_out = p.drawn()
        for key in keys:
            xs = p.series[key]
            ax.plot(times, [math.nan if x is None else x for x in xs],
                    label=key + ("  (matched)" if key in p.fired else ""),
                    linewidth=1.6 if key in p.fired else 1, zorder=3 if key in p.fired else 2,
                    marker="." if _isolated(xs) else None, markersize=4)
        for th in thresholds(p.rule.spec.when):
            ax.axhline(th, color="red", linestyle="--", linewidth=0.8)
        for start, stop in r.firing.get(p.rule.name, []):
            ax.axvspan(start / 60, (stop / 60) if stop is not None else end, color="orange",
                       alpha=0.25)
        title = f"{p.rule.name}: {' '.join(p.rule.spec.when.split())}"
        ax.set_title(textwrap.shorten(title, 140, placeholder=" …"), fontsize=8, loc="left")
        handles, labels = ax.get_legend_handles_labels()
        if left_out:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(f"… {left_out} more not drawn")
        ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.005, 1),
                  borderaxespad=0)
    axes[-1, 0].set_xlabel("minutes since the recording started")
    return fig
