"""Coverage: the rules guardian cannot see.

A rule whose condition has no value (a signal missing because its source is unavailable,
disabled or failing, an input refused or stale, a check that cannot run) is *blind*: it
neither fires nor clears, and what it watches is not seen. Every surface that sums up
health names the blind rules and why (``why``, ``run --once``, the ``STATUS=`` line,
``/healthz``, ``guardian health``, the metrics); a blind rule is never counted healthy.

Each blind rule has a cause (:data:`CAUSES`): ``unconfigured`` (its source has nothing
configured to read: the operator has not opted in, as node-problem-detector runs no monitor
it was not given) and ``disabled`` (the operator disabled its source) are the operator's
choice (:data:`CHOSEN`); ``unavailable`` (its source cannot work on this host),
``failing`` (its source failed, or an input was refused or stale) and ``absent`` (its
source runs and gives no such value now) are not. An alert on blind rules leaves the
chosen ones out; every surface still names them, with their cause.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardian.core.snapshot import Snapshot
from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import CompiledRule, Ruleset
from guardian.model.schema import Severity
from guardian.plugin.registry import Registry
from guardian.runtime.collector import Collector

__all__ = ["CAUSES", "CHOSEN", "Blind", "Sight", "blind_rules", "recorded_sight", "sight_of",
           "summary"]

_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}

#: Why a rule is blind, the most pressing first: a rule blind for more than one reason
#: has the first of its causes in this order.
CAUSES = ("failing", "unavailable", "absent", "disabled", "unconfigured")
#: The causes that are the operator's choice, not a fault: no alert fires for them.
CHOSEN = frozenset({"disabled", "unconfigured"})
# a source's cause in a few words, for a summary ("exposition, probe not configured")
_WORDS = {"failing": "failing", "unavailable": "unavailable", "absent": "without the value",
          "disabled": "disabled", "unconfigured": "not configured"}


@dataclass
class Sight:
    """What a host's sources can give: which source provides each signal, and why a
    source gives nothing at all (nothing configured for it, unavailable on this host, or
    disabled in the config), with that cause (``off_cause``)."""

    provider: dict[str, str] = field(default_factory=dict)
    off: dict[str, str] = field(default_factory=dict)
    absent: str = "reports no such value now"  # a running source without the value
    off_cause: dict[str, str] = field(default_factory=dict)  # unconfigured, unavailable…

    @classmethod
    def of(cls, specs_by_source: Mapping[str, Collection[str]], running: Collection[str],
           unavailable: Mapping[str, str],
           unconfigured: Mapping[str, str] | None = None) -> Sight:
        """From each registered source's signal names, the names of the sources that
        run, why the others do not, and which of those have nothing configured."""
        provider = {sig: src for src, sigs in specs_by_source.items() for sig in sigs}
        lacks = unconfigured or {}
        off, cause = {}, {}
        for src, why in unavailable.items():
            if src in lacks:
                off[src], cause[src] = f"not configured: {lacks[src]}", "unconfigured"
            else:
                off[src], cause[src] = f"unavailable: {why}", "unavailable"
        for src, why in lacks.items():
            if src not in off:
                off[src], cause[src] = f"not configured: {why}", "unconfigured"
        for src in specs_by_source:
            if src not in running and src not in off:
                off[src] = "disabled in the config ([sources] disabled)"
                cause[src] = "disabled"
        return cls(provider, off, off_cause=cause)


def sight_of(collector: Collector, registry: Registry) -> Sight:
    """The sight of ``collector``'s host: its running sources among ``registry``'s."""
    return Sight.of(_signals(registry), {src.name for src in collector.sources},
                    collector.unavailable, collector.unconfigured)


def recorded_sight() -> Sight:
    """Over a recording: which source gives each signal (why one gave none is not
    recorded)."""
    from guardian.plugin.registry import default_registry
    registry = default_registry()
    sight = Sight.of(_signals(registry), registry.sources, {})
    sight.absent = "gave no such value in the recording"
    return sight


def _signals(registry: Registry) -> dict[str, list[str]]:
    return {name: [spec.name for spec in src.specs] for name, src in registry.sources.items()}


@dataclass(frozen=True)
class Blind:
    """One blind rule: what has no value, from which sources, and why (``reasons`` in
    words, ``causes`` as data: one of :data:`CAUSES` per source)."""

    rule: str
    severity: Severity
    missing: tuple[str, ...]  # the signal selections with no value
    sources: tuple[str, ...]  # the sources they come from
    reasons: tuple[str, ...]  # "source systemd unavailable: ...", one per source
    causes_of: tuple[str, ...]  # rules that name it in `caused_by`: it is their cause
    causes: tuple[str, ...] = ()  # per source: unconfigured, disabled, unavailable, ...

    @property
    def root_cause(self) -> bool:
        """Whether other rules name it as their cause."""
        return bool(self.causes_of)

    @property
    def cause(self) -> str:
        """Why it is blind, the most pressing of its sources' causes (:data:`CAUSES`);
        ``absent`` where no source is known (a computed value: a rate needs two
        samples)."""
        return min(self.causes, key=_rank, default="absent")

    @property
    def chosen(self) -> bool:
        """Whether it is blind by the operator's choice only: every source it lacks has
        nothing configured, or is disabled (:data:`CHOSEN`)."""
        return self.cause in CHOSEN

    def line(self) -> str:
        """One line for people: the rule, what it is a cause of, what has no value."""
        role = f"; a cause of {', '.join(self.causes_of)}" if self.causes_of else ""
        what = ", ".join(self.missing) or "a computed value (a rate needs two samples)"
        src = f" (source {', '.join(self.sources)})" if self.sources else ""
        return f"{self.rule} [{self.severity}{role}]: no value for {what}{src}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "missing": list(self.missing),
                "sources": list(self.sources), "reasons": list(self.reasons),
                "causes_of": list(self.causes_of), "causes": list(self.causes),
                "cause": self.cause}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Blind:
        """What :meth:`to_dict` gave (one written before causes were: none)."""
        return cls(d["rule"], d["severity"], tuple(d["missing"]), tuple(d["sources"]),
                   tuple(d["reasons"]), tuple(d["causes_of"]), tuple(d.get("causes", ())))


def blind_rules(ruleset: Ruleset, states: Mapping[str, RuleState], snapshot: Snapshot,
                sight: Sight | None = None) -> list[Blind]:
    """The enabled rules whose condition had no value at the last evaluation
    (``states[...].unknown``): first the causes of rules that are not blind themselves,
    then other causes, then the rest, each by severity and name; those blind only by the
    operator's choice (:attr:`Blind.chosen`) after all the others, in the same order."""
    causes_of: dict[str, list[str]] = {}
    for rule in ruleset.rules:
        if rule.spec.enabled:
            for cause in rule.spec.caused_by:
                causes_of.setdefault(cause, []).append(rule.name)
    out = [_blind(rule, snapshot, sight, tuple(sorted(causes_of.get(rule.name, ()))))
           for rule in ruleset.rules
           if rule.spec.enabled and (st := states.get(rule.name)) is not None and st.unknown]
    names = {b.rule for b in out}

    def rank(b: Blind) -> tuple[bool, int, int, str]:
        # first the blind causes of rules that are seen: the chain from a symptom one can
        # see back to its cause breaks there; then other causes; then the rest
        seen_effects = any(e not in names for e in b.causes_of)
        return (b.chosen, 0 if seen_effects else 1 if b.root_cause else 2,
                _SEVERITY_RANK[b.severity], b.rule)
    return sorted(out, key=rank)


