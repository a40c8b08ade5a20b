"""The ``command`` action: run an argv list (never a shell string) with a timeout, a
minimal environment, and its output captured into the audit log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from guardian.core.durations import Duration
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step

OUTPUT_LIMIT = 16_384  # bytes of stdout and of stderr kept in the audit log
MINIMAL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class CommandParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1, description="program and arguments; no shell")
    timeout: Duration = Field(30.0, gt=0, description="killed (with its children) after this")
    env: dict[str, str] = Field(default_factory=dict, description="added to a minimal env; "
                                "its values are redacted in logs and the audit trail",
                                json_schema_extra={"secret": True})
    cwd: str = "/"


class CommandPayload(TypedDict):
    argv: list[str]


class CommandAction(Action[CommandParams, CommandPayload]):
    """Run a program. It gets GUARDIAN_RULE and GUARDIAN_VALUES (JSON) in its environment."""

    name: ClassVar[str] = "command"
    Params = CommandParams
    disruptive: ClassVar[bool] = True  # what a program does is not known

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
