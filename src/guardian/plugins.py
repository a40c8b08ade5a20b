"""The two extension seams: sources (read signals) and actions (plan, then apply).

Both register through entry points (``guardian.sources``, ``guardian.actions``); the
built-ins are registered the same way in guardian's own package metadata. An embedding
agent may also call :func:`register_source` / :func:`register_action` in-process.
"""

from __future__ import annotations

import json
import os
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import asdict, dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr

from .host import Host
from .snapshot import Family, SignalSpec, Snapshot


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)
C = TypeVar("C", bound=BaseModel)


class Source(ABC, Generic[C]):
    """Reads one area of the host. ``collect`` only reads; a failure raises, and the
    collector turns it into "no value" for this source's signals plus an error count.
    ``Config`` is the pydantic model of the source's ``[sources.NAME]`` table."""

    name: ClassVar[str]
    specs: ClassVar[tuple[SignalSpec, ...]]
    Config: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, host: Host, config: C | None = None) -> None:
        self.host = host
        # ``Config`` is the model of C (a ClassVar cannot name a type variable)
        self.config: C = config if config is not None else cast(C, self.Config())

    def follow(self, wake: Callable[[str], None]) -> bool:
        """Start watching for events between ticks and call ``wake(reason)`` on one.
        Returns False for sources that only read at ticks (the default)."""
        return False

    def unavailable(self) -> str | None:
        """Why this source cannot work on this host, or None when it can."""
        return None

    def keep_state(self, directory: Path) -> None:
        """The service's state directory, where a source may keep what must outlive the
        process (the kernel log's read position); not called for one-off runs."""

    @classmethod
    def config_warnings(cls, config: Any) -> list[str]:
        """Risks in a configuration that loads (``guardian check`` prints them); none by
        default."""
        return []

    #: A source that sets this checks samples in rule-test files: each ``[[NAME]]``
    #: table (NAME being the source's name) goes to :meth:`check_sample`.
    offers_samples: ClassVar[bool] = False

    def check_sample(self, sample: dict[str, Any]) -> str | None:
        """Check one sample of input against this source as configured (e.g. a kernel-log
        line and the patterns it must match): None when it passes, else what differs.
        Raise :class:`SampleError` for a malformed sample."""
        raise SampleError((), f"source {self.name!r} has no samples to check")

    @classmethod
    def sample_schema(cls) -> dict[str, Any]:
        """The JSON Schema of one sample table (for editors), when ``offers_samples``."""
        return {"type": "object"}

    @abstractmethod
    def collect(self, now: float) -> dict[str, object]:
        """Signal name -> float, or -> {labels: float} for a family."""

    def faults(self) -> list[str]:
        """What the last ``collect`` could not read while the rest of it stands (a script
        check that timed out, a probe's endpoint gone): those members have no value, and
        the collection counts as an error of the source. None by default."""
        return []

    def close(self) -> None:
        """Release files or sockets held between collections."""


class SampleError(ValueError):
    """A malformed rule-test sample; ``loc`` is the key path inside the sample table."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


@dataclass
class Step:
    """One exact change a plan makes: on what, and what."""

    target: str
    change: str


@dataclass
class Plan:
    """What an action would do, computed without changing anything.

    ``refused`` says why the plan must not be carried out at all: the executor never
    applies a plan with a refusal. ``skipped`` names targets that were left out (a
    protected parent, a unit guardian never touches) while the rest may go ahead."""

    action: str
    rule: str
    steps: list[Step] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

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
    values: dict[str, Any] = field(default_factory=dict)  # the evidence, rendered as text
    kind: str = "firing"  # the decision's kind: firing, retry, resolved, manual
    own_pid: int = field(default_factory=os.getpid)
    evidence: dict[str, Any] = field(default_factory=dict)  # typed: floats and families
    # the rule as notifications describe it (an alert's labels and annotations)
    summary: str = ""
    severity: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # the decision's reason ("needs a human: …" for an escalation)

    @property
    def matched(self) -> Family | None:
        """The members of a family condition that matched, keyed by label tuples (which
        core, which GPU, which NIC queue), or None for a scalar condition."""
        m = self.evidence.get("matched")
        return m if isinstance(m, dict) else None

    def message(self, template: str) -> str:
        """A message template of a rule's action with ``$rule`` and ``$values`` (the
        evidence as JSON) filled in."""
        return Template(template).safe_substitute(
            rule=self.rule, values=json.dumps(self.values, sort_keys=True, default=str))


class Action(ABC, Generic[P]):
    """A remediation. ``plan`` is pure (it may read the host, never change it);
    ``apply`` carries a plan out. Dry-run is ``plan`` without ``apply``.

    ``disruptive`` says whether running it takes capacity from the fleet (cordon, evict,
    stop a unit); only disruptive actions need a slot of the fleet budget. An action that
    does not say is taken to be disruptive. Parameters that are secrets are typed
    ``SecretStr`` (or marked ``Field(json_schema_extra={"secret": True})``) in ``Params``:
    they are redacted wherever guardian shows or stores parameters."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    disruptive: ClassVar[bool] = True

    def __init__(self, params: P) -> None:
        self.params: P = params

    @abstractmethod
    def plan(self, ctx: ActionContext) -> Plan: ...

    @abstractmethod
    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome: ...


