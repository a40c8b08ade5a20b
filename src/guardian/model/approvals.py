"""Approvals: a human's word that lets a rule's gated disruptive actions run (a rule or
ladder step with ``approve = { timeout = "2h" }``). An approval names one rule, who gave
it, why and when; it is for one wait of that rule: only an approval given at or after the
wait began counts (so one left over from an earlier episode, or one already used, never
approves a new wait), and an approval with ``until`` counts no longer than that.

Approvals are data, as holds are: the engine receives them with the holds and judges them
against the wall time it is given. They come from `guardian approve` (a JSON file in the
state directory, root's) and, in a DaemonSet, the node annotation ``guardian.io/approve``
(whoever may annotate the node). Unlike a hold, an approval that cannot be read or parsed
approves nothing: a typo must never let a cordon through.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_APPROVAL_BYTES = 1 << 20  # a source of approvals larger than 1 MiB is a mistake


class ApprovalSpec(BaseModel):
    """An approval as written: JSON in a node annotation or the state directory."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(min_length=1, description="the rule it approves (its name)")
    by: str = Field(min_length=1, description="who approves")
    why: str = Field(min_length=1, description="why")
    at: AwareDatetime = Field(description="when it was given (RFC 3339, with a zone): it "
                              "approves only a wait that began at or before then")
    until: AwareDatetime | None = Field(None, description="when it stops counting "
                                        "(default: never, within the one wait it "
                                        "approves)")

    @field_validator("rule", "by", "why")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


def _utc(t: float) -> str:
    """RFC 3339 in UTC, to the microsecond where the time has a fraction (written back,
    it must say the same time: an approval a moment after a wait began still counts)."""
    when = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if when.microsecond else
                         "%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Approval:
    """One approval of ``rule`` given by ``by`` at ``at`` (Unix time) for ``why``; it
    counts until ``until`` (infinite: no end) and came from ``source``."""

    rule: str
    by: str
    why: str
    at: float
    until: float = math.inf
    source: str = "cli"

    @classmethod
    def from_spec(cls, spec: ApprovalSpec, source: str) -> Approval:
        until = spec.until.timestamp() if spec.until is not None else math.inf
        return cls(spec.rule, spec.by, spec.why, spec.at.timestamp(), until, source)

    def approves(self, rule: str, since: float, wall: float) -> bool:
        """Whether it approves ``rule``'s wait that began at ``since`` (wall clock), judged
        at ``wall``: the same rule, given at or after the wait began, not expired."""
        return self.rule == rule and self.at >= since and self.until > wall

    def describe(self) -> str:
        """``approved by alice at 2026-12-04T10:30:00Z: drained by hand``."""
        return f"approved by {self.by} at {_utc(self.at)}: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "by": self.by, "why": self.why, "at": _utc(self.at),
                **({"until": _utc(self.until)} if math.isfinite(self.until) else {}),
                "source": self.source}


def found(approvals: Iterable[Approval], rule: str, since: float, wall: float
          ) -> Approval | None:
    """The approval of ``rule``'s wait that began at ``since`` (see
    :meth:`Approval.approves`), judged at ``wall``: the first given, so the same
    approvals always name the same one."""
    ok = [a for a in approvals if a.approves(rule, since, wall)]
    return min(ok, key=lambda a: (a.at, a.by, a.why)) if ok else None


def parse_approvals(text: str | bytes, source: str) -> tuple[list[Approval], list[str]]:
    """Approvals from JSON (one object, a list, or ``{"approve": [...]}``), as text or
    UTF-8 bytes, with the problems of what was left out. What cannot be read approves
    nothing: too large, not UTF-8, not JSON, an entry that does not validate."""
    if len(text) > MAX_APPROVAL_BYTES:
        return [], [f"{source}: {len(text)} bytes; at most {MAX_APPROVAL_BYTES} are read"]
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return [], [f"{source}: not JSON: {type(exc).__name__}: {exc}"]
    if isinstance(data, dict) and "approve" in data:
        data = data["approve"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return [], [f"{source}: expected an approval (a JSON object) or a list of them"]
    out: list[Approval] = []
    problems: list[str] = []
    for i, raw in enumerate(data):
        try:
            out.append(Approval.from_spec(ApprovalSpec.model_validate(raw), source))
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'approval'}: {e['msg']}"
                            for e in exc.errors()[:5])
            problems.append(f"{source}: approval {i + 1}: {why}")
        except (RecursionError, ValueError, OverflowError) as exc:
            problems.append(f"{source}: approval {i + 1}: {type(exc).__name__}")
    return out, problems