def _blind(rule: CompiledRule, snapshot: Snapshot, sight: Sight | None,
           causes_of: tuple[str, ...]) -> Blind:
    missing: list[str] = []
    sources: list[str] = []
    reasons: list[str] = []
    causes: list[str] = []
    for ref in rule.condition.refs:
        if ref.key in missing or ref.value(snapshot.values) is not None:
            continue
        missing.append(ref.key)
        src = sight.provider.get(ref.name) if sight is not None else None
        if src is None or src in sources:
            continue
        sources.append(src)
        reason, cause = _reason(src, snapshot, sight)
        reasons.append(reason)
        causes.append(cause)
    return Blind(rule.name, rule.spec.severity, tuple(missing), tuple(sources),
                 tuple(reasons), causes_of, tuple(causes))


def _reason(src: str, snapshot: Snapshot, sight: Sight | None) -> tuple[str, str]:
    """Why ``src`` gives no value, in words and as a cause."""
    if sight is not None and src in sight.off:
        return f"source {src} {sight.off[src]}", sight.off_cause.get(src, "unavailable")
    if src in snapshot.errors:
        return f"source {src} failing: {snapshot.errors[src]}", "failing"
    return f"source {src} {sight.absent if sight is not None else Sight.absent}", "absent"


def summary(blind: list[Blind], limit: int = 3) -> str:
    """``9 blind (unit-crashloop, gpu-dcgm-fallen-off-bus, +7): systemd unavailable,
    exposition not configured``: the rules, then the sources they lack by cause, the
    most pressing first; "" when none."""
    if not blind:
        return ""
    names = [b.rule for b in blind[:limit]]
    more = f", +{len(blind) - limit}" if len(blind) > limit else ""
    why = ", ".join(f"{', '.join(srcs)} {_WORDS[cause]}"
                    for cause, srcs in sources_by_cause(blind).items())
    return f"{len(blind)} blind ({', '.join(names)}{more})" + (f": {why}" if why else "")


def sources_by_cause(blind: Collection[Blind]) -> dict[str, list[str]]:
    """The sources the blind rules lack, by cause (in the order of :data:`CAUSES`), each
    list sorted: ``{"unconfigured": ["exposition", "probe"]}``."""
    found: dict[str, set[str]] = {}
    for b in blind:
        for src, cause in zip(b.sources, b.causes, strict=False):
            found.setdefault(cause, set()).add(src)
    return {c: sorted(found[c]) for c in sorted(found, key=_rank)}


def _rank(cause: str) -> int:
    return CAUSES.index(cause) if cause in CAUSES else len(CAUSES)
