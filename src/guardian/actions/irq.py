"""The ``irq.move`` action: move a NIC's queue IRQs off hot cores.

The IRQs of an interface are found through sysfs (``msi_irqs`` of its PCI device); the
interfaces are named (``interface``) or found by the kernel driver bound to them
(``driver = "ena"``: ``ens5`` on Amazon Linux 2023 and Ubuntu, ``eth0`` on Amazon Linux 2);
or the IRQs are given by number. Management IRQs (config, mgmnt) stay put unless asked. Each
IRQ whose affinity touches a hot core is pointed at the least-loaded allowed cores by
writing ``/proc/irq/N/smp_affinity_list``. The previous lists are saved (the first
original is kept across runs) so ``guardian irq restore`` puts them back. A running
irqbalance would undo the change: by default the action then refuses.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import NotRequired, TypedDict

from guardian.core.atomicfile import write_json
from guardian.hostio.host import Host, exists
from guardian.hostio.irq import (
    affinity_path,
    format_cpu_list,
    interface_irqs,
    interfaces_by_driver,
    irq_names,
    online_cpus,
    read_affinity,
    write_affinity,
)
from guardian.hostio.procfs import all_stats, real_uid
from guardian.hostio.records import read_json
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step

DEFAULT_STATE = "/var/lib/guardian/irq-affinity.json"
_MANAGEMENT = ("config", "mgmnt", "mgmt")


class IrqParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interface: str | None = Field(None, description="NIC whose queue IRQs move")
    driver: str | None = Field(None, description="or every NIC this kernel driver is bound "
                               "to (the name /sys/class/net/IF/device/driver links to, "
                               "e.g. ena), whatever the interfaces are called")
    irqs: list[int] | None = Field(None, description="or these IRQ numbers")
    include_management: bool = False
    from_cores: list[int] | None = Field(None, description="cores to move off (default: "
                                         "the cores the cpu source finds hot, "
                                         "cpu.core.hot; its hot_pct sets the threshold)")
    to_cores: list[int] | None = Field(None, description="cores allowed to take them "
                                       "(default: every online core not moved off)")
    irqbalance: Literal["refuse", "ignore"] = Field(
        "refuse", description="what to do while irqbalance runs (it undoes the change)")
    state_file: str = Field(DEFAULT_STATE, description="where the previous lists are kept")

    @model_validator(mode="after")
    def _one_selector(self) -> IrqParams:
        if self.interface is not None and self.driver is not None:
            raise ValueError("set `interface` or `driver`, not both")
        return self


def irqbalance_running(host: Host) -> int | None:
    """The irqbalance daemon's PID: a process of that name run by root (any user may
    name a process irqbalance; only root runs one as root)."""
    for st in all_stats(host.proc, strict=False):
        if st.comm == "irqbalance" and real_uid(host.proc, st.pid) == 0:
            return st.pid
    return None


def _per_core(values: dict[str, Any], name: str) -> dict[int, float]:
    fam = values.get(name)
    if not isinstance(fam, dict):
        return {}
    return {int(dict(labels)["cpu"]): v for labels, v in fam.items()}


class IrqMoveStep(TypedDict):
    irq: int
    path: str  # its smp_affinity_list
    old: str
    new: str


class IrqPayload(TypedDict):
    moves: NotRequired[list[IrqMoveStep]]  # absent from a refused plan


class IrqMove(Action[IrqParams, IrqPayload]):
    """Move NIC queue IRQs off hot cores (see the module docstring)."""

    name: ClassVar[str] = "irq.move"
    Params = IrqParams

    def plan(self, ctx: ActionContext) -> Plan[IrqPayload]:
        p = self.params
        host = ctx.host
        plan: Plan[IrqPayload] = Plan(self.name, ctx.rule)
        balancer = irqbalance_running(host)
        if balancer is not None and p.irqbalance == "refuse":
            plan.refused.append(f"irqbalance runs (pid {balancer}) and would undo the "
                                "change; stop it or set irqbalance = \"ignore\"")
            return plan
        names = irq_names(host)
        ifaces = ([p.interface] if p.interface else
                  interfaces_by_driver(host, p.driver) if p.driver else [])
        chosen = p.irqs if p.irqs is not None else sorted(
            {irq for iface in ifaces for irq in interface_irqs(host, iface)})
        if not chosen:
            if p.irqs is not None or p.interface:
                what = p.interface or "the given list"
            elif p.driver:
                what = (f"{', '.join(ifaces)} (driver {p.driver})" if ifaces else
                        f"driver {p.driver!r}: no interface is bound to it")
            else:
                what = "nothing: set interface, driver or irqs"
            plan.refused.append(f"no IRQs found for {what}")
            return plan
        if not p.include_management:
            chosen = [i for i in chosen if not any(m in names.get(i, "") for m in _MANAGEMENT)]
        load = _per_core(ctx.snapshot.values, "cpu.core.kernel_pct")
        online = online_cpus(host)
        hot = set(p.from_cores if p.from_cores is not None else
                  [c for c, v in _per_core(ctx.snapshot.values, "cpu.core.hot").items() if v])
        allowed = [c for c in (p.to_cores if p.to_cores is not None else online)
                   if c not in hot and c in online]
        if not hot:
            plan.note = "no hot core: nothing to move"
            return plan
        if not allowed:
            plan.refused.append(f"no core to move to (hot: {format_cpu_list(list(hot))})")
            return plan
        allowed.sort(key=lambda c: (load.get(c, 0.0), c))
        moves: list[IrqMoveStep] = []
        for irq in chosen:
            path = affinity_path(host, irq)
            try:
                current = read_affinity(path)
            except (OSError, ValueError):
                continue
            if not hot.intersection(current):
                continue
            target = [allowed[len(moves) % len(allowed)]]  # spread, least loaded first
            moves.append({"irq": irq, "path": str(path), "old": format_cpu_list(current),
                          "new": format_cpu_list(target)})
            plan.steps.append(Step(f"irq {irq} ({names.get(irq, '?')})",
                                   f"smp_affinity_list {format_cpu_list(current)} → "
                                   f"{format_cpu_list(target)}"))
        if balancer is not None:
            plan.note = f"irqbalance runs (pid {balancer}) and may undo this"
        elif not moves:
            plan.note = "no chosen IRQ is on a hot core"
        plan.data["moves"] = moves
        return plan

    def apply(self, plan: Plan[IrqPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        moves = plan.data.get("moves", [])
        saved = load_state(p.state_file)
        results = []
        for m in moves:
            saved.setdefault(str(m["irq"]), m["old"])  # keep the first original
        save_state(p.state_file, saved)  # before writing: a crash mid-way can still restore
        for m in moves:
            results.append(_write(m["path"], m["new"]) | {"irq": m["irq"], "old": m["old"]})
        failed = [r for r in results if not r["ok"]]
        data = {"moves": results, "state_file": p.state_file}
        if failed:
            return Outcome(ok=False, verified=False, data=data,
                           error="; ".join(f"irq {r['irq']}: {r['error']}" for r in failed))
        return Outcome(ok=True, verified=True, data=data,
                       detail=f"{len(results)} IRQ(s) moved" if results else "nothing to move")


def _write(path: str, cpus: str) -> dict[str, Any]:
    try:
        got = write_affinity(path, cpus)
    except OSError as exc:
        return {"ok": False, "error": f"write {path}: {exc.strerror}", "new": cpus}
    if got != cpus:
        return {"ok": False, "error": f"read back {got}, wrote {cpus}", "new": got}
    return {"ok": True, "new": got}


def load_state(path: str) -> dict[str, str]:
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not an IRQ affinity state file")
    return {str(k): str(v) for k, v in data.items()}


def save_state(path: str, saved: dict[str, str]) -> None:
    write_json(path, saved)


def restore(host: Host, state_file: str = DEFAULT_STATE) -> list[dict[str, Any]]:
    """Put back every saved affinity; entries restored are removed from the state file."""
    saved = load_state(state_file)
    results = []
    for irq, cpus in sorted(saved.items(), key=lambda kv: int(kv[0])):
        path = affinity_path(host, irq)
        r = _write(str(path), cpus) | {"irq": int(irq)}
        if r["ok"] or not exists(path):  # an IRQ that is gone needs no restoring
            saved.pop(irq)
        results.append(r)
    save_state(state_file, saved)
    return results
