"""`guardian why`: the pending and firing rules as chains from root cause to symptoms.

Rules name their causes (`caused_by`); the active ones (pending or firing) form a graph,
and each chain is printed root first: what each link shows (its evidence: the values and
the members that matched, such as which unit, which core, which NIC), when it began, what
guardian did or would do there, and what it holds back while a cause is being fixed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardian.core.durations import format_duration
from guardian.core.evidence import evidence_said
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision, decision_values, render_values, signal_units
from guardian.engine.engine import Engine
from guardian.model.kinds import Phase
from guardian.model.ruleset import CompiledRule
from guardian.model.schema import Mode, Severity
from guardian.runtime.coverage import Blind
from guardian.runtime.evidence import compared
from guardian.runtime.status import approval_words, at, climb_words, record_line

ACTIVE: tuple[Phase, ...] = ("pending", "firing")


@dataclass
class Link:
    """One active rule in a chain."""

    rule: str
    summary: str
    phase: Phase
    severity: Severity
    since: float | None  # when its condition began to hold
    evidence: dict[str, Any]
    causes: list[str]  # active rules that cause it
    effects: list[str] = field(default_factory=list)  # active rules it causes
    did: list[str] = field(default_factory=list)  # actions run (or planned)
    held: list[str] = field(default_factory=list)  # what it holds back, and why
    held_at: list[float] = field(default_factory=list)  # when it held them
    mode: Mode = "act"  # "observe": shadow mode, it never applies
    needs_human: bool = False  # it escalated (its limit, its top step, its validation)
    needs_human_why: str = ""  # why: "its 3 steps ran and it still fires"
    paused: str = ""  # the hold that pauses it now
    unseen_causes: list[str] = field(default_factory=list)  # its causes that are blind
    units: dict[str, str] = field(default_factory=dict)  # its signals' units, for people
    climb: str = ""  # a ladder's: where the climb is (step 2 of 3, verifying for 4m more)
    validating: str = ""  # stopped firing, its clean-up waits: where the validation is
    awaiting: str = ""  # its disruptive actions wait for a human's approval: since, how
    record: str = ""  # its record: fired, resolved, after which step, how fast
    compared: list[str] = field(default_factory=list)  # what its condition compared, said

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "summary": self.summary, "phase": self.phase,
                "severity": self.severity, "since": self.since, "evidence": self.evidence,
                "causes": self.causes, "effects": self.effects, "did": self.did,
                "held": self.held, "mode": self.mode, "needs_human": self.needs_human,
                "needs_human_why": self.needs_human_why,
                "paused": self.paused, "unseen_causes": self.unseen_causes,
                "units": self.units, "climb": self.climb, "validating": self.validating,
                "awaiting": self.awaiting,
                "record": self.record, "compared": self.compared}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Link:
        """A link as :meth:`to_dict` wrote it (the service's report)."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def links(engine: Engine, snapshot: Snapshot, decisions: list[Decision],
          when: Callable[[float], str] = at) -> list[Link]:
    """The active rules (and those whose clean-up waits for validation), each chain root
    first (roots in order of when they began); each decision's time said by ``when`` (a
    point of a recording by default; "now" for this command's own evaluation of this
    host, which applies nothing: its climbs say what it would run, and a rule's record
    and whether it needs a human come from the state it started from, as saved)."""
    own = when(snapshot.time) == "now"
    rules = {r.name: r for r in engine.ruleset.rules}
    active = {name for name, st in engine.states.items()
              if (st.phase in ACTIVE or st.validating is not None) and name in rules}
    out: dict[str, Link] = {}
    for name in active:
        rule, st = rules[name], engine.states[name]
        saved = engine.previous(name) if own else st
        out[name] = Link(name, rule.spec.summary, st.phase, rule.spec.severity,
                         st.active_at if st.active_at is not None else st.since,
                         _evidence(engine, rule, snapshot),
                         [c for c in rule.spec.caused_by if c in active],
                         mode="observe" if st.shadow else rule.spec.mode,
                         needs_human=saved.escalated,
                         needs_human_why=saved.escalated_why, paused=st.paused,
                         unseen_causes=[c for c in rule.spec.caused_by
                                        if c in engine.states and engine.states[c].unknown],
                         units=signal_units(rule, engine.ruleset.signals),
                         climb=climb_words(engine, rule, saved, snapshot.time,
                                           decisions if own else None)
                         if rule.steps and st.phase == "firing" else "",
                         validating=st.validation if st.validating is not None else "",
                         awaiting=approval_words(rule, st, snapshot.time),
                         record=record_line(rule, saved),
                         compared=compared(rule, engine.ruleset.signals, snapshot.values,
                                           engine.history,
                                           holds=bool(_result(engine, rule, snapshot))))
    for link in out.values():
        for cause in link.causes:
            out[cause].effects.append(link.rule)
    for d in decisions:
        found = out.get(d.rule)
        if found is None:
            continue
        if d.kind == "held":
            found.held.append(f"{when(d.time)}: {d.reason}")
            found.held_at.append(d.time)
        elif d.actions:
            if d.mode == "observe":
                found.did.append(f"{when(d.time)}: {d.kind}: would run "
                                 "(shadow mode): " + ", ".join(a.use for a in d.actions))
                continue
            found.did.append(f"{when(d.time)}: {d.kind}: "
                             + ", ".join(a.use for a in d.actions))
    return _root_first(out)


def _result(engine: Engine, rule: CompiledRule, snapshot: Snapshot) -> object:
    try:
        return rule.condition.fn(snapshot.values, engine.history)
    except Exception:  # a compiled condition should not raise; evidence is best effort
        return None


