"""The ``evidence.profile`` action: when a rule fires, capture *where in the kernel* the
time goes, as the incident needed (kubelet in ``mem_cgroup_nr_lru_pages``).

A bounded CPU profile with kernel and user stacks of the whole node (``-a``; ``-C`` only
the ``cores`` configured: the scheduler moves a burner off the core a rule matched, so the
matched ``cpu`` members are kept as metadata, never profiled alone), through ``perf record
-g`` and ``perf script``; without perf (or without the right to use it), by sampling
``/proc/<pid>/task/<tid>/stack`` and ``wchan`` of the tasks burning system time. Each
capture is a bundle, ``state_dir``/evidence/<time>-<rule>/: ``stacks.folded``,
``flamegraph.svg``, ``profile.speedscope.json``, ``kmsg.txt`` (the kernel log near the
moment), ``tasks.json`` (the top kernel-time tasks, their units and cgroups),
``flight.folded`` (the minutes before, when a flight recorder runs) and ``summary.json``
(method, duration, samples, the hottest kernel functions); the service adds
``signals.rec.gz``, its recent history as a recording ``guardian replay`` reads.

Rails: one capture at a time (a lock file), a cooldown and a budget of its own (recorded in
``evidence/captures.json``; an unreadable record refuses, fail closed), the capture's
time and rate bounded, every run of perf bounded by a timeout, the bundles bounded in
count and bytes (oldest removed first). It changes nothing on the host. The bundles' files,
the lock and the record are handled by :mod:`guardian.hostio.bundles`.
"""

from __future__ import annotations

import errno
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from guardian.core import flamegraph
from guardian.core.durations import Duration
from guardian.hostio import bundles as store
from guardian.hostio import irq, profile
from guardian.hostio.bundles import EVIDENCE_DIR, SUMMARY
from guardian.hostio.host import resolve_under
from guardian.hostio.kmsg import RECORD_MAX, KmsgDevice, record_fields
from guardian.hostio.procfs import CLK_TCK, cgroup_of, real_uid
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_UNIT = re.compile(r"([^/]+\.(?:service|scope))$")


class EvidenceParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: Duration = Field(2.0, gt=0, le=120, description="how long the profile runs")
    frequency: int = Field(99, ge=1, le=999, description="samples a second per CPU "
                           "(perf -F; the fallback samples each task at this rate)")
    cores: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="the CPUs to profile (perf -C; online CPUs only); default: "
        "every CPU (-a), the `cpu` members the rule's evidence matched kept as "
        "`matched_cores`")
    method: Literal["auto", "perf", "proc"] = Field(
        "auto", description="perf: perf record; proc: sample /proc/<pid>/stack and wchan "
        "of the tasks burning system time; auto: perf where it can run, else proc")
    perf: str = Field("perf", description="the perf program (a name on the minimal PATH, "
                      "or an absolute path)")
    top: int = Field(10, ge=1, le=100, description="tasks kept in tasks.json (and "
                     "sampled by the fallback)")
    state_dir: str = Field("/var/lib/guardian", description="bundles go to "
                           "STATE_DIR/evidence/<time>-<rule>/ (guardian's own directory, "
                           "writable by no one else; `guardian why` looks in the directory "
                           "of `[service] state_file`: set both alike)")
    keep: int = Field(10, ge=1, le=1000, description="bundles kept (oldest removed first)")
    max_bytes: int = Field(64 << 20, ge=1 << 20, description="bytes all bundles may take "
                           "(oldest removed first)")
    max_script_bytes: int = Field(32 << 20, ge=1 << 16, description="bytes of perf "
                                  "script's output read (the rest is dropped)")
    cooldown: Duration = Field(300.0, ge=0, description="no capture sooner than this after "
                               "the last one")
    budget: int = Field(6, ge=1, le=1000, description="captures within `budget_window`")
    budget_window: Duration = Field(3600.0, gt=0)
    timeout: Duration = Field(30.0, gt=0, le=300, description="the longest perf may run "
                              "past `seconds`, and perf script in all")
    kmsg: str = Field("/dev/kmsg", description="the kernel log read for the lines near the "
                      "moment")
    kmsg_seconds: Duration = Field(300.0, ge=0, description="kernel-log lines this recent")
    kmsg_lines: int = Field(200, ge=0, le=10000)
    flight: bool = Field(True, description="add the flight recorder's minutes before, when "
                         "one runs")


