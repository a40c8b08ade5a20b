"""The ``memcg.release`` action: release dying memory cgroups.

``drop_caches`` writes to /proc/sys/vm/drop_caches: 1 frees clean page cache, which is
what keeps most dying memcgs alive (dirty pages are not dropped, so memcgs whose pages are
not yet written back survive it; ``sync_first`` writes them back first, at an I/O cost).
On cgroup v2 it writes 3 by default, dentries and inodes too: with cgroup writeback an
inode keeps the writeback structure of the memcg that last dirtied it, and that pins the
memcg after its pages are clean and dropped. The kernel moves such inodes to the parent
only when a memcg goes offline while the structure is clean (cleanup_offline_cgwbs,
mm/backing-dev.c): a memcg that died dirty waits for the next removal, which never comes
once its crash-looping source is stopped. Evicting the inode frees it at once.

On cgroup v2, ``reclaim`` writes an amount to ``memory.reclaim`` of one cgroup (kernel
5.19+), which reclaims from that subtree only, slab included: by default the deepest cgroup
that holds all the dying memcgs (found through ``cgroup.stat``), never the root (the whole
machine) unless asked for with ``cgroup = "/"``. The amount is capped at the cgroup's
``memory.current``: asked for more than it can reclaim, the kernel retries up to 16
passes, then answers EAGAIN, which Documentation/admin-guide/cgroup-v2.rst defines as
"less bytes are reclaimed than the specified amount", not a failure. Reclaim alone
frees about half of the memcgs that died dirty on Linux 6.1: their inodes keep pinning
the rest. So a child cgroup is then made and removed under it: a memcg going offline makes
the kernel retry its clean-up of offline writeback structures, which moves the clean
inodes to the parent's (that frees nine in ten, as a drop of page cache and inodes does,
tests/system/test_cgroup_v2_real.py). It is the method for a node whose other page cache must
stay.

The dying count is measured before and after, and reported.
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import NotRequired, TypedDict

from guardian.core.durations import Duration
from guardian.hostio.cgroupfs import (
    Layout,
    dying_memcgs,
    gives_memory,
    layout_problem,
    leaking_cgroup,
    locate,
    make_and_remove_child,
    memory_current,
)
from guardian.hostio.host import (
    exists,
    on_read_only_filesystem,
    sync_filesystems,
    write_kernel_file,
)
from guardian.hostio.sandbox import cgroupfs_read_only
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)

_SIZE = re.compile(r"^(\d+)([KMGT]?)$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size_bytes(text: str) -> int:
    """Bytes of a size such as ``512M`` (the suffixes memory.reclaim accepts)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"bad size {text!r}")
    return int(m[1]) * _UNITS[m[2]]


class MemcgParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["drop_caches", "reclaim"] = "drop_caches"
    sync_first: bool = Field(False, description="sync before drop_caches (frees dirty pages "
                             "too, at an I/O cost)")
    inodes: bool | None = Field(None, description="drop_caches: also drop unused dentries "
                                "and inodes (writes 3, not 1); default: on cgroup v2 only, "
                                "where a clean inode pins the memcg that last dirtied it")
    cgroup: str = Field("", description="reclaim: cgroup path under the cgroup2 mount, "
                        "e.g. system.slice; default: the deepest cgroup holding all the "
                        "dying memcgs; \"/\": the root (the whole machine)")
    amount: str = Field("1G", description="reclaim: bytes to reclaim, e.g. 512M, 1G (at "
                        "most the cgroup's memory.current)")
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
        return "/" if v and not v.strip("/") else v.strip("/")


def sandbox_problem(params: MemcgParams, unit: list[str]) -> str | None:
    """Why the systemd unit (its texts, see :func:`guardian.hostio.sandbox.unit_texts`) keeps
    these parameters from working, or None. drop_caches writes /proc/sys/vm/drop_caches,
    which the shipped unit leaves writable; reclaim writes under /sys/fs/cgroup."""
    if params.method == "reclaim" and cgroupfs_read_only(unit):
        return ('method = "reclaim" writes memory.reclaim under /sys/fs/cgroup, which the '
                "systemd unit makes read-only (ProtectControlGroups=yes): it fails when run "
                "by the unit; add a drop-in with ProtectControlGroups=no, or use "
                'method = "drop_caches"')
    return None


def _layout(ctx: ActionContext) -> tuple[Layout | None, str | None]:
    try:
        found = locate(ctx.host.root, ctx.host.proc)
        if isinstance(found, str):
            return None, found
        return found, layout_problem(ctx.host, found)
    except OSError as exc:
        return None, f"cannot read mountinfo: {exc}"


class MemcgPayload(TypedDict):
    """What ``memcg.release`` plans for its apply; ``path`` is absent from a refused
    plan (nothing to write)."""

    dying_before: int | None
    path: NotRequired[str]  # the file written: drop_caches or a cgroup's memory.reclaim
    value: NotRequired[str]  # what is written there
    probe: NotRequired[str]  # reclaim: the child cgroup made and removed after it
    cgroup: NotRequired[str]  # reclaim: the cgroup found to hold the dying memcgs


