"""Holds: one mechanism for pausing remediation and silencing rules (medik8s'
``pauseRequests``, Alertmanager's silences). A hold matches all rules, one rule by name,
or the rules carrying some labels; it always expires, and says why and who. A held rule
still evaluates, plans and audits; its actions wait, and run when the hold ends if the
rule still fires. Holds are data: the engine receives them (see :mod:`guardian.runtime.holds`
for where they come from) and judges expiry against the wall time it is given."""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from guardian.core.durations import MAX_DURATION
from guardian.core.tomlread import TOMLDecodeError, loads


class HoldSpec(BaseModel):
    """A hold as written: in ``[[hold]]`` tables (files, a ConfigMap) or JSON (a node
    annotation, the state directory)."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field("*", min_length=1, description="a rule name, or \"*\" for all rules")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="only rules carrying all these labels")
    until: AwareDatetime = Field(description="when the hold ends (RFC 3339, with a zone): "
                                 "every hold expires")
    reason: str = Field(min_length=1)
    author: str = Field(min_length=1)

    @field_validator("reason", "author")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("until")
    @classmethod
    def _bounded(cls, v: dt.datetime) -> dt.datetime:
        if v.timestamp() > time.time() + MAX_DURATION:
            raise ValueError("more than ten years ahead: a hold must really expire")
        return v


@dataclass(frozen=True)
class Hold:
    """One hold in force until ``until`` (Unix time), from ``source``. A ``latched`` hold
    (a tripped correlated-failure breaker, :mod:`guardian.kube.breaker`) holds only the
    rule's disruptive actions, has no end (``until`` is infinite) and lasts until a human
    releases it; its ``reason`` says it all."""

    until: float
    reason: str
    author: str
    rule: str = "*"
    labels: tuple[tuple[str, str], ...] = ()
    source: str = "cli"
    latched: bool = False

    @classmethod
    def from_spec(cls, spec: HoldSpec, source: str) -> Hold:
        return cls(spec.until.timestamp(), spec.reason, spec.author, spec.rule,
                   tuple(sorted(spec.labels.items())), source)

    def matches(self, rule: str, labels: Mapping[str, str]) -> bool:
        if self.rule not in ("*", rule):
            return False
        return all(labels.get(k) == v for k, v in self.labels)

    @property
    def matcher(self) -> str:
        """The matcher as text: ``*``, ``name``, ``*{team="net"}``."""
        sel = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return self.rule + (f"{{{sel}}}" if sel else "")

    @property
    def broken(self) -> bool:
        """A source that could not be read or parsed: it holds every rule until fixed."""
        return math.isinf(self.until) and not self.latched

    @property
    def until_text(self) -> str:
        if self.latched:
            return "released"
        if self.broken:
            return "fixed"
        return dt.datetime.fromtimestamp(self.until, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

    def describe(self) -> str:
        """``paused by alice until 2026-12-04T10:00:00Z: kernel rollout``; a latched
        hold's reason as it is."""
        if self.latched:
            return self.reason
        return f"paused by {self.author} until {self.until_text}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "labels": dict(self.labels), "until": self.until_text,
                "reason": self.reason, "author": self.author, "source": self.source,
                **({"latched": True} if self.latched else {})}


def broken_hold(source: str, error: str) -> Hold:
    """The hold that stands for a source of holds that exists but cannot be read or
    parsed, in whole or in one entry: it holds every rule until the source is fixed (a
    malformed pause must not lift itself)."""
    return Hold(math.inf, f"hold source unreadable: {error}", "guardian", "*", (), source)


def in_force(holds: list[Hold], wall: float) -> list[Hold]:
    """The holds that have not expired at Unix time ``wall``."""
    return [h for h in holds if h.until > wall]


MAX_HOLD_BYTES = 1 << 20  # a hold source larger than 1 MiB is a mistake (or an attack)


def parse_holds(text: str | bytes, source: str, fmt: str = "toml"
                ) -> tuple[list[Hold], list[str]]:
    """Holds from ``[[hold]]`` tables (``fmt="toml"``) or JSON (one object, a list, or
    ``{"hold": [...]}``), as text or UTF-8 bytes; with the problems of the entries left
    out. Each problem also yields a :func:`broken_hold` among the holds, so nothing
    malformed lifts a hold: not UTF-8, over :data:`MAX_HOLD_BYTES`, nested too deeply to
    parse, or any other error of the parser is a problem, never an exception."""
    def broken(why: str) -> tuple[list[Hold], list[str]]:
        why = f"{source}: {why}"
        return [broken_hold(source, why)], [why]

    if len(text) > MAX_HOLD_BYTES:
        return broken(f"{len(text)} bytes; at most {MAX_HOLD_BYTES} are read")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return broken(f"not UTF-8: {exc}")
    try:
        data: Any = loads(text) if fmt == "toml" else json.loads(text)
    except (TOMLDecodeError, ValueError) as exc:
        return broken(f"not {fmt.upper()}: {exc}")
    except (RecursionError, MemoryError):
        return broken(f"not {fmt.upper()}: nested too deeply to read")
    except Exception as exc:  # a parser's own failure must not lift a hold either
        return broken(f"not {fmt.upper()}: {type(exc).__name__}: {exc}")
    if isinstance(data, dict) and "hold" in data:
        data = data["hold"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        why = f"{source}: expected [[hold]] tables"
        return [broken_hold(source, why)], [why]
    out: list[Hold] = []
    problems: list[str] = []
    for i, raw in enumerate(data):
        try:
            out.append(Hold.from_spec(HoldSpec.model_validate(raw), source))
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'hold'}: {e['msg']}"
                            for e in exc.errors()[:5])
            problems.append(f"{source}: hold {i + 1}: {why}")
            out.append(broken_hold(source, problems[-1]))
        except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
            problems.append(f"{source}: hold {i + 1}: {type(exc).__name__}")
            out.append(broken_hold(source, problems[-1]))
    return out, problems
