"""The ``gpu.reset`` action: reset one NVIDIA GPU with ``nvidia-smi --gpu-reset -i <PCI
address>`` (an argv, never a shell, within ``timeout``), when NVML says it may be.

The GPU is the one the rule's matched member names (its ``pci_bus_id``, ``UUID`` or
``gpu`` index, as the gpu source labels it; the kernel log's ``pci``), or the ``gpu``
parameter. The plan asks NVML and refuses, with why:

- no NVIDIA driver or library (NVML cannot start), or no such GPU;
- more than one GPU matched (one reset at a time: the ladder climbs per episode);
- processes on the GPU (NVML's compute and graphics processes): nvidia-smi(1) says no
  application may use a GPU being reset. Each is named with the Kubernetes pod it runs in
  (its cgroup, pod UID), so exactly those pods can be drained first; guardian itself, PID
  1 and kernel threads are never among what would be stopped;
- the GPU drives a display (display active, or display mode on);
- MIG mode is on (its GPU instances must be destroyed before a reset);
- NVLink: before the Ampere architecture, GPUs connected by NVLink are reset only
  together with their peers (nvidia-smi(1), ``-r``), and guardian resets one GPU;
- anything NVML could not say (unknown is never taken as "free").

A reset that nvidia-smi refuses or that does not end within ``timeout`` is a failed
outcome: a ladder's next step (``node.reboot``) then runs after its ``verify``. After a
reset NVML is asked again: verified when the GPU answers and is not lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

from guardian.core.durations import Duration
from guardian.hostio.nvml import Nvml, NvmlUnavailable, ResetFacts, normal_pci
from guardian.hostio.procfs import pod_uid_of, read_proc_stat
from guardian.hostio.programs import Ran, run_bounded
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, SandboxNeeds, Step

AMPERE = 7  # nvml.h NVML_DEVICE_ARCH_AMPERE


class ResetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str = Field("", description="the GPU to reset: its PCI bus id, UUID or index; "
                     "default: the one the rule's matched member names (pci_bus_id, UUID, "
                     "gpu or pci label)")
    nvidia_smi: list[str] = Field(["nvidia-smi"], min_length=1,
                                  description="argv that runs nvidia-smi")
    timeout: Duration = Field(120.0, gt=0, le=600, description="the reset's time limit")


class ResetPayload(TypedDict):
    target: NotRequired[str]  # the GPU's PCI bus id, as NVML writes it


def _targets(ctx: ActionContext) -> list[str]:
    """The GPUs the matched members name, each once (PCI address, UUID, or index)."""
    out: list[str] = []
    for key in (ctx.matched or {}):
        labels = dict(key)
        pci = labels.get("pci_bus_id") or (labels["pci"] + ".0" if labels.get("pci") else "")
        named = normal_pci(pci) if pci else labels.get("UUID") or labels.get("gpu", "")
        if named and named not in out:
            out.append(named)
    return out


class GpuReset(Action[ResetParams, ResetPayload]):
    """Reset one NVIDIA GPU when nothing uses it (see the module docstring)."""

    name: ClassVar[str] = "gpu.reset"
    Params = ResetParams
    #: how NVML is reached and nvidia-smi run (tests hand in a recorded NVML and a runner)
    reader: Callable[[], Nvml] = Nvml
    runner: Callable[[list[str], float], Ran] = staticmethod(run_bounded)

    def sandbox_needs(self) -> SandboxNeeds:
        """nvidia-smi and NVML open the NVIDIA device nodes."""
        return SandboxNeeds(devices=("/dev/nvidiactl", "/dev/nvidia[0-9]*"))

    def plan(self, ctx: ActionContext) -> Plan[ResetPayload]:
        plan: Plan[ResetPayload] = Plan(self.name, ctx.rule, data={})
        if ctx.kind == "resolved":
            plan.note = "nothing to undo: a reset is not taken back"
            return plan
        targets = [self.params.gpu] if self.params.gpu else _targets(ctx)
        if not targets:
            plan.refused.append("no GPU named: the rule's matched members carry no "
                                "pci_bus_id, UUID, gpu or pci label, and no `gpu` is set")
            return plan
        if len(targets) > 1:
            plan.refused.append(f"{len(targets)} GPUs matched ({', '.join(targets)}): "
                                f"gpu.reset resets one GPU at a time")
            return plan
        nvml = self.reader()
        try:
            nvml.start()
        except NvmlUnavailable as exc:
            plan.refused.append(f"cannot ask NVML: {exc}")
            return plan
        try:
            found = nvml.find(targets[0])
            if found is None:
                plan.refused.append(f"no GPU {targets[0]} answers NVML (gone, or lost: "
                                    f"a reset cannot reach a GPU off the bus)")
                return plan
            facts = nvml.reset_facts(*found)
        finally:
            nvml.close()
        plan.refused += self._refusals(facts, ctx)
        if plan.refused:
            return plan
        plan.data["target"] = facts.pci_bus_id
        argv = [*self.params.nvidia_smi, "--gpu-reset", "-i", facts.pci_bus_id]
        plan.steps.append(Step(f"GPU {facts.index} ({facts.pci_bus_id}, {facts.uuid})",
                               f"{' '.join(argv)} (within {self.params.timeout:g}s)"))
        plan.note = "verified when the GPU answers NVML afterwards and is not lost"
        return plan

    def _refusals(self, f: ResetFacts, ctx: ActionContext) -> list[str]:
        out = [f"NVML could not say: {', '.join(str(x) for x in f.failures)}"] \
            if f.failures else []
        if f.pids is None:
            out.append("the processes on the GPU are unknown")
        elif f.pids:
            out.append("processes use the GPU: " + "; ".join(
                self._who(p, ctx) for p in sorted(f.pids)) + " (drain those pods first)")
        if f.display_active or f.display_mode:
            out.append("the GPU drives a display (display active or display mode on)")
        if f.mig_enabled:
            out.append("MIG mode is on: its GPU instances must be destroyed before a reset")
        if f.active_nvlinks and (f.architecture is None or f.architecture < AMPERE):
            out.append(f"{f.active_nvlinks} active NVLink(s) on a GPU older than Ampere "
                       "(or of unknown architecture): its NVLink peers must be reset "
                       "together with it")
        return out

    def _who(self, pid: int, ctx: ActionContext) -> str:
        """A process on the GPU in words: its PID, name, and pod (or why it is never a
        target)."""
        stat = read_proc_stat(ctx.host.proc, pid)
        name = f" ({stat.comm})" if stat is not None else ""
        if pid == 1 or pid == ctx.own_pid or (stat is not None and stat.is_kernel_thread):
            return f"PID {pid}{name}, never stopped by guardian"
        pod = pod_uid_of(ctx.host.proc, pid)
        return f"PID {pid}{name} in pod {pod}" if pod else f"PID {pid}{name}, not in a pod"

    def apply(self, plan: Plan[ResetPayload], ctx: ActionContext) -> Outcome:
        if "target" not in plan.data:
            return Outcome(ok=True, verified=None, detail=plan.note or "nothing to do")
        target = plan.data["target"]
        argv = [*self.params.nvidia_smi, "--gpu-reset", "-i", target]
        ran = self.runner(argv, self.params.timeout)
        said = (ran.stdout + ran.stderr).decode("utf-8", "replace").strip()[-500:]
        data: dict[str, Any] = {"argv": argv, "status": ran.status,
                                "seconds": round(ran.seconds, 3), "output": said}
        if ran.status != 0:
            why = ran.error or ("timed out" if ran.timed_out else f"exit {ran.status}")
            return Outcome(ok=False, verified=False, data=data,
                           error=f"GPU {target} not reset: nvidia-smi {why}"
                                 + (f": {said}" if said else ""))
        return Outcome(ok=True, verified=self._answers(target), data=data,
                       detail=f"GPU {target} reset ({ran.seconds:.1f}s)")

    def _answers(self, target: str) -> bool | None:
        """Whether the GPU answers NVML after the reset (None: NVML cannot be asked)."""
        nvml = self.reader()
        try:
            nvml.start()
        except NvmlUnavailable:
            return None
        try:
            found = nvml.find(target)
            return found is not None and not nvml.reset_facts(*found).failures
        finally:
            nvml.close()