class MemcgRelease(Action[MemcgParams, MemcgPayload]):
    """Release dying memory cgroups (see the module docstring)."""

    name: ClassVar[str] = "memcg.release"
    Params = MemcgParams

    def sandbox_needs(self) -> SandboxNeeds:
        """drop_caches writes /proc/sys/vm/drop_caches; reclaim writes memory.reclaim
        under /sys/fs/cgroup (and makes and removes a child cgroup there)."""
        if self.params.method == "drop_caches":
            return SandboxNeeds(writes=("/proc/sys/vm/drop_caches",))
        cgroup = self.params.cgroup.strip("/")
        return SandboxNeeds(writes=("/sys/fs/cgroup" + (f"/{cgroup}" if cgroup else ""),))

    def plan(self, ctx: ActionContext) -> Plan[MemcgPayload]:
        p = self.params
        dying = dying_memcgs(ctx.host)
        plan: Plan[MemcgPayload] = Plan(self.name, ctx.rule, data={"dying_before": dying})
        layout, why = _layout(ctx)
        if p.method == "drop_caches":
            target = ctx.host.proc / "sys" / "vm" / "drop_caches"
            inodes = p.inodes if p.inodes is not None else (
                layout is not None and layout.version == 2)
            if p.sync_first:
                plan.steps.append(Step("all filesystems", "sync (write back dirty pages)"))
            plan.steps.append(Step(str(target), "write 3: free clean page cache, unused "
                                   "dentries and inodes" if inodes else
                                   "write 1: free clean page cache"))
            plan.data["value"] = "3" if inodes else "1"
        else:
            if why or layout is None or layout.version != 2:
                have = why or ("no memory hierarchy" if layout is None
                               else f"cgroup v{layout.version}")
                plan.refused.append(f"reclaim needs the memory controller on cgroup v2; "
                                    f"this host: {have}")
                return plan
            cgroup = self._cgroup(layout, plan)
            if cgroup is None:
                return plan
            target = cgroup / "memory.reclaim"
            if not exists(target):
                plan.refused.append(f"{target} does not exist (kernel before 5.19, or no "
                                    "such cgroup)")
                return plan
            if on_read_only_filesystem(cgroup):
                plan.refused.append(
                    f"{target} is on a read-only file system: the systemd unit's "
                    "ProtectControlGroups=yes (add a drop-in with ProtectControlGroups=no) "
                    "or a container's read-only /sys/fs/cgroup")
                return plan
            amount = self._amount(cgroup)
            plan.steps.append(Step(str(target), f"write {amount}"))
            plan.data["value"] = amount
            # a memcg must go offline there: the parent must give its children memory
            probe_in = cgroup if gives_memory(cgroup) else layout.memory_root
            probe = probe_in / f"guardian-wb-cleanup-{os.getpid()}"
            plan.steps.append(Step(str(probe), "make and remove: the kernel then moves "
                                   "clean inodes off dead memcgs' writeback structures"))
            plan.data["probe"] = str(probe)
        plan.data["path"] = str(target)
        plan.note = f"dying memcgs now: {dying if dying is not None else 'unknown'}"
        return plan

    def _cgroup(self, layout: Layout, plan: Plan[MemcgPayload]) -> Path | None:
        """The cgroup to reclaim from, or None (refused, with the reason in ``plan``)."""
        p = self.params
        if p.cgroup == "/":
            return layout.memory_root
        if p.cgroup:
            return layout.memory_root / p.cgroup
        try:
            found = leaking_cgroup(layout.memory_root)
        except (OSError, ValueError, KeyError) as exc:
            plan.refused.append(f"cannot find the cgroup holding the dying memcgs: {exc}")
            return None
        if found == layout.memory_root:
            plan.refused.append(
                "the dying memcgs are not under one cgroup below the root (directly under "
                "it, or across its children): reclaiming from the root would reclaim from "
                "the whole machine; set `cgroup` (\"/\" for the root)")
            return None
        plan.data["cgroup"] = "/" + str(found.relative_to(layout.memory_root))
        return found

    def _amount(self, cgroup: Path) -> str:
        try:
            current = memory_current(cgroup)
        except (OSError, ValueError):
            return self.params.amount  # the root has no memory.current
        return self.params.amount if size_bytes(self.params.amount) <= current \
            else str(max(current, 4096))

    def apply(self, plan: Plan[MemcgPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        if "path" not in plan.data:
            return Outcome(ok=False, error="nothing planned")
        before = plan.data["dying_before"]
        if p.method == "drop_caches" and p.sync_first:
            sync_filesystems()
        text = plan.data.get("value", "1" if p.method == "drop_caches" else p.amount)
        partial = False
        try:
            write_kernel_file(plan.data["path"], text)
        except OSError as exc:
            if exc.errno != errno.EAGAIN or p.method != "reclaim":
                return Outcome(ok=False, error=f"write {plan.data['path']}: {exc.strerror}")
            partial = True  # memory.reclaim reclaimed less than the amount (cgroup-v2.rst)
        cleanup = make_and_remove_child(Path(plan.data["probe"])) if "probe" in plan.data else None
        time.sleep(p.settle)
        after = dying_memcgs(ctx.host)
        data: dict[str, Any] = {"dying_before": before, "dying_after": after,
                                "partial": partial}
        if cleanup is not None:
            data["writeback_cleanup"] = cleanup
        if "cgroup" in plan.data:
            data["cgroup"] = plan.data["cgroup"]
        if before is None or after is None:
            return Outcome(ok=True, verified=None, data=data,
                           detail="written; dying memcgs could not be counted")
        released = before - after
        data["released"] = released
        return Outcome(ok=True, verified=released > 0 or before == 0, data=data,
                       detail=f"dying memcgs {before} → {after}")
