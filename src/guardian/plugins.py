"""The two extension seams: sources (read signals) and actions (plan, then apply).

Both register through entry points (``guardian.sources``, ``guardian.actions``); the
built-ins are registered the same way in guardian's own package metadata. An embedding
agent may also call :func:`register_source` / :func:`register_action` in-process.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .host import Host
from .snapshot import SignalSpec, Snapshot


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(ABC):
    """Reads one area of the host. ``collect`` only reads; a failure raises, and the
    collector turns it into "no value" for this source's signals plus an error count.
    ``Config`` is the pydantic model of the source's ``[sources.NAME]`` table."""

    name: ClassVar[str]
    specs: ClassVar[tuple[SignalSpec, ...]]
    Config: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, host: Host, config: BaseModel | None = None) -> None:
        self.host = host
        self.config = config if config is not None else self.Config()

    def follow(self, wake: Callable[[str], None]) -> bool:
        """Start watching for events between ticks and call ``wake(reason)`` on one.
        Returns False for sources that only read at ticks (the default)."""
        return False

    def unavailable(self) -> str | None:
        """Why this source cannot work on this host, or None when it can."""
        return None

    @abstractmethod
    def collect(self, now: float) -> dict[str, object]:
        """Signal name -> float, or -> {labels: float} for a family."""

    def close(self) -> None:  # noqa: B027 (optional hook; most sources hold nothing)
        """Release files or sockets held between collections."""


@dataclass
class Step:
    """One exact change a plan makes: on what, and what."""

    target: str
    change: str


@dataclass
class Plan:
    """What an action would do, computed without changing anything."""

    action: str
    rule: str
    steps: list[Step] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("data")
        return d


@dataclass
class Outcome:
    """What ``apply`` did. ``verified`` is None where the effect cannot be checked."""

    ok: bool
    detail: str = ""
    verified: bool | None = None
    error: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ActionContext:
    """What an action may look at when it plans: the rule, the decision, the host."""

    rule: str
    snapshot: Snapshot
    host: Host
    dry_run: bool
    values: dict[str, Any] = field(default_factory=dict)
    kind: str = "firing"  # the decision's kind: firing, retry, resolved, manual
    own_pid: int = field(default_factory=os.getpid)


class Action(ABC):
    """A remediation. ``plan`` is pure (it may read the host, never change it);
    ``apply`` carries a plan out. Dry-run is ``plan`` without ``apply``."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @abstractmethod
    def plan(self, ctx: ActionContext) -> Plan: ...

    @abstractmethod
    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome: ...


class Registry:
    """Sources and actions by name, filled from entry points and in-process calls."""

    def __init__(self) -> None:
        self.sources: dict[str, type[Source]] = {}
        self.actions: dict[str, type[Action]] = {}
        self.load_errors: list[str] = []

    @classmethod
    def from_entry_points(cls) -> Registry:
        reg = cls()
        for group, add in (("guardian.sources", reg.add_source),
                           ("guardian.actions", reg.add_action)):
            for ep in entry_points(group=group):
                try:
                    add(ep.load())
                except Exception as exc:  # a broken plugin must not take guardian down
                    reg.load_errors.append(f"{group} entry point {ep.name!r}: {exc}")
        if not reg.actions and not reg.load_errors:
            reg.load_errors.append(
                "no actions registered: guardian's package metadata is missing "
                "(install it with pip rather than running from the source tree)"
            )
        return reg

    def add_source(self, source: type[Source]) -> None:
        self.sources[source.name] = source

    def add_action(self, action: type[Action]) -> None:
        self.actions[action.name] = action

    def catalogue(self) -> dict[str, SignalSpec]:
        """Every signal some registered source provides, by name."""
        out: dict[str, SignalSpec] = {}
        for src in self.sources.values():
            for spec in src.specs:
                out[spec.name] = spec
        return out


_default: Registry | None = None


def default_registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _default
    if _default is None:
        _default = Registry.from_entry_points()
    return _default


def register_source(source: type[Source]) -> type[Source]:
    """Add a source class to the default registry (usable as a decorator)."""
    default_registry().add_source(source)
    return source


def register_action(action: type[Action]) -> type[Action]:
    """Add an action class to the default registry (usable as a decorator)."""
    default_registry().add_action(action)
    return action
