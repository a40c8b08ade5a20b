"""The ``gpu.reset`` action: reset one NVIDIA GPU with ``nvidia-smi --gpu-reset -i <PCI
address>`` (an argv, never a shell, within ``timeout``), when NVML says it may be.

The GPU is the one the rule's matched member names (its ``pci_bus_id``, ``UUID`` or
``gpu`` index, as the gpu source labels it; the kernel log's ``pci``), or the ``gpu``
parameter. nvidia-smi(1), ``-r, --gpu-reset``, says what a reset needs; the plan asks
NVML and refuses, with why (each refusal quotes the man page beside it, below):

- no NVIDIA driver or library (NVML cannot start: a library not found is said with the
  node's GPUs and where it is missing, a pod's container or the host,
  :mod:`guardian.hostio.gpuhost`), or no such GPU (a GPU off the bus does not answer);
- nvidia-smi cannot be run (not found on the runner's PATH, or not executable: in a pod
  the NVIDIA container runtime brings it with the ``utility`` capability);
- more than one GPU matched (one reset at a time: the ladder climbs per episode);
- processes on the GPU (NVML's compute and graphics processes), each named with the
  Kubernetes pod its cgroup places it in (pod UID). With ``evict_pods`` (the k8s extra)
  exactly those pods are evicted first, as ``kube.drain`` evicts (the Eviction
  subresource: PodDisruptionBudgets hold, a 429 is retried until ``wait``), and the
  reset waits until they are gone and NVML lists no process on the GPU. A process in no
  pod (a host process), one not in /proc, PID 1, a kernel thread or guardian itself is
  never stopped: it refuses the reset, as do a pod guardian never evicts (a DaemonSet's,
  a static pod's mirror, a protected namespace's) and kube.drain's own refusals;
- the GPU drives a display (display active, or display mode on);
- MIG mode is on;
- NVLink: before the Ampere architecture, and on an Ampere GPU whose NVLinks reach an
  NVSwitch while Fabric Manager does not run, its NVLink peers must be reset in the same
  command, and guardian resets one GPU;
- anything NVML could not say (unknown is never taken as "free").

What NVML cannot show: nvidia-smi(1) also counts monitoring applications that hold the
GPU (another nvidia-smi, DCGM) as users; NVML lists none of them, so such a reset fails
at nvidia-smi and the ladder climbs. guardian is one such application itself (the gpu
source keeps an NVML session open): while nvidia-smi runs, every NVML session of this
process is shut down, each nvmlInit matched by its nvmlShutdown (NVML counts them, and
lets the devices go at zero), and none opens until it has ended
(:class:`guardian.hostio.nvml.Sessions`); the gpu source says why it has no values
meanwhile and reads anew at its next collect. Not verified on a real GPU.

A reset that nvidia-smi refuses or that does not end within ``timeout`` is a failed
outcome: a ladder's next step (``node.reboot``) then runs after its ``verify``. After a
reset NVML is asked again: verified when the GPU answers and is not lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import NotRequired, TypedDict

from guardian.core.durations import Duration
from guardian.hostio.gpuhost import GPU_NODES_DOC, library_missing
from guardian.hostio.host import Host
from guardian.hostio.nvidiadev import DEVICE_GROUPS, cgroup_refusal
from guardian.hostio.nvml import (
    AMPERE,
    Nvml,
    NvmlReleased,
    NvmlUnavailable,
    ResetFacts,
    normal_pci,
)
from guardian.hostio.procfs import all_stats, pod_uid_of, read_proc_stat
from guardian.hostio.programs import MINIMAL_ENV, Ran, cannot_run, run_bounded
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)

if TYPE_CHECKING:  # imported when used: Kubernetes is an extra
    from guardian.kube.gpupods import GpuPods, PodsParams

#: Fabric Manager's daemon, nv-fabricmanager, as /proc/<pid>/stat's comm keeps it (the
#: kernel's TASK_COMM_LEN: 15 characters)
FABRIC_MANAGER = "nv-fabricmanage"


class ResetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str = Field("", description="the GPU to reset: its PCI bus id, UUID or index; "
                     "default: the one the rule's matched member names (pci_bus_id, UUID, "
                     "gpu or pci label)")
    nvidia_smi: list[str] = Field(["nvidia-smi"], min_length=1,
                                  description="argv that runs nvidia-smi")
    timeout: Duration = Field(120.0, gt=0, le=600, description="the reset's time limit")
    evict_pods: bool | dict[str, Any] = Field(
        False, description="first evict the pods whose processes use the GPU (the k8s "
        "extra), through the Eviction subresource as kube.drain does, and wait until "
        "they are gone and NVML lists no process on the GPU: true, or a table of "
        "kube.drain's parameters (wait: 150 s; grace_period, retry_delay, interval, "
        "delete_emptydir_data, evict_unmanaged, force, force_wait, kubeconfig, node) and "
        "protected_namespaces (kube-system) / allow_protected; wait (+ force_wait) + "
        "timeout must be below [service] apply_timeout")

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, v: Any) -> Any:
        """An index may be written as a number (``gpu = 0``, ``--set gpu=0``)."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else v

    @field_validator("evict_pods")
    @classmethod
    def _evict_pods(cls, v: bool | dict[str, Any]) -> bool | dict[str, Any]:
        if v is False:
            return v
        try:
            from guardian.kube.gpupods import PodsParams
        except ImportError as exc:
            raise ValueError(f"evict_pods needs the Kubernetes extra: {exc}") from None
        PodsParams.model_validate({} if v is True else v)
        return v

    def pods(self) -> PodsParams | None:
        """``evict_pods`` as kube's parameters; None when it is off."""
        if self.evict_pods is False:
            return None
        from guardian.kube.gpupods import PodsParams
        return PodsParams.model_validate({} if self.evict_pods is True else self.evict_pods)


