"""The words of a rule's lifecycle: the phases a rule is in and the kinds of decision.

They are ``Literal`` types, so that a misspelled phase or kind is a type error; the
tuples list them at run time (the metrics' labels, a saved state's check)."""

from __future__ import annotations

from typing import Literal, get_args

# Where a rule is between evaluations (Prometheus' states; "resolved" is the decision a
# rule leaving firing makes, after which it is inactive again).
Phase = Literal["inactive", "pending", "firing"]

# What the engine decides about a rule: a phase change, or an action run it asks for
# (see guardian.engine.decision.Decision).
EngineKind = Literal[
    "pending", "firing", "retry", "resolved", "inactive", "suppressed", "held", "escalated",
    "validating", "demoted", "awaiting_approval"]

# Every decision's kind: the engine's, and those made outside it, which only plan or act
# on an operator's word: "manual" (`guardian act`), "explain" (the plan `guardian
# explain` shows), "would-fire" (a dry run's preview of a rule whose condition holds).
DecisionKind = Literal[EngineKind, "manual", "explain", "would-fire"]

PHASES: tuple[Phase, ...] = get_args(Phase)
ENGINE_KINDS: tuple[EngineKind, ...] = get_args(EngineKind)
