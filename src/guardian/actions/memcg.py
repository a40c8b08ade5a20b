"""The ``memcg.release`` action: release dying memory cgroups.

``drop_caches`` writes 1 to /proc/sys/vm/drop_caches: the kernel frees clean page cache,
which is what keeps most dying memcgs alive (dirty pages are not dropped, so memcgs whose
pages are not yet written back survive it; ``sync_first`` writes them back first, at an
I/O cost). On cgroup v2, ``reclaim`` writes an amount to ``memory.reclaim`` of one cgroup
(kernel 5.19+), which reclaims from that subtree only. The dying count is measured before
and after, and reported.
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..durations import Duration
from ..hostio.cgroupfs import detect_layout, dying_memcgs, layout_problem
from ..plugins import Action, ActionContext, Outcome, Plan, Step

_SIZE = re.compile(r"^(\d+)([KMGT]?)$")


class MemcgParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["drop_caches", "reclaim"] = "drop_caches"
    sync_first: bool = Field(False, description="sync before drop_caches (frees dirty pages "
                             "too, at an I/O cost)")
    cgroup: str = Field("", description="reclaim: cgroup path under the cgroup2 mount, "
                        "e.g. system.slice")
    amount: str = Field("1G", description="reclaim: bytes to reclaim, e.g. 512M, 1G")
    settle: Duration = Field(1.0, ge=0, le=60, description="wait before counting again")

    @field_validator("amount")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _SIZE.match(v):
            raise ValueError(f"bad amount {v!r}; expected bytes with an optional K, M, G, "
                             "T suffix, e.g. 512M")
        return v

    @field_validator("cgroup")
    @classmethod
    def _relative(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError("cgroup must be a path under the cgroup2 mount, without '..'")
        return v.strip("/")


class MemcgRelease(Action[MemcgParams]):
    """Release dying memory cgroups (see the module docstring)."""

    name: ClassVar[str] = "memcg.release"
    Params = MemcgParams

    def plan(self, ctx: ActionContext) -> Plan:
        p = self.params
        dying = dying_memcgs(ctx.host)
        plan = Plan(self.name, ctx.rule, data={"dying_before": dying})
        if p.method == "drop_caches":
            target = ctx.host.proc / "sys" / "vm" / "drop_caches"
            if p.sync_first:
                plan.steps.append(Step("all filesystems", "sync (write back dirty pages)"))
            plan.steps.append(Step(str(target), "write 1: free clean page cache"))
        else:
            try:
                layout = detect_layout(ctx.host.root, ctx.host.proc)
                why = layout_problem(ctx.host, layout)
            except OSError as exc:
                layout, why = None, f"cannot read mountinfo: {exc}"
            if why or layout is None or layout.version != 2:
                have = why or ("no memory hierarchy" if layout is None
                               else f"cgroup v{layout.version}")
                plan.refused.append(f"reclaim needs the memory controller on cgroup v2; "
                                    f"this host: {have}")
                return plan
            target = layout.memory_root / p.cgroup / "memory.reclaim"
            if not target.exists():
                plan.refused.append(f"{target} does not exist (kernel before 5.19, or no "
                                    "such cgroup)")
                return plan
            plan.steps.append(Step(str(target), f"write {p.amount}"))
        plan.data["path"] = str(target)
        plan.note = f"dying memcgs now: {dying if dying is not None else 'unknown'}"
        return plan

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        p = self.params
        if "path" not in plan.data:
            return Outcome(ok=False, error="nothing planned")
        before = plan.data["dying_before"]
        if p.method == "drop_caches" and p.sync_first:
            os.sync()
        text = "1" if p.method == "drop_caches" else p.amount
        partial = False
        try:
            fd = os.open(plan.data["path"], os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno != errno.EAGAIN or p.method != "reclaim":
                return Outcome(ok=False, error=f"write {plan.data['path']}: {exc.strerror}")
            partial = True  # memory.reclaim could not reclaim the whole amount
        time.sleep(p.settle)
        after = dying_memcgs(ctx.host)
        data = {"dying_before": before, "dying_after": after, "partial": partial}
        if before is None or after is None:
            return Outcome(ok=True, verified=None, data=data,
                           detail="written; dying memcgs could not be counted")
        released = before - after
        data["released"] = released
        return Outcome(ok=True, verified=released > 0 or before == 0, data=data,
                       detail=f"dying memcgs {before} → {after}")
