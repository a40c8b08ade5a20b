"""A third-party plugin written against guardian's public API: one source and one action,
typed through ``Source[Config]`` and ``Action[Params]`` (``mypy --strict`` needs no casts).

To ship it, declare the entry points in the plugin's own package metadata::

    [project.entry-points."guardian.sources"]
    "acme.queue" = "acme_plugin:QueueSource"
    [project.entry-points."guardian.actions"]
    "acme.note" = "acme_plugin:NoteAction"
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from guardian import Action, ActionContext, Outcome, Plan, SignalSpec, Source, Step, labels_of


class QueueConfig(BaseModel):
    """``[sources."acme.queue"]`` in guardian.toml."""

    model_config = ConfigDict(extra="forbid")

    spool: str = Field("/var/spool/acme", description="one sub-directory per queue")


class QueueSource(Source[QueueConfig]):
    """Files waiting in each queue of a spool directory (under the host root)."""

    name: ClassVar[str] = "acme.queue"
    Config = QueueConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("acme.queue_depth", "files waiting per queue", "files", labels=("queue",)),
    )

    def unavailable(self) -> str | None:
        return None if self._spool().is_dir() else f"no spool at {self._spool()}"

    def collect(self, now: float) -> dict[str, object]:
        depth = {labels_of({"queue": q.name}): float(sum(1 for _ in q.iterdir()))
                 for q in sorted(self._spool().iterdir()) if q.is_dir()}
        return {"acme.queue_depth": depth}

    def _spool(self) -> Path:
        return self.host.root / self.config.spool.lstrip("/")


class NoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="file the note is appended to")
    token: SecretStr = Field(description="redacted wherever guardian shows parameters")


class NoteAction(Action[NoteParams]):
    """Append one line per firing to a file: plans the line, applies it, reads it back."""

    name: ClassVar[str] = "acme.note"
    Params = NoteParams
    disruptive: ClassVar[bool] = False

    def plan(self, ctx: ActionContext) -> Plan:
        line = f"{ctx.rule} {ctx.kind}"
        return Plan(self.name, ctx.rule, [Step(self.params.path, f"append {line!r}")],
                    data={"line": line})

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        path = Path(self.params.path)
        with path.open("a", encoding="utf-8") as f:
            f.write(plan.data["line"] + "\n")
        written = path.read_text(encoding="utf-8").splitlines()[-1] == plan.data["line"]
        return Outcome(ok=True, verified=written, detail=f"noted in {path}")