class RegistryError(Exception):
    """Two plugins claim one name, or a plugin's entry point and class disagree. Nothing
    is replaced silently: guardian refuses to start until one of them is removed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class Actions(MutableMapping[str, "type[Action[Any]]"]):
    """Action classes by name. An entry point's class is imported when the action is
    first looked up (a rule or a command uses it), not when guardian starts: listing,
    ``in`` and ``len`` import nothing. A class that fails to import, or whose ``name``
    disagrees with its entry point, is left out; :attr:`failed` says why."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Action[Any]]] = {}
        self._deferred: dict[str, tuple[EntryPoint, Who]] = {}  # name -> (entry point, who)
        self.failed: dict[str, str] = {}

    def defer(self, name: str, ep: EntryPoint, who: Who) -> None:
        self._deferred[name] = (ep, who)

    def deferred(self, name: str) -> EntryPoint | None:
        got = self._deferred.get(name)
        return got[0] if got else None

    def __getitem__(self, name: str) -> type[Action[Any]]:
        cls = self._classes.get(name)
        if cls is not None:
            return cls
        ep, who = self._deferred.pop(name)  # KeyError: no such action
        try:
            loaded = ep.load()
        except Exception as exc:  # a broken plugin must not take guardian down
            self.failed[name] = f"{who} failed to import: {exc}"
            raise KeyError(name) from None
        declared = getattr(loaded, "name", None)
        if declared != name:
            self.failed[name] = _misnamed(who, "guardian.actions", name, declared)
            raise KeyError(name)
        self._classes[name] = loaded
        return cast("type[Action[Any]]", loaded)

    def __setitem__(self, name: str, cls: type[Action[Any]]) -> None:
        self._deferred.pop(name, None)
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        if self._classes.pop(name, None) is None:
            del self._deferred[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes or name in self._deferred

    def __iter__(self) -> Iterator[str]:
        return iter([*self._classes, *self._deferred])

    def __len__(self) -> int:
        return len(self._classes) + len(self._deferred)

    def copy(self) -> Actions:
        out = Actions()
        out._classes, out._deferred = dict(self._classes), dict(self._deferred)
        out.failed = dict(self.failed)
        return out


class Registry:
    """Sources and actions by name, filled from entry points and in-process calls.

    A name is taken once: an action, a source or a signal that a second plugin also claims
    is a :class:`RegistryError` naming both providers (third-party plugins prefix their
    names with their own, e.g. ``acme.drain``)."""

    def __init__(self) -> None:
        self.sources: dict[str, type[Source[Any]]] = {}
        self.actions: MutableMapping[str, type[Action[Any]]] = Actions()
        self.load_errors: list[str] = []
        self.providers: dict[tuple[str, str], Who] = {}  # (kind, name) -> who provides it

    @classmethod
    def from_entry_points(cls) -> Registry:
        """Every installed plugin: sources imported (their signals make the catalogue),
        actions listed and imported on first use. Raises :class:`RegistryError` when two
        distributions claim one name."""
        reg = cls()
        problems: list[str] = []
        for ep in entry_points(group="guardian.sources"):
            who = _Provider(ep)
            try:
                loaded = ep.load()
            except Exception as exc:  # a broken plugin must not take guardian down
                reg.load_errors.append(f"guardian.sources entry point {ep.name!r}: {exc}")
                continue
            declared = getattr(loaded, "name", None)
            if declared != ep.name:
                problems.append(_misnamed(who, "guardian.sources", ep.name, declared))
                continue
            try:
                reg.add_source(loaded, who)
            except RegistryError as exc:
                problems.extend(exc.problems)
        actions = Actions()
        for ep in entry_points(group="guardian.actions"):
            who = _Provider(ep)
            first = actions.deferred(ep.name)
            if first is not None and first.value == ep.value:
                continue  # one distribution seen twice on the path
            try:
                reg._claim("action", ep.name, who, False)
            except RegistryError as exc:
                problems.extend(exc.problems)
                continue
            actions.defer(ep.name, ep, who)
        reg.actions = actions
        if problems:
            raise RegistryError(problems)
        if not reg.actions and not reg.load_errors:
            reg.load_errors.append(
                "no actions registered: guardian's package metadata is missing "
                "(install it with pip rather than running from the source tree)"
            )
        return reg

    def _claim(self, kind: str, name: str, who: Who, same: bool) -> None:
        first = self.providers.get((kind, name))
        if first is not None and not same:
            raise RegistryError([f"{kind} {name!r} is provided twice: by {first} and by {who}"])
        self.providers[(kind, name)] = first or who

    def add_source(self, source: type[Source[Any]], provider: Who = "") -> None:
        """Register a source class. Raises :class:`RegistryError` when its name or one of
        its signals is already provided by another class."""
        who = provider or _class_path(source)
        problems = []
        same = self.sources.get(source.name) is source
        try:
            self._claim("source", source.name, who, same)
        except RegistryError as exc:
            problems.extend(exc.problems)
        for spec in source.specs:
            try:
                self._claim("signal", spec.name, _with(who, f" (source {source.name!r})"), same)
            except RegistryError as exc:
                problems.extend(exc.problems)
        if problems:
            raise RegistryError(problems)
        self.sources[source.name] = source

    def add_action(self, action: type[Action[Any]], provider: Who = "") -> None:
        """Register an action class. Raises :class:`RegistryError` when its name is already
        provided by another class."""
        who = provider or _class_path(action)
        same = action.name in self.actions and self.actions.get(action.name) is action
        self._claim("action", action.name, who, same)
        self.actions[action.name] = action

    def action_failure(self, name: str) -> str | None:
        """Why a listed action could not be loaded, if it could not."""
        return self.actions.failed.get(name) if isinstance(self.actions, Actions) else None

    def copy(self) -> Registry:
        """An independent registry with the same plugins (to add test plugins to)."""
        reg = Registry()
        reg.sources = dict(self.sources)
        reg.actions = self.actions.copy() if isinstance(self.actions, Actions) \
            else dict(self.actions)
        reg.providers, reg.load_errors = dict(self.providers), list(self.load_errors)
        return reg

    def catalogue(self) -> dict[str, SignalSpec]:
        """Every signal some registered source provides, by name."""
        out: dict[str, SignalSpec] = {}
        for src in self.sources.values():
            for spec in src.specs:
                out[spec.name] = spec
        return out


def _misnamed(who: Who, group: str, name: str, declared: object) -> str:
    return (f"{who}: entry point {name!r} in {group} loads a class named {declared!r}; "
            "the two must agree")


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class _Provider:
    """Who provides a plugin, named when a message needs it: naming a distribution
    parses its metadata, a cost every command would otherwise pay per entry point."""

    def __init__(self, ep: EntryPoint, suffix: str = "") -> None:
        self.ep, self.suffix = ep, suffix

    def __str__(self) -> str:
        return _provider(self.ep) + self.suffix


Who = str | _Provider


def _with(who: Who, suffix: str) -> Who:
    return _Provider(who.ep, who.suffix + suffix) if isinstance(who, _Provider) \
        else who + suffix


def _provider(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = f"distribution {dist.name!r}" if dist is not None else "an unknown distribution"
    return f"{name} ({ep.value})"


def secret_fields(model: type[BaseModel]) -> frozenset[str]:
    """The parameter names of ``model`` that hold secrets: typed ``SecretStr`` or
    ``SecretBytes`` (also inside a list or dict), or marked ``json_schema_extra=
    {"secret": True}``. By field name and by alias."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if extra.get("secret") or _holds_secret(f.annotation):
            out.add(name)
            if f.alias:
                out.add(f.alias)
    return frozenset(out)


def _holds_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_holds_secret(a) for a in typing.get_args(annotation))


REDACTED = "<redacted>"


def redact(model: type[BaseModel], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the values of secret fields replaced (a table keeps its keys)."""
    secret = secret_fields(model)
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k in secret:
            v = dict.fromkeys(v, REDACTED) if isinstance(v, dict) else REDACTED
        out[k] = v
    return out


_default: Registry | None = None


def default_registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _default
    if _default is None:
        _default = Registry.from_entry_points()
    return _default


def register_source(source: type[Source[Any]]) -> type[Source[Any]]:
    """Add a source class to the default registry (usable as a decorator)."""
    default_registry().add_source(source)
    return source


def register_action(action: type[Action[Any]]) -> type[Action[Any]]:
    """Add an action class to the default registry (usable as a decorator)."""
    default_registry().add_action(action)
    return action