class ResetPayload(TypedDict):
    target: NotRequired[str]  # the GPU's PCI bus id, as NVML writes it
    pods: NotRequired[list[list[str]]]  # [namespace, name, uid] evicted first


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
    """Reset one NVIDIA GPU when nothing uses it, optionally evicting the pods that use
    it first (see the module docstring)."""

    name: ClassVar[str] = "gpu.reset"
    Params = ResetParams
    #: how NVML is reached and nvidia-smi run (tests hand in a recorded NVML and a runner)
    reader: Callable[[], Nvml] = Nvml
    runner: Callable[[list[str], float], Ran] = staticmethod(run_bounded)
    #: why a program cannot be run on the runner's PATH, None when it can
    runnable: Callable[[str], str | None] = staticmethod(cannot_run)

    def sandbox_needs(self) -> SandboxNeeds:
        """nvidia-smi and NVML open the NVIDIA device nodes, /dev/nvidiactl and
        /dev/nvidia<N>, granted by their /proc/devices groups (a path takes no glob:
        systemd stats it); the reset is a privileged request of the driver (nvidia-smi(1):
        "Requires root"; the open driver's os_is_administrator() is
        capable(CAP_SYS_ADMIN)), so it needs CAP_SYS_ADMIN in the bounding set (not
        verified on a GPU in this project); evict_pods reaches the Kubernetes API
        server."""
        devices = tuple(f"{group} rw" for group in DEVICE_GROUPS)
        caps = ("CAP_SYS_ADMIN",)
        pods = self.params.pods()
        if pods is None:
            return SandboxNeeds(devices=devices, capabilities=caps)
        from guardian.kube.actions import api_server
        return SandboxNeeds(devices=devices, capabilities=caps, egress=(api_server(pods),))

    def _pods(self) -> GpuPods:
        from guardian.kube.gpupods import GpuPods
        pods = self.params.pods()
        assert pods is not None
        return GpuPods(pods)

    def _facts(self, target: str, host: Host | None = None) -> ResetFacts | str:
        """What NVML says of the GPU, or why it cannot be asked (a library not found:
        with the node's GPUs and where it is missing, when ``host`` is given)."""
        nvml = self.reader()
        try:
            nvml.start()
        except NvmlUnavailable as exc:
            if exc.error == "LIBRARY_NOT_FOUND" and host is not None:
                return f"cannot ask NVML: {library_missing(host)}"
            refused = cgroup_refusal(host.root) if host is not None and \
                not isinstance(exc, NvmlReleased) else ""
            return f"cannot ask NVML: {exc}" + (f"; {refused}" if refused else "")
        try:
            found = nvml.find(target)
            if found is None:
                return (f"no GPU {target} answers NVML (gone, or lost: a reset cannot reach "
                        f"a GPU off the bus)")
            return nvml.reset_facts(*found)
        finally:
            nvml.close()

    def plan(self, ctx: ActionContext) -> Plan[ResetPayload]:
        plan: Plan[ResetPayload] = Plan(self.name, ctx.rule, data={})
        if ctx.kind == "resolved":
            plan.note = "nothing to undo: a reset is not taken back"
            return plan
        targets = [self.params.gpu] if self.params.gpu else _targets(ctx)
        if not targets and ctx.kind == "manual":  # guardian act: no rule names one
            plan.refused.append("no GPU named: give one with --set gpu=<PCI bus id, UUID "
                                "or index> (guardian act has no rule to name it)")
            return plan
        if not targets:
            plan.refused.append("no GPU named: the rule's matched members carry no "
                                "pci_bus_id, UUID, gpu or pci label, and no `gpu` is set")
            return plan
        if len(targets) > 1:
            plan.refused.append(f"{len(targets)} GPUs matched ({', '.join(targets)}): "
                                f"gpu.reset resets one GPU at a time")
            return plan
        facts = self._facts(targets[0], ctx.host)
        if isinstance(facts, str):
            plan.refused.append(facts)
            return plan
        plan.refused += self._refusals(facts, ctx)
        smi = self.params.nvidia_smi[0]
        if (why := self.runnable(smi)) is not None:
            plan.refused.append(f"{smi} {why} (PATH {MINIMAL_ENV['PATH']}): it comes with "
                                f"the NVIDIA driver; in a pod, the NVIDIA container runtime "
                                f"puts it there with NVIDIA_DRIVER_CAPABILITIES=utility "
                                f"(see {GPU_NODES_DOC})")
        holders: dict[str, list[str]] = {}
        if facts.pids:
            holders, refused = self._holders(facts.pids, ctx)
            plan.refused += refused
        if plan.refused:
            return plan
        where = f"GPU {facts.index} ({facts.pci_bus_id}, {facts.uuid})"
        plan.data["target"] = facts.pci_bus_id
        if holders:  # evict_pods, every process in a pod: those pods go first
            p = self.params.pods()
            assert p is not None
            found = self._pods().find(holders)
            if found.refused:
                plan.refused += found.refused
                return plan
            grace = f"{p.grace_period} s" if p.grace_period is not None else "its own"
            by_uid = {uid: who for uid, who in holders.items()}
            plan.data["pods"] = []
            for (ns, name), uid in sorted(found.evict.items()):
                plan.data["pods"].append([ns, name, uid])
                plan.steps.append(Step(f"pod {ns}/{name}", f"evict (policy/v1 Eviction, "
                                       f"grace {grace}; it holds {where}: "
                                       f"{', '.join(by_uid[uid])}); wait until gone"))
            force = f", then deleted and waited on {p.force_wait:g}s more" if p.force \
                else ""
            plan.note = (f"{len(found.evict)} pod(s) on node {found.node} evicted within "
                         f"{p.wait:g}s{force}, and the GPU waited on until NVML lists no "
                         f"process on it; ")
        argv = [*self.params.nvidia_smi, "--gpu-reset", "-i", facts.pci_bus_id]
        plan.steps.append(Step(where, f"{' '.join(argv)} (within {self.params.timeout:g}s)"))
        plan.note += "verified when the GPU answers NVML afterwards and is not lost"
        return plan

    def _refusals(self, f: ResetFacts, ctx: ActionContext) -> list[str]:
        """What NVML says that forbids a reset; the processes on the GPU apart."""
        out = [f"NVML could not say: {', '.join(str(x) for x in f.failures)}"] \
            if f.failures else []
        # nvidia-smi(1), -r: "There can't be any applications using these devices (e.g.
        # CUDA application, graphics application like X server, monitoring application
        # like other instance of nvidia-smi)"
        if f.pids is None:
            out.append("the processes on the GPU are unknown")
        elif f.pids and self.params.evict_pods is False:
            out.append("processes use the GPU: " + "; ".join(
                self._who(p, ctx) for p in sorted(f.pids)) + " (evict_pods = true evicts "
                "those pods first)")
        # the same: "graphics application like X server": a display the GPU drives
        if f.display_active or f.display_mode:
            out.append("the GPU drives a display (display active or display mode on)")
        # nvml.h, nvmlDeviceGetComputeRunningProcesses_v3: "In MIG mode, if device handle
        # is provided, the API returns aggregate information, only if the caller has
        # appropriate privileges": which processes use its instances may go unseen
        if f.mig_enabled:
            out.append("MIG mode is on: the processes of its GPU instances are not all "
                       "seen through the GPU (nvml.h), so gpu.reset does not reset it")
        out += self._nvlink(f, ctx)
        return out

    def _nvlink(self, f: ResetFacts, ctx: ActionContext) -> list[str]:
        """nvidia-smi(1), -r: "Starting with the NVIDIA Ampere architecture, GPUs with
        NVLink connections can be individually reset. On Ampere NVSwitch systems, Fabric
        Manager is required to facilitate reset. On Hopper and later NVSwitch systems,
        the dependency on Fabric Manager to facilitate reset is removed. If Fabric
        Manager is not running, or if any of the GPUs being reset are based on an
        architecture preceding the NVIDIA Ampere architecture, any GPUs with NVLink
        connections to a GPU being reset must also be reset in the same command" (its
        tables: direct-connected Ampere+ GPUs reset individually; on NVSwitch systems
        Ampere+ individually with Fabric Manager running, Hopper+ without it too)."""
        if not f.active_nvlinks:  # none, or unknown: NVML's failure is said already
            return []
        if f.architecture is None:
            return [f"{f.active_nvlinks} active NVLink(s) on a GPU of unknown architecture: "
                    "before Ampere its NVLink peers must be reset together with it"]
        if f.architecture < AMPERE:
            return [f"{f.active_nvlinks} active NVLink(s) on a GPU older than Ampere: its "
                    "NVLink peers must be reset in the same command (nvidia-smi(1), -r)"]
        if f.architecture > AMPERE:
            return []
        if f.nvswitch is None:
            return [f"an Ampere GPU with {f.active_nvlinks} active NVLink(s) whose remote "
                    "device is unknown: on an NVSwitch system its peers must be reset with "
                    "it unless Fabric Manager runs"]
        if not f.nvswitch:
            return []
        try:
            runs = any(st.comm == FABRIC_MANAGER
                       for st in all_stats(ctx.host.proc, strict=False))
        except OSError as exc:
            return [f"an Ampere GPU on NVSwitches, and whether Fabric Manager runs cannot be "
                    f"read ({ctx.host.proc}: {exc.strerror or exc})"]
        if not runs:
            return ["an Ampere GPU on NVSwitches while Fabric Manager (nv-fabricmanager) "
                    "does not run: its NVLink peers must be reset in the same command "
                    "(nvidia-smi(1), -r)"]
        return []

    def _holders(self, pids: list[int], ctx: ActionContext
                 ) -> tuple[dict[str, list[str]], list[str]]:
        """With evict_pods: the pods (UID -> its processes on the GPU, in words) whose
        processes use the GPU, and why a process that is in none refuses the reset."""
        if self.params.evict_pods is False:
            return {}, []
        holders: dict[str, list[str]] = {}
        refused = []
        for pid in sorted(pids):
            stat = read_proc_stat(ctx.host.proc, pid)
            uid = pod_uid_of(ctx.host.proc, pid) if stat is not None else None
            if stat is None or uid is None or self._never(pid, ctx):
                refused.append(f"{self._who(pid, ctx)} uses the GPU")
            else:
                holders.setdefault(uid, []).append(f"PID {pid} ({stat.comm})")
        return holders, refused

    @staticmethod
    def _never(pid: int, ctx: ActionContext) -> bool:
        stat = read_proc_stat(ctx.host.proc, pid)
        return pid == 1 or pid == ctx.own_pid or (stat is not None and stat.is_kernel_thread)

    def _who(self, pid: int, ctx: ActionContext) -> str:
        """A process on the GPU in words: its PID, name, and pod (or why it is never a
        target)."""
        stat = read_proc_stat(ctx.host.proc, pid)
        if stat is None:
            return (f"PID {pid}, not in {ctx.host.proc} (gone since NVML listed it, or in "
                    f"a PID namespace guardian does not see)")
        name = f" ({stat.comm})"
        if self._never(pid, ctx):
            return f"PID {pid}{name}, never stopped by guardian"
        pod = pod_uid_of(ctx.host.proc, pid)
        return f"PID {pid}{name} in pod {pod}" if pod else \
            f"PID {pid}{name}, not in a pod (a host process)"

    def apply(self, plan: Plan[ResetPayload], ctx: ActionContext) -> Outcome:
        if "target" not in plan.data:
            return Outcome(ok=True, verified=None, detail=plan.note or "nothing to do")
        target = plan.data["target"]
        data: dict[str, Any] = {}
        if plan.data.get("pods"):
            p = self.params.pods()
            assert p is not None
            t0 = time.monotonic()
            deadline = t0 + p.wait + (p.force_wait if p.force else 0.0)
            pods = {(ns, name): uid for ns, name, uid in plan.data["pods"]}
            data["pods"], left = self._pods().evict(pods, t0 + p.wait)
            if left:
                return Outcome(ok=False, verified=False, data=data,
                               error=f"GPU {target} not reset: {len(left)} pod(s) still "
                                     f"there after {time.monotonic() - t0:.0f}s: " + "; ".join(
                                         f"{k[0]}/{k[1]}: {w}" for k, w in sorted(left.items())))
            busy = self._wait_free(target, deadline, p.interval)
            if busy:
                return Outcome(ok=False, verified=False, data=data,
                               error=f"GPU {target} not reset: its pods are gone but "
                                     f"{busy} after {time.monotonic() - t0:.0f}s")
        argv = [*self.params.nvidia_smi, "--gpu-reset", "-i", target]
        # nvidia-smi(1), -r: "There can't be any applications using these devices (e.g.
        # ... monitoring application like other instance of nvidia-smi)": guardian's own
        # NVML sessions are shut down while it runs, and open again after
        try:
            with self.reader().sessions.released(
                    f"NVML released for a GPU reset of {normal_pci(target)}") as released:
                ran = self.runner(argv, self.params.timeout)
        except NvmlReleased as exc:
            return Outcome(ok=False, verified=False, data=data,
                           error=f"GPU {target} not reset: another GPU reset holds NVML "
                                 f"released ({exc})")
        said = (ran.stdout + ran.stderr).decode("utf-8", "replace").strip()[-500:]
        data.update({"argv": argv, "status": ran.status, "seconds": round(ran.seconds, 3),
                     "output": said, "nvml_sessions_released": released.sessions})
        if released.failures:
            data["nvml_shutdown_failures"] = released.failures
        if ran.status != 0:
            why = ran.error or ("timed out" if ran.timed_out else f"exit {ran.status}")
            unshut = (f" (guardian's own NVML session may still hold the GPU: "
                      f"{'; '.join(released.failures)})" if released.failures else "")
            return Outcome(ok=False, verified=False, data=data,
                           error=f"GPU {target} not reset: nvidia-smi {why}"
                                 + (f": {said}" if said else "") + unshut)
        return Outcome(ok=True, verified=self._answers(target), data=data,
                       detail=f"GPU {target} reset ({ran.seconds:.1f}s)"
                              + (f" after {len(plan.data['pods'])} pod(s) evicted"
                                 if plan.data.get("pods") else ""))

    def _wait_free(self, target: str, deadline: float, interval: float) -> str:
        """Polls NVML until it lists no process on the GPU, or ``deadline``: "" when
        free, else what is still there (or why NVML cannot say)."""
        while True:
            facts = self._facts(target)
            if isinstance(facts, str):
                return facts
            if facts.pids is None:
                busy = "the processes on it are unknown (NVML could not say)"
            elif facts.pids:
                busy = f"NVML still lists PID(s) {', '.join(map(str, sorted(facts.pids)))}"
            else:
                return ""
            if time.monotonic() >= deadline:
                return busy
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

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


