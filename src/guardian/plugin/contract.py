"""The two extension seams: sources (read signals) and actions (plan, then apply).

Both register through entry points (``guardian.sources``, ``guardian.actions``); the
built-ins are registered the same way in guardian's own package metadata. An embedding
agent may also call :func:`register_source` / :func:`register_action` in-process.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Generic, cast

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypeVar

from guardian.core.errors import GuardianError
from guardian.core.evidence import values_text as _values_text
from guardian.core.snapshot import Family, SignalSpec, Snapshot
from guardian.hostio.host import Host
from guardian.model.kinds import DecisionKind


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)
C = TypeVar("C", bound=BaseModel)
#: What an action's plan carries to its apply. A plugin that names none gets a plain
#: dict (``Plan`` alone is ``Plan[dict[str, Any]]``); the built-ins name a TypedDict, so a
#: misspelled key is a type error while the payload stays a dict at run time.
D = TypeVar("D", default=dict[str, Any])


def _no_data() -> Any:
    return {}


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

    def unconfigured(self) -> str | None:
        """What the configuration lacks for this source to read anything (``no probes in
        [sources.probe]``), or None when it has something to read. The collector asks it
        before :meth:`unavailable`: a source with nothing configured does not run, and the
        rules over it are blind by the operator's choice (cause ``unconfigured``), not by a
        fault of the host. None by default: a source that does not say is asked only
        whether it is available."""
        return None

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


class SampleError(GuardianError, ValueError):
    """A malformed rule-test sample; ``loc`` is the key path inside the sample table."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


@dataclass(frozen=True)
class Egress:
    """A host an action connects to: ``host`` a name or an address, None where it is not
    known here; ``what`` says what it is (the webhook's URL, the Kubernetes API server)."""

    host: str | None
    what: str


@dataclass(frozen=True)
class SandboxNeeds:
    """What an action, with its parameters, needs from the sandbox of the systemd unit
    that runs it: hosts it connects to, paths it writes, device nodes it opens (paths or
    globs), capabilities (``CAP_SYS_ADMIN``), system calls a ``SystemCallFilter=`` may
    refuse (``perf_event_open``). ``unknown``, when set, says what cannot be
    known ahead (a ``command``'s program): ``guardian check`` then describes the sandbox
    instead. ``guardian check`` compares them with the unit's settings and warns about
    each one the unit denies, with the drop-in that grants it."""

    egress: tuple[Egress, ...] = ()
    writes: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    unknown: str = ""
    syscalls: tuple[str, ...] = ()


@dataclass
class Step:
    """One exact change a plan makes: on what, and what."""

    target: str
    change: str


@dataclass
class Plan(Generic[D]):
    """What an action would do, computed without changing anything.

    ``refused`` says why the plan must not be carried out at all: the executor never
    applies a plan with a refusal. ``skipped`` names targets that were left out (a
    protected parent, a unit guardian never touches) while the rest may go ahead.
    ``data`` (of type ``D``) is what ``apply`` needs from ``plan``; it is never shown
    nor audited."""

    action: str
    rule: str
    steps: list[Step] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    note: str = ""
    data: D = field(default_factory=_no_data)
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
    values: dict[str, Any] = field(default_factory=dict)  # the evidence, rendered for JSON
    kind: DecisionKind = "firing"  # the decision's kind: firing, retry, resolved, manual…
    own_pid: int = field(default_factory=os.getpid)
    evidence: dict[str, Any] = field(default_factory=dict)  # typed: floats and families
    # the rule as notifications describe it (an alert's labels and annotations)
    summary: str = ""
    severity: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # the decision's reason ("needs a human: …" for an escalation)
    units: dict[str, str] = field(default_factory=dict)  # signal -> its unit, for $values

    @property
    def values_text(self) -> str:
        """The evidence as people read it (``ecs.service 711 restarts``): ``$values``."""
        return _values_text(self.values, self.units)

    @property
    def matched(self) -> Family | None:
        """The members of a family condition that matched, keyed by label tuples (which
        core, which GPU, which NIC queue), or None for a scalar condition."""
        m = self.evidence.get("matched")
        return m if isinstance(m, dict) else None

    def message(self, template: str) -> str:
        """A message template of a rule's action with ``$rule``, ``$values`` (the
        evidence as text for people: :attr:`values_text`) and ``$values_json`` (as JSON)
        filled in."""
        return Template(template).safe_substitute(
            rule=self.rule, values=self.values_text,
            values_json=json.dumps(self.values, sort_keys=True, default=str))


class Action(ABC, Generic[P, D]):
    """A remediation. ``plan`` is pure (it may read the host, never change it);
    ``apply`` carries a plan out. Dry-run is ``plan`` without ``apply``. ``P`` is the
    ``Params`` model; ``D``, the plan's payload, is a plain dict unless named.

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

    def sandbox_needs(self) -> SandboxNeeds:
        """What this action needs from the systemd unit's sandbox (see
        :class:`SandboxNeeds`); nothing by default. Called by ``guardian check``, never
        while running: it may read configuration (a kubeconfig), not change anything."""
        return SandboxNeeds()

    @abstractmethod
    def plan(self, ctx: ActionContext) -> Plan[D]: ...

    @abstractmethod
    def apply(self, plan: Plan[D], ctx: ActionContext) -> Outcome: ...