def _evidence(engine: Engine, rule: CompiledRule, snapshot: Snapshot) -> dict[str, Any]:
    result = _result(engine, rule, snapshot)
    return render_values(decision_values(rule, snapshot.values, result))


def _root_first(by_name: dict[str, Link]) -> list[Link]:
    ordered: list[Link] = []
    seen: set[str] = set()

    def visit(link: Link) -> None:
        if link.rule in seen:
            return
        if any(c not in seen for c in link.causes):
            return  # placed when its last cause is
        seen.add(link.rule)
        ordered.append(link)
        for effect in sorted(link.effects, key=lambda n: _began(by_name[n])):
            visit(by_name[effect])

    roots = sorted((lk for lk in by_name.values() if not lk.causes), key=_began)
    for root in roots:
        visit(root)
    for link in sorted(by_name.values(), key=_began):  # anything left (should not be)
        if link.rule not in seen:
            seen.add(link.rule)
            ordered.append(link)
    return ordered


def _began(link: Link) -> float:
    return link.since if link.since is not None else float("inf")


def text(chain: list[Link], now: float, acted: str = "acted",
         blind: Sequence[Blind] = (), rules: int | None = None) -> list[str]:
    """The chain for people: root cause first, each link with its evidence; ``acted``
    names what the actions were ("would act" over a recording). The ``blind`` rules
    (of ``rules`` in all) follow, causes first: nothing is "wrong" or "right" there,
    it is not seen; "Nothing is wrong" is said only when no rule is blind."""
    if not chain:
        if not blind:
            return ["Nothing is wrong: no rule is pending or firing."]
        seen = "" if rules is None else f" among the {rules - len(blind)} rules that have values"
        return [f"Nothing is pending or firing{seen}, but {len(blind)} "
                f"rule{'s are' if len(blind) > 1 else ' is'} BLIND: what "
                f"{'they watch' if len(blind) > 1 else 'it watches'} is not seen.",
                *blind_text(blind)]
    lines = _chain_text(chain, now, acted)
    if blind:
        lines += ["", *blind_text(blind)]
    return lines


def blind_text(blind: Sequence[Blind]) -> list[str]:
    """The blind rules, causes first, and why each source gives no value (once each)."""
    lines = [f"Blind ({len(blind)}: no value, neither firing nor clear), causes first:"]
    lines += [f"  {b.line()}" for b in blind]
    reasons = list(dict.fromkeys(r for b in blind for r in b.reasons))
    if reasons:
        lines.append("Why:")
        lines += [f"  {r}" for r in reasons]
    return lines


def _chain_text(chain: list[Link], now: float, acted: str) -> list[str]:
    depth: dict[str, int] = {}
    lines: list[str] = []
    roots = [lk for lk in chain if not lk.causes]
    if roots:
        # a root whose own cause is blind is only the first link guardian can see
        lines.append("Root cause" + ("s" if len(roots) > 1 else "") + ": "
                     + ", ".join(f"{r.rule} ({r.summary})" + (
                         f" — as far as guardian sees: its cause "
                         f"{', '.join(r.unseen_causes)} is BLIND" if r.unseen_causes else "")
                         for r in roots))
    for link in chain:
        depth[link.rule] = 1 + max((depth[c] for c in link.causes if c in depth), default=-1)
        pad = "  " * depth[link.rule]
        began = "" if link.since is None else \
            f", began {format_duration(round(max(now - link.since, 0.0)))} ago"
        arrow = "" if not link.causes else f" ← caused by {', '.join(link.causes)}"
        shadow = ", observe only" if link.mode == "observe" else ""
        phase = "VALIDATING" if link.validating else link.phase.upper()
        lines.append(f"{pad}{'└─ ' if link.causes else ''}{link.rule} "
                     f"[{phase}, {link.severity}{shadow}{began}]{arrow}")
        lines.append(f"{pad}   {link.summary}")
        if link.climb:
            lines.append(f"{pad}   {link.climb}")
        if link.validating:
            lines.append(f"{pad}   {link.validating}")
        if link.awaiting:
            lines.append(f"{pad}   AWAITING APPROVAL: {link.awaiting}")
        if link.needs_human:
            lines.append(f"{pad}   NEEDS A HUMAN: {link.needs_human_why or 'it escalated'}")
        if link.paused:
            lines.append(f"{pad}   held: {link.paused}")
        if link.compared:  # what the condition compared (delta(x, "30m"), not x)
            lines.append(f"{pad}   evidence: {' '.join(link.compared)}")
        else:  # a report from before it was kept
            lines.extend(f"{pad}   evidence: {said.line()}"
                         for said in evidence_said(link.evidence, link.units))
        if link.unseen_causes:
            lines.append(f"{pad}   its cause {', '.join(link.unseen_causes)} is BLIND: "
                         "whether it is active is not seen")
        for did in link.did[-3:]:
            lines.append(f"{pad}   {acted}: {did}")
        for held in link.held[-2:]:
            lines.append(f"{pad}   held: {held}")
        if link.record:
            lines.append(f"{pad}   {link.record}")
    first, last = _span(chain)
    if first is not None and last is not None and first.rule != last.rule:
        assert first.since is not None and last.since is not None
        lines.append(f"{first.rule} began {format_duration(round(last.since - first.since))}"
                     f" before {last.rule}.")
    return lines


def _span(chain: list[Link]) -> tuple[Link | None, Link | None]:
    timed = [lk for lk in chain if lk.since is not None]
    roots = [lk for lk in timed if not lk.causes]
    leaves = [lk for lk in timed if not lk.effects and lk.causes]
    if not roots or not leaves:
        return None, None
    return min(roots, key=_began), max(leaves, key=_began)
