"""The ``command`` action: run an argv list (never a shell string) with a timeout, a
minimal environment, and its output captured into the audit log.

The program runs inside guardian's own sandbox, the systemd unit's, and inherits all of
it: with the shipped unit a read-only root (``ProtectSystem=strict``: writable only
``ReadWritePaths=`` /proc/sys/vm/drop_caches and /proc/irq, /var/lib/guardian,
/var/log/guardian and a private /tmp), no devices but /dev/kmsg and the pseudo-devices
(``DevicePolicy=closed``), the capabilities CAP_KILL and CAP_SYSLOG only, no new
privileges (setuid programs gain nothing), and IP to localhost only (``IPAddressDeny=any``
on the unified cgroup hierarchy). ``touch /etc/x`` fails with "Read-only file system", and
``nvidia-smi -r`` cannot open /dev/nvidia*. A rule says what its program needs in
``needs`` (hosts, paths, devices, capabilities); ``guardian check`` then names each one
the unit denies and the drop-in that grants it, and without ``needs`` it prints the
sandbox the program will get (docs/actions.md, systemd/command-sandbox.conf.example)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from typing_extensions import TypedDict

from guardian.core.durations import Duration
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Egress,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)

OUTPUT_LIMIT = 16_384  # bytes of stdout and of stderr kept in the audit log
MINIMAL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class CommandNeeds(BaseModel):
    """What the program needs beyond guardian's sandbox; ``guardian check`` compares it
    with the systemd unit's."""

    model_config = ConfigDict(extra="forbid")

    egress: list[str] = Field(default_factory=list, description="hosts (names or "
                              "addresses) it connects to")
    writes: list[str] = Field(default_factory=list, description="absolute paths it "
                              "writes (files, or directories it writes under)")
    devices: list[str] = Field(default_factory=list, description="device nodes it opens "
                               "to read and write, e.g. /dev/nvidiactl, or device groups "
                               "as /proc/devices names them, e.g. char-nvidia")
    capabilities: list[str] = Field(default_factory=list, description="capabilities it "
                                    "uses, e.g. CAP_SYS_ADMIN")

    @field_validator("writes", "devices")
    @classmethod
    def _absolute(cls, v: list[str], info: ValidationInfo) -> list[str]:
        for path in v:
            if info.field_name == "devices" and path.startswith(("char-", "block-")) \
                    and path.partition("-")[2]:
                continue  # a device group (DeviceAllow= matches its name as a glob)
            if not path.startswith("/"):
                raise ValueError(f"expected an absolute path, got {path!r}")
            if any(c in path for c in "*?["):
                raise ValueError(f"name each path, without globs ({path!r}): systemd's "
                                 "ReadWritePaths= and DeviceAllow= take none")
        return v

    @field_validator("capabilities")
    @classmethod
    def _cap(cls, v: list[str]) -> list[str]:
        out = [c.upper() if c.upper().startswith("CAP_") else "CAP_" + c.upper() for c in v]
        for cap in out:
            if not cap[4:].replace("_", "").isalnum():
                raise ValueError(f"not a capability name: {cap!r}")
        return out


class CommandParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1, description="program and arguments; no shell")
    timeout: Duration = Field(30.0, gt=0, description="killed (with its children) after this")
    env: dict[str, str] = Field(default_factory=dict, description="added to a minimal env; "
                                "its values are redacted in logs and the audit trail",
                                json_schema_extra={"secret": True})
    cwd: str = "/"
    needs: CommandNeeds | None = Field(None, description="what the program needs from "
                                       "the systemd unit's sandbox (read-only root, no "
                                       "devices, CAP_KILL and CAP_SYSLOG only, localhost "
                                       "only): `guardian check` warns about each need the "
                                       "unit denies, and describes the sandbox when unset")


class CommandPayload(TypedDict):
    argv: list[str]


class CommandAction(Action[CommandParams, CommandPayload]):
    """Run a program. It gets GUARDIAN_RULE and GUARDIAN_VALUES (JSON) in its environment."""

    name: ClassVar[str] = "command"
    Params = CommandParams
    disruptive: ClassVar[bool] = True  # what a program does is not known

    def sandbox_needs(self) -> SandboxNeeds:
        n = self.params.needs
        if n is None:
            return SandboxNeeds(unknown=f"what {self.params.argv[0]} writes, opens and "
                                "connects to is not known (no `needs`)")
        return SandboxNeeds(egress=tuple(Egress(h, f"{h} (in `needs`)") for h in n.egress),
                            writes=tuple(n.writes), devices=tuple(n.devices),
                            capabilities=tuple(n.capabilities))

    def plan(self, ctx: ActionContext) -> Plan[CommandPayload]:
        p = self.params
        return Plan(self.name, ctx.rule,
                    [Step(f"program {p.argv[0]}",
                          f"run {json.dumps(p.argv)} in {p.cwd} (timeout {p.timeout:g}s)")],
                    data={"argv": p.argv})

    def apply(self, plan: Plan[CommandPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        env = {**MINIMAL_ENV, **p.env, "GUARDIAN_RULE": ctx.rule,
               "GUARDIAN_VALUES": json.dumps(ctx.values, sort_keys=True, default=str)}
        started = time.monotonic()
        try:
            # its own session, so a timeout kills the whole process group it started
            proc = subprocess.Popen(p.argv, cwd=p.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            return Outcome(ok=False, error=f"cannot run {p.argv[0]}: {exc.strerror}")
        try:
            out, err = proc.communicate(timeout=p.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return Outcome(ok=False, error=f"timed out after {p.timeout:g}s; killed",
                           data=_output(out, err, None, started))
        data = _output(out, err, proc.returncode, started)
        if proc.returncode != 0:
            return Outcome(ok=False, error=f"exit status {proc.returncode}", data=data)
        return Outcome(ok=True, detail="exit status 0", data=data)


def _output(out: bytes, err: bytes, rc: int | None, started: float) -> dict[str, object]:
    def cut(b: bytes) -> str:
        text = b[:OUTPUT_LIMIT].decode(errors="replace")
        return text + (f"… ({len(b) - OUTPUT_LIMIT} more bytes)" if len(b) > OUTPUT_LIMIT
                       else "")
    return {"exit_status": rc, "stdout": cut(out), "stderr": cut(err),
            "seconds": round(time.monotonic() - started, 3)}