class EvidencePayload(TypedDict):
    method: str
    cores: list[int] | None
    matched_cores: list[int] | None
    bundle: str
    perf: str
    notes: list[str]


def _cores_of(ctx: ActionContext) -> list[int] | None:
    """The ``cpu`` members of the rule's matched family (a hot core), if any."""
    matched = ctx.matched
    if not matched:
        return None
    cores = set()
    for labels in matched:
        for k, v in labels:
            if k == "cpu" and v.isdigit():
                cores.add(int(v))
    return sorted(cores) or None


def _bytes(n: int) -> str:
    """``67108864`` → ``64 MiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} bytes"


def unit_of_cgroup(cgroup: str) -> str:
    """The systemd unit (service or scope: a pod's) of a cgroup path, or ""."""
    for part in reversed(cgroup.rstrip("/").split("/")):
        m = _UNIT.match(part)
        if m:
            return m[1]
    return ""


class EvidenceProfile(Action[EvidenceParams, EvidencePayload]):
    """Capture a bounded CPU profile (kernel and user stacks) and the moment around it."""

    name: ClassVar[str] = "evidence.profile"
    Params = EvidenceParams
    disruptive: ClassVar[bool] = False

    def sandbox_needs(self) -> SandboxNeeds:
        # perf: CAP_PERFMON (or CAP_SYS_ADMIN) for a CPU-wide profile, CAP_SYSLOG for
        # kernel symbols; the fallback's /proc/<pid>/stack: CAP_SYS_ADMIN (and
        # CAP_SYS_PTRACE for other users' tasks)
        caps = ("CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYSLOG") \
            if self.params.method == "proc" else ("CAP_PERFMON", "CAP_SYSLOG")
        # perf_event_open: in systemd's @debug, which the shipped unit's filter refuses
        calls = () if self.params.method == "proc" else ("perf_event_open",)
        return SandboxNeeds(writes=(self.params.state_dir,), capabilities=caps,
                            syscalls=calls)

    # -- where ---------------------------------------------------------------------------
    def _state(self, ctx: ActionContext) -> Path:
        return resolve_under(ctx.host.root, self.params.state_dir)

    # -- plan ----------------------------------------------------------------------------
    def plan(self, ctx: ActionContext) -> Plan[EvidencePayload]:
        p = self.params
        proc = ctx.host.proc
        cores = sorted(set(p.cores)) if p.cores else None
        matched = _cores_of(ctx)
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        base = self._state(ctx) / EVIDENCE_DIR
        bundle = base / f"{stamp}-{_SAFE.sub('_', ctx.rule)[:60]}"
        notes: list[str] = []
        plan: Plan[EvidencePayload] = Plan(self.name, ctx.rule, data={
            "method": "", "cores": cores, "matched_cores": matched, "bundle": str(bundle),
            "perf": p.perf, "notes": notes})
        if cores:
            try:
                online = set(irq.online_cpus(ctx.host))
            except (OSError, ValueError):
                plan.refused.append("cannot read the online CPUs "
                                    "(/sys/devices/system/cpu/online) to check `cores`")
            else:
                if not set(cores) <= online:
                    plan.refused.append(f"cores {sorted(set(cores) - online)} are not online "
                                        f"CPUs of this machine "
                                        f"({irq.format_cpu_list(sorted(online))})")
        perf_no = profile.perf_refusals(p.perf, proc) if p.method != "proc" else []
        if p.method == "perf" and perf_no:
            plan.refused += [f"cannot profile with perf on this host: {w}" for w in perf_no]
        method = "perf" if p.method == "perf" or (p.method == "auto" and not perf_no) \
            else "proc"
        if p.method == "auto" and perf_no:
            notes.append("perf cannot run here (" + "; ".join(perf_no) + "): sampling "
                         "/proc/<pid>/stack instead")
        hidden = profile.kernel_symbols_hidden(proc)
        if hidden:
            notes.append(hidden)
        if method == "proc":
            no_stack = profile.proc_stack_refusal(proc)
            if no_stack:
                notes.append(no_stack)
        plan.data["method"] = method
        taken: list[float] = []
        try:
            with store.EvidenceDir.open(self._state(ctx)) as ev:
                try:
                    taken = ev.read_captures()
                except ValueError as exc:
                    plan.refused.append(f"{exc}: no capture until it is fixed or removed")
                if ev.locked():
                    plan.refused.append("another capture is running (its lock is held)")
        except store.Untrusted as exc:
            plan.refused.append(f"the evidence directory cannot be trusted: {exc.strerror}"
                                " (root writes there: it must be guardian's own and "
                                "writable by no one else)")
        except FileNotFoundError:
            pass  # made at the first capture
        except OSError as exc:
            plan.refused.append(f"cannot use {base}: {exc.strerror or exc}")
        last = max(taken, default=None)
        if last is not None and now - last < p.cooldown:
            plan.refused.append(f"cooldown: the last capture was {now - last:.0f}s ago, "
                                f"the cooldown is {p.cooldown:g}s")
        recent = [t for t in taken if now - t < p.budget_window]
        if len(recent) >= p.budget:
            plan.refused.append(f"budget: {len(recent)} captures within "
                                f"{p.budget_window:g}s, at most {p.budget}")
        where = f"cpu {','.join(map(str, cores))}" if cores else "every cpu"
        if matched and not cores:
            where += f" (the rule matched cpu {','.join(map(str, matched))})"
        if method == "perf":
            argv = profile.perf_record_argv(p.perf, cores, p.frequency, p.seconds,
                                            bundle / "perf.data")
            plan.steps.append(Step(where, " ".join(argv) + f" (timeout "
                                   f"{p.seconds + p.timeout:g}s), then perf script → "
                                   "stacks.folded"))
        else:
            plan.steps.append(Step(where, f"sample /proc/<pid>/task/<tid>/stack and wchan "
                                   f"of the top {p.top} system-time tasks at "
                                   f"{p.frequency} Hz for {p.seconds:g}s → stacks.folded"))
        # a manual `guardian act` runs in its own process: never the service's recorder
        flight = p.flight and ctx.kind != "manual"
        plan.steps.append(Step(str(bundle), "write stacks.folded, flamegraph.svg, "
                               "profile.speedscope.json, kmsg.txt, tasks.json, "
                               "summary.json" + (", flight.folded (when a flight recorder runs)"
                                                  if flight else "")
                               + f"; keep {p.keep} bundles, {_bytes(p.max_bytes)}"))
        plan.note = "; ".join(notes)
        return plan

    # -- apply ---------------------------------------------------------------------------
    def apply(self, plan: Plan[EvidencePayload], ctx: ActionContext) -> Outcome:
        base = self._state(ctx) / EVIDENCE_DIR
        try:
            ev = store.EvidenceDir.open(self._state(ctx), create=True)
        except store.Untrusted as exc:
            return Outcome(ok=False, error=f"the evidence directory cannot be trusted: "
                                           f"{exc.strerror}")
        except OSError as exc:
            return Outcome(ok=False, error=f"cannot use {base}: {exc.strerror or exc}")
        lock = None
        try:
            lock = ev.lock()
            if not lock.take():
                return Outcome(ok=False, error="another capture is running")
            try:
                self._record(ev, time.time())
            except (OSError, ValueError) as exc:
                return Outcome(ok=False, error=f"cannot record the capture: {exc}")
            try:
                bundle = ev.make_bundle(Path(plan.data["bundle"]).name)
            except OSError as exc:
                return Outcome(ok=False, error=f"cannot make the bundle "
                                               f"{plan.data['bundle']}: {exc.strerror or exc}")
            with bundle:
                return self._capture(plan, ctx, ev, bundle)
        except OSError as exc:
            return Outcome(ok=False, error=f"cannot use {base}: {exc.strerror or exc}")
        finally:
            if lock is not None:
                lock.close()  # releases the lock
            ev.close()

    def _record(self, ev: store.EvidenceDir, now: float) -> None:
        """Spend the budget before capturing (a crash mid-capture still counts)."""
        p = self.params
        kept = [t for t in ev.read_captures()
                if now - t < max(p.budget_window, p.cooldown)]
        ev.write_captures([*kept, now])

    def _capture(self, plan: Plan[EvidencePayload], ctx: ActionContext,
                 ev: store.EvidenceDir, bundle: store.Bundle) -> Outcome:
        p = self.params
        proc = ctx.host.proc
        cores = plan.data["cores"]
        method = plan.data["method"]
        notes = list(plan.data["notes"])
        started = time.time()
        before = profile.task_times(proc)
        if method == "perf":
            # perf writes perf.data by path: the bundle, in directories just checked to be
            # guardian's own and writable by no one else (removed after)
            prof = profile.perf_profile(p.perf, cores, p.frequency, p.seconds, bundle.path,
                                        p.timeout, p.max_script_bytes)
            if prof.error and p.method == "auto":
                notes.append(f"perf failed ({prof.error}): sampled /proc/<pid>/stack "
                             "instead")
                prof = profile.proc_profile(proc, cores, p.frequency, p.seconds, p.top)
        else:
            prof = profile.proc_profile(proc, cores, p.frequency, p.seconds, p.top)
        tasks = self._tasks(proc, before, profile.task_times(proc), ctx)
        notes += prof.notes
        files = []
        where = f"cpu {','.join(map(str, cores))}" if cores else "every cpu"
        if prof.folded:
            bundle.write("stacks.folded", profile.folded_text(prof.folded))
            title = f"guardian evidence: {ctx.rule} ({prof.method}, {prof.samples} " \
                    f"samples, {where})"
            bundle.write("flamegraph.svg", flamegraph.svg(prof.folded, title))
            bundle.write("profile.speedscope.json",
                         json.dumps(flamegraph.speedscope(prof.folded, title)))
            files += ["stacks.folded", "flamegraph.svg", "profile.speedscope.json"]
        bundle.write("tasks.json", json.dumps(tasks, indent=1))
        files.append("tasks.json")
        kmsg, kmsg_note = self._kmsg(ctx)
        if kmsg_note:
            notes.append(kmsg_note)
        bundle.write("kmsg.txt", "".join(line + "\n" for line in kmsg))
        files.append("kmsg.txt")
        flight = self._flight(bundle.path) if p.flight and ctx.kind != "manual" else None
        if flight:
            files.append(flight)
        hot = flamegraph.hottest_kernel(prof.folded)
        line = flamegraph.hot_line(hot)
        burners = profile.running_burners(prof)
        if burners and prof.tasks and burners[0] is prof.tasks[0]:
            names = ", ".join(f"{b['comm']} (pid {b['pid']})" for b in burners[:3])
            said = (f"{names}: the most system time, but on a CPU at every other read or "
                    "more: a running task's kernel stack cannot be read (perf samples it)")
            notes.append(said)
            line = said + (f"; the others' stacks: {line}" if hot["kernel_samples"] else "")
        missing = self._top_missing(tasks, prof.folded)
        if missing:
            notes.append(missing)
            line += f"; {missing}"
        summary = {
            "rule": ctx.rule, "at": started, "method": prof.method,
            "seconds": p.seconds, "took": round(time.time() - started, 3),
            "frequency": p.frequency, "cores": cores,
            "matched_cores": plan.data["matched_cores"], "samples": prof.samples,
            "kernel_samples": hot["kernel_samples"],
            "hottest": hot, "line": line, "error": prof.error, "notes": notes,
            "sampled_tasks": prof.tasks,
            "files": [*files, SUMMARY], "flight": bool(flight),
            "evidence": ctx.values,
        }
        bundle.write(SUMMARY, json.dumps(summary, indent=1, default=str))
        removed = ev.prune(p.keep, p.max_bytes, keep_newest=bundle.path.name)
        data = {"bundle": str(bundle.path), "method": prof.method,
                "samples": prof.samples, "kernel_samples": hot["kernel_samples"],
                "hot": line, "removed": removed}
        if not prof.folded:
            return Outcome(ok=False, error=f"no stacks captured ({prof.method}): "
                           f"{prof.error or 'no samples'}; bundle {bundle.path}", data=data)
        head = f"{prof.method}, {where}, {p.seconds:g}s"
        if not hot["kernel_samples"]:
            # nothing to check the capture against: not "verified"
            return Outcome(ok=True, detail=f"captured, no kernel stacks sampled ({head}, "
                           f"{prof.samples} samples): {line}; bundle {bundle.path}",
                           verified=None, data=data)
        return Outcome(ok=True, detail=f"{head}: {line}; bundle {bundle.path}",
                       verified=True, data=data)

    @staticmethod
    def _top_missing(tasks: dict[str, Any], folded: Counter[str]) -> str:
        """Said when the task with the most system time during the capture has no kernel
        sample in the profile (it ran where or when the profile did not look)."""
        rows = tasks.get("during_capture") or []
        if not rows:
            return ""
        top = rows[0]
        seen = {stack.split(";", 1)[0] for stack, _ in folded.items()
                if stack.rsplit(";", 1)[-1].endswith(flamegraph.KERNEL)}
        if top["comm"].replace(";", ":") in seen:
            return ""
        return (f"the top system-time task, {top['comm']} (pid {top['pid']}, "
                f"{top['system_seconds']:g}s system), has no kernel samples in the profile")

    def _tasks(self, proc: Path, before: dict[tuple[int, int], profile.TaskTime],
               after: dict[tuple[int, int], profile.TaskTime], ctx: ActionContext
               ) -> dict[str, Any]:
        """The top kernel-time tasks during the capture, with their units and cgroups,
        and the processes source's view at the moment (``processes.top_system_cpu_pct``)."""
        per_pid: Counter[int] = Counter()
        comm: dict[int, str] = {}
        for t, used in profile.hot_tasks(before, after, None, 10 * self.params.top):
            per_pid[t.pid] += used
            comm.setdefault(t.pid, t.comm)
        rows = []
        for pid, ticks in per_pid.most_common(self.params.top):
            cgroup = cgroup_of(proc, pid)
            rows.append({"pid": pid, "comm": comm[pid], "uid": real_uid(proc, pid),
                         "system_seconds": round(ticks / CLK_TCK, 3),
                         "cgroup": cgroup, "unit": unit_of_cgroup(cgroup)})
        at_moment = ctx.snapshot.values.get("processes.top_system_cpu_pct")
        moment = [{**dict(labels), "pct": v} for labels, v in sorted(
            at_moment.items(), key=lambda kv: -kv[1])] if isinstance(at_moment, dict) else []
        return {"during_capture": rows, "top_system_cpu_pct": moment}

    def _kmsg(self, ctx: ActionContext) -> tuple[list[str], str]:
        """The kernel-log records of the last ``kmsg_seconds`` (at most ``kmsg_lines``),
        read without blocking from the oldest the kernel keeps."""
        p = self.params
        if not p.kmsg_lines:
            return [], ""
        path = resolve_under(ctx.host.root, p.kmsg)
        try:
            dev = KmsgDevice(path)
        except OSError as exc:
            return [], f"kernel log {path}: {exc.strerror or exc}"
        lines: list[tuple[int, str]] = []
        newest = None
        try:
            if not dev.is_file:
                dev.to_start()
            for _ in range(1 << 20):
                try:
                    raw = dev.read(RECORD_MAX)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        continue
                    break
                if not raw:
                    break
                for one in (raw.splitlines() if dev.is_file else [raw]):
                    try:
                        prio, _seq, _flag, text = record_fields(one)
                        usec = int(one.split(b",", 3)[2])
                    except (ValueError, IndexError):
                        continue
                    newest = usec
                    lines.append((usec, f"[{usec / 1e6:12.6f}] <{prio & 7}> {text}"))
                    if len(lines) > 4 * max(p.kmsg_lines, 1):
                        del lines[:len(lines) - p.kmsg_lines]
        finally:
            dev.close()
        if newest is not None and not dev.is_file:
            horizon = (time.clock_gettime(time.CLOCK_MONOTONIC) - p.kmsg_seconds) * 1e6
            lines = [ln for ln in lines if ln[0] >= horizon]
        return [text for _, text in lines[-p.kmsg_lines:]], ""

    def _flight(self, bundle: Path) -> str | None:
        """The flight recorder's minutes before, when one runs in this process."""
        try:
            from guardian.hostio import flight
        except ImportError:
            return None
        current = getattr(flight, "current", None)
        rec = current() if callable(current) else None
        if rec is None:
            return None
        got = rec.dump(bundle)
        return got.name if isinstance(got, Path) else None