def check(rules: list[Any], apply_timeout: float) -> list[tuple[Any, str]]:
    """``guardian check``'s errors for ``gpu.reset`` with ``evict_pods`` (an action, an
    escalation or a ladder's step): the eviction's waits and the reset's ``timeout``
    must end below the service's ``apply_timeout`` (the executor would give the apply up
    while it goes on), and the Kubernetes API must be reachable with credentials found
    here as the service finds them (its kubeconfig, the pod's service account,
    $KUBECONFIG)."""
    from guardian.kube.client import make_client
    from guardian.kube.gpupods import pods_seconds

    out = []
    for rule in rules:
        for a in rule.bound_actions():
            if a.use != "gpu.reset":
                continue
            params = a.action.params
            pods = params.pods()
            if pods is None:
                continue
            took = pods_seconds(pods) + params.timeout
            if took >= apply_timeout:
                waits = f"wait {pods.wait:g}s" + (f" + force_wait {pods.force_wait:g}s"
                                                  if pods.force else "")
                out.append((rule, f"rule {rule.spec.name!r}: gpu.reset: evict_pods' "
                                  f"{waits} + timeout {params.timeout:g}s = {took:g}s is "
                                  f"not below [service] apply_timeout ({apply_timeout:g}s):"
                                  f" the apply would be given up while it goes on; "
                                  f"shorten them or raise apply_timeout"))
            try:
                make_client(pods)
            except Exception as exc:  # lightkube's: no kubeconfig, no service account
                first = str(exc).splitlines()[0] if str(exc) else repr(exc)
                out.append((rule, f"rule {rule.spec.name!r}: gpu.reset: evict_pods needs "
                                  f"the Kubernetes API, and no credentials reach it here: "
                                  f"{first} (in a pod: the service account's token; else "
                                  f"a kubeconfig)"))
    return out
