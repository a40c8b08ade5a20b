"""The ``reap.zombies`` action: get zombies reaped through their parents.

A zombie is reaped only by its parent's wait(). The action sends each selected parent the
signals of its ``ladder``, each followed by a wait, and stops as soon as the zombies are
gone. By default the ladder is SIGCHLD alone, as the shipped rule sends: a nudge that
never harms the parent. Escalation is asked for: ``escalate = true`` adds SIGTERM, then
SIGKILL, so that the parent dies and its zombies reparent to init or a subreaper, which
reaps them (or write those steps into ``ladder``). It then verifies, and tells apart
zombies that were reaped from zombies that merely moved to a new parent that does not
reap them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict

from guardian.core.durations import Duration
from guardian.hostio.procfs import (
    CLK_TCK,
    ProcStat,
    all_stats,
    cgroup_paths,
    owner_uid,
    read_proc_stat,
    uptime,
    zombies_by_parent,
)
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step
from guardian.plugin.safety import DEFAULT_PROTECTED_COMMS, protected_reason, selected

SignalName = Literal["SIGCHLD", "SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                     "SIGTERM", "SIGKILL"]
POLL = 0.05


class LadderStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signal: SignalName
    wait: Duration = Field(2.0, ge=0, le=300)


# what `escalate = true` adds: the parent dies, and init or a subreaper reaps its zombies
ESCALATION = (LadderStep(signal="SIGTERM", wait=5.0), LadderStep(signal="SIGKILL", wait=5.0))


class ReapParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_zombies: int = Field(1, ge=1, description="act on parents with at least this many")
    min_age: Duration = Field(0.0, description="oldest zombie of the parent at least this "
                              "old (since the zombie process started)")
    parents: list[int] | None = Field(None, description="only these parent PIDs")
    allow_comm: list[str] = Field(["*"], description="parent comm globs that may be acted on")
    deny_comm: list[str] = Field(default_factory=list)
    allow_cgroup: list[str] = Field(["*"], description="parent cgroup path globs")
    deny_cgroup: list[str] = Field(default_factory=list)
    ladder: list[LadderStep] = Field(
        [LadderStep(signal="SIGCHLD", wait=5.0)], min_length=1,
        description="signals to the parent, in order, each followed by a wait (default: "
        "SIGCHLD alone, which never harms the parent)")
    escalate: bool = Field(False, description="after the ladder, SIGTERM then SIGKILL "
                           "(5 s wait each; those the ladder does not send already): the "
                           "parent dies and init reaps its zombies")
    allow_other_uid: bool = Field(False, description="also signal a parent whose user "
                                  "differs from its zombies' (by default such a parent is "
                                  "left alone: an unprivileged user could otherwise aim "
                                  "guardian at a root-owned process)")
    protect: list[str] = Field(list(DEFAULT_PROTECTED_COMMS),
                               description="parent comm globs never signalled")
    protect_pids: list[int] = Field(default_factory=list)
    max_parents: int = Field(10, ge=1, description="parents handled in one run, most first")
    reparented_wait: Duration = Field(
        5.0, ge=0, le=60, description="zombies that moved to a new parent (PID 1, a "
        "subreaper) when theirs died: how long it is given to reap them before they count "
        "as not reaped (init reaps when it next runs, not at once)")

    @model_validator(mode="after")
    def _escalated(self) -> ReapParams:
        if self.escalate:
            sent = {s.signal for s in self.ladder}
            self.ladder = [*self.ladder, *(s for s in ESCALATION if s.signal not in sent)]
        return self



@dataclass(frozen=True)
class Zombie:
    pid: int
    start: int


def _zombies_by_parent(proc: Path) -> tuple[dict[int, list[Zombie]], dict[int, ProcStat]]:
    stats = {st.pid: st for st in all_stats(proc, strict=False)}
    return ({ppid: [Zombie(z.pid, z.starttime) for z in zs]
             for ppid, zs in zombies_by_parent(stats.values()).items()}, stats)


def _still_zombie(proc: Path, z: Zombie) -> ProcStat | None:
    try:
        st = read_proc_stat(proc, z.pid)
    except ValueError:
        return None
    if st is None or st.starttime != z.start or not st.is_zombie:
        return None
    return st


def _zombie_of(proc: Path, z: Zombie, ppid: int) -> bool:
    st = _still_zombie(proc, z)
    return st is not None and st.ppid == ppid


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def _other_uid(proc: Path, ppid: int, zombies: list[Zombie]) -> str:
    """Why a parent's user differs from its zombies' (owners of their /proc entries), or
    "" when they agree."""
    try:
        parent_uid = owner_uid(proc, ppid)
        others = {owner_uid(proc, z.pid) for z in zombies} - {parent_uid}
    except OSError:
        return "its processes could not be read"
    if others:
        return (f"runs as uid {parent_uid} while its zombies belong to uid "
                f"{', '.join(map(str, sorted(others)))} (allow_other_uid)")
    return ""


class ReapTarget(TypedDict):
    """One parent to signal, with the zombies it had when planned."""

    ppid: int
    comm: str
    start: int  # the parent's starttime: a reused PID is not the planned parent
    zombies: list[tuple[int, int]]  # (pid, starttime)


class ReapPayload(TypedDict):
    targets: list[ReapTarget]


class ReapZombies(Action[ReapParams, ReapPayload]):
    """Reap zombies through their parents (see the module docstring)."""

    name: ClassVar[str] = "reap.zombies"
    Params = ReapParams

    def plan(self, ctx: ActionContext) -> Plan[ReapPayload]:
        p = self.params
        proc = ctx.host.proc
        by_parent, stats = _zombies_by_parent(proc)
        now_up = uptime(proc)
        plan: Plan[ReapPayload] = Plan(self.name, ctx.rule)
        targets: list[ReapTarget] = []
        ladder = " → ".join(f"{s.signal}, wait {s.wait:g}s" for s in p.ladder)
        for ppid, zombies in sorted(by_parent.items(), key=lambda kv: -len(kv[1])):
            parent = stats.get(ppid)
            if parent is None or len(zombies) < p.min_zombies:
                continue
            if p.parents is not None and ppid not in p.parents:
                continue
            age = now_up - min(z.start for z in zombies) / CLK_TCK
            if age < p.min_age:
                continue
            if not selected(parent.comm, p.allow_comm, p.deny_comm):
                continue
            groups = cgroup_paths(proc, ppid)
            if not any(selected(g, p.allow_cgroup, p.deny_cgroup) for g in groups or ["/"]):
                continue
            why = protected_reason(parent, ctx.own_pid, None, p.protect, p.protect_pids)
            if not why and not p.allow_other_uid:
                why = _other_uid(proc, ppid, zombies)
            if why:
                plan.skipped.append(f"pid {ppid} ({parent.comm}), parent of {len(zombies)} "
                                    f"zombie(s): {why}")
                continue
            if len(targets) >= p.max_parents:
                plan.note = f"more parents than max_parents={p.max_parents}; next run"
                break
            targets.append({"ppid": ppid, "comm": parent.comm, "start": parent.starttime,
                            "zombies": [(z.pid, z.start) for z in zombies]})
            shown = ", ".join(str(z.pid) for z in zombies[:10])
            more = f" and {len(zombies) - 10} more" if len(zombies) > 10 else ""
            plan.steps.append(Step(
                f"pid {ppid} ({parent.comm})",
                f"{len(zombies)} zombie(s) [{shown}{more}], oldest {age:.0f}s: {ladder}; "
                "stop as soon as they are reaped"))
        if not targets and not plan.skipped:
            plan.note = "no parent matches: nothing to do"
        plan.data["targets"] = targets
        return plan

    def apply(self, plan: Plan[ReapPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        results = [self._one(t, ctx, p) for t in plan.data["targets"]]
        reaped = sum(r["reaped"] for r in results)
        left = [r for r in results if r["remaining"]]
        data = {"parents": results, "reaped": reaped}
        if not results:
            return Outcome(ok=True, detail="nothing to do", verified=True, data=data)
        if left:
            where = "; ".join(_describe_left(r) for r in left)
            return Outcome(ok=False, verified=False, data=data,
                           error=f"{sum(len(r['remaining']) for r in left)} zombie(s) "
                                 f"not reaped: {where}")
        return Outcome(ok=True, verified=True, data=data,
                       detail=f"{reaped} zombie(s) reaped from {len(results)} parent(s)")

    def _one(self, t: ReapTarget, ctx: ActionContext, p: ReapParams) -> dict[str, Any]:
        proc = ctx.host.proc
        ppid = t["ppid"]
        zombies = [Zombie(pid, start) for pid, start in t["zombies"]]
        res: dict[str, Any] = {"ppid": ppid, "comm": t["comm"], "signals": [],
                               "reaped": 0, "remaining": [], "moved_to": {}}
        live = [z for z in zombies if _still_zombie(proc, z)]
        # Every signal goes through a pidfd: once the planned parent is confirmed behind it,
        # a parent that exits mid-ladder can never have its PID's next owner signalled.
        pidfd = _pidfd(ppid)
        try:
            parent = read_proc_stat(proc, ppid)  # after the pidfd: confirms whose it is
            if pidfd is None or parent is None or parent.starttime != t["start"]:
                res["note"] = "parent exited or its PID was reused before apply: no signal"
            elif (why := protected_reason(parent, ctx.own_pid, None, p.protect,
                                          p.protect_pids)):
                res["note"] = f"refused at apply: {why}"
            else:
                for step in p.ladder:
                    live = [z for z in live if _zombie_of(proc, z, ppid)]
                    if not live:
                        break
                    try:
                        signal.pidfd_send_signal(pidfd, getattr(signal, step.signal))
                    except ProcessLookupError:
                        res["note"] = "parent exited during the ladder"
                        break
                    res["signals"].append(step.signal)
                    deadline = time.monotonic() + step.wait
                    while live and time.monotonic() < deadline:
                        time.sleep(POLL)
                        live = [z for z in live if _zombie_of(proc, z, ppid)]
        finally:
            if pidfd is not None:
                os.close(pidfd)
        # orphans reparent at once and are reaped when their new parent next runs: judge
        # after it has had its chance (bounded), not in the moment between
        moved = [z for z in zombies if (st := _still_zombie(proc, z)) and st.ppid != ppid]
        deadline = time.monotonic() + p.reparented_wait
        while moved and time.monotonic() < deadline:
            time.sleep(POLL)
            moved = [z for z in moved if _still_zombie(proc, z)]
        final = {z: _still_zombie(proc, z) for z in zombies}
        res["reaped"] = sum(1 for st in final.values() if st is None)
        for z, st in final.items():
            if st is not None:
                res["remaining"].append(z.pid)
                if st.ppid != t["ppid"]:
                    res["moved_to"][st.ppid] = res["moved_to"].get(st.ppid, 0) + 1
        return res


def _describe_left(r: dict[str, Any]) -> str:
    moved = r["moved_to"]
    if moved:
        to = ", ".join(f"{n} moved to pid {pid}" + (" (PID 1, which does not reap them)"
                                                    if pid == 1 else ", which did not reap")
                       for pid, n in moved.items())
        return f"parent {r['ppid']} ({r['comm']}): {to}"
    return f"parent {r['ppid']} ({r['comm']}) still holds {len(r['remaining'])} after " \
           f"{', '.join(r['signals']) or 'no signal'}"
