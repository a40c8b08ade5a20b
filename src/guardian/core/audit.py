"""The audit log: one JSON object per line, appended and fsynced before the next action,
so a crash never loses what was decided or done.

Rotation: before each record the log checks that its path still names the file it holds
open. When logrotate (the packages' /etc/logrotate.d/node-guardian) has renamed it
away, the next record opens a new file at the path, so a plain rename rotation works
without a signal, a postrotate or copytruncate. Nothing guardian needs at run time is read back
from this log (the state, the restart records and the IRQ originals live in the state
directory), so a rotation loses nothing it depends on."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

#: The errors of a disk (full, over quota, read-only, failing), not of a setting.
DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


class AuditLog:
    """Append-only JSON-lines file. Opened without following a symlink (a link planted
    where the log goes must not aim root's writes elsewhere); a torn last line, left by a
    crash or a full disk, is closed before anything is appended, so no record is ever
    glued onto it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # a late outcome is written from its worker's thread
        self._fd = -1
        self._torn = False
        #: why the log could not be opened yet: a disk fault (full, read-only, failing)
        #: at start is no reason not to run; nothing is written, so nothing is applied,
        #: until a write can open it. Any other error (a link planted there) raises.
        self.unopened: OSError | None = None
        try:
            self._open()
        except OSError as exc:
            if exc.errno not in DISK_FAULTS:
                raise
            self.unopened = exc

    def try_open(self) -> OSError | None:
        """Open the log if a disk fault kept it closed; the fault, or None once open."""
        with self._lock:
            if self._fd < 0:
                try:
                    self._open()
                except OSError as exc:
                    self.unopened = exc
        return self.unopened

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = open_append(self.path)
        self._torn = _ends_torn(self._fd)
        self.unopened = None

    def _follow_rotation(self) -> None:
        """Open the file at the path again if it is no longer the one held open (renamed
        away by a rotation, or removed)."""
        held = os.fstat(self._fd)
        try:
            now = os.stat(self.path, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return
        except FileNotFoundError:
            pass
        fd = open_append(self.path)  # raises (a link planted there): no record is written
        os.close(self._fd)
        self._fd = fd
        self._torn = _ends_torn(fd)

    def write(self, record: dict[str, Any]) -> None:
        """Append and fsync one record (an :data:`AuditRecord`'s ``entry``). Raises OSError
        (ENOSPC, EROFS, EIO): then nothing that depends on the record may happen."""
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._fd < 0:
                self._open()  # raises while the disk still cannot take it
            else:
                self._follow_rotation()
            data = (b"\n" if self._torn else b"") + line.encode()
            self._torn = True  # until the whole line is down
            while data:
                n = os.write(self._fd, data)
                data = data[n:]
            os.fsync(self._fd)
            self._torn = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Record(BaseModel):
    """One audit record: ``type`` names its kind, ``ts`` (the wall time it was written) is
    stamped by the writer. Keys with a default are written only where given."""

    model_config = ConfigDict(extra="forbid")
    type: str

    def entry(self, ts: float) -> dict[str, Any]:
        """The record as it is written: its type, its time and the keys given."""
        return {**self.model_dump(exclude_unset=True), "type": self.type,
                "ts": ts}


class DecisionRecord(_Record):
    """What the engine decided (or ``guardian act``, ``manual``), before anything is
    done about it."""

    type: Literal["decision"] = "decision"
    time: float = Field(description="the snapshot's time the decision was made at")
    rule: str
    kind: str = Field(description="firing, retry, resolved, suppressed, escalated, manual…")
    severity: str
    summary: str
    values: dict[str, Any] = Field(description="the evidence, rendered")
    actions: list[dict[str, Any]] = Field(description="each action's use and public "
                                                      "parameters")
    reason: str
    step: int | None = Field(None, ge=1, description="a ladder's step its actions are (a "
                             "rule without steps: 1); for resolved, the steps run when it "
                             "resolved; for held, the step that waits")
    mode: str = Field("act", description="observe: a shadow rule")
    held_actions: list[dict[str, Any]] = Field(default_factory=list,
                                               description="actions a hold or window keeps")
    approval: dict[str, Any] | None = Field(None, description="who approved its gated "
                                            "actions, why and when (rule, by, why, at, "
                                            "source)")
    manual: bool = False


class PlanRecord(_Record):
    """An action's plan, written before it is applied (nothing is applied that this record
    does not show)."""

    type: Literal["plan"] = "plan"
    dry_run: bool
    rule: str
    use: str
    plan: dict[str, Any]
    would_act: bool = Field(False, description="a shadow rule's plan, never applied")
    held: bool = Field(False, description="planned while a hold or window keeps it")


class ErrorRecord(_Record):
    """An action whose plan failed."""

    type: Literal["error"] = "error"
    dry_run: bool
    rule: str
    use: str
    plan: dict[str, Any] | None
    outcome: dict[str, Any] | None
    error: str
    refused: bool
    would_act: bool = False
    held: bool = False


class OutcomeRecord(_Record):
    """What an applied action did."""

    type: Literal["outcome"] = "outcome"
    rule: str
    use: str
    outcome: dict[str, Any]
    approval: dict[str, Any] | None = Field(None, description="a gated action's approval: "
                                            "who approved it, why and when")


class LateOutcomeRecord(_Record):
    """What an action that overran its timeout did, when it ended at last."""

    type: Literal["late_outcome"] = "late_outcome"
    rule: str
    use: str
    outcome: dict[str, Any]


class RefusedRecord(_Record):
    """An action not carried out: its plan, a rail, the audit log or a run still going
    said no."""

    type: Literal["refused"] = "refused"
    use: str
    reason: str
    rule: str = ""
    dry_run: bool = False
    manual: bool = False


class ForcedRecord(_Record):
    """``guardian act --force``: the rails it overrode."""

    type: Literal["forced"] = "forced"
    use: str
    overrides: list[str]
    manual: bool = True


class FleetRefusedRecord(_Record):
    """A rule's disruptive actions not run: the fleet budget has no slot for this node."""

    type: Literal["fleet_refused"] = "fleet_refused"
    rule: str
    reason: str


class ActCrashRecord(_Record):
    """Carrying out a tick's decisions raised (a bug): the rules whose actions it was."""

    type: Literal["act_crash"] = "act_crash"
    rules: list[str]
    error: str


class SourceErrorRecord(_Record):
    """A source started failing: its signals have no value until it recovers."""

    type: Literal["source_error"] = "source_error"
    source: str
    error: str


class SourceRecoveredRecord(_Record):
    """A source that failed gives values again."""

    type: Literal["source_recovered"] = "source_recovered"
    source: str


#: Every record guardian writes to the audit log, one model per ``type``.
AuditRecord = (DecisionRecord | PlanRecord | ErrorRecord | OutcomeRecord | LateOutcomeRecord
               | RefusedRecord | ForcedRecord | FleetRefusedRecord | ActCrashRecord
               | SourceErrorRecord | SourceRecoveredRecord)


def audit_schema() -> dict[str, Any]:
    """The JSON Schema of one audit-log line (``guardian schema audit``)."""
    adapter: TypeAdapter[AuditRecord] = TypeAdapter(
        Annotated[AuditRecord, Field(discriminator="type")])
    schema = adapter.json_schema(ref_template="#/$defs/{model}")
    for model in schema["$defs"].values():
        model["properties"]["ts"] = {"type": "number",
                                     "description": "when it was written (Unix time)"}
        model["required"] = sorted({*model.get("required", []), "type", "ts"})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "guardian audit record (one line of the audit log)", **schema}


def open_append(path: Path) -> int:
    """An append-only descriptor on a regular file, never through a symlink."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o640)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _ends_torn(fd: int) -> bool:
    """Whether the file behind ``fd`` ends in the middle of a line."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


@dataclass
class TornLine:
    """A line that does not parse: a crash mid-write (last line) or damage."""

    line_no: int
    text: str


def read_audit(path: str | Path) -> Iterator[dict[str, Any] | TornLine]:
    """Records of an audit log; unparsable lines come back as :class:`TornLine`."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or not raw.endswith(b"\n"):
                    raise ValueError
                yield rec
            except ValueError:
                yield TornLine(n, raw.decode(errors="replace"))
