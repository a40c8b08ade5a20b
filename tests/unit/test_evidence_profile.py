"""evidence.profile without a kernel: perf script folded as stackcollapse-perf.pl folds
it, the hottest kernel functions in one line, the plan's rails (perf missing, cooldown,
budget, a capture running) and the bundles' bounds, and `why`'s pointer at a bundle."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from guardian.actions.evidence import EvidenceParams, EvidenceProfile
from guardian.core.flamegraph import hot_line, hottest_kernel, speedscope, svg
from guardian.core.snapshot import Snapshot
from guardian.hostio import bundles as store
from guardian.hostio import profile
from guardian.hostio.host import Host
from guardian.hostio.perfscript import fold_perf_script
from guardian.hostio.profile import proc_profile, stack_frames
from guardian.plugin.contract import ActionContext, Outcome
from guardian.runtime.seen import action_line

# `perf script -F comm,pid,tid,ip,sym,dso` as perf 6.1 printed it on this project's VM
PERF_SCRIPT = """\
guardian-burn 21292/21292
\tffffffff816f3e8c path_lookupat ([kernel.kallsyms])
\tffffffff816e48da vfs_statx ([kernel.kallsyms])
\tffffffff8223b5d1 do_syscall_64 ([kernel.kallsyms])
\tffffffff81000130 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
\t           f786a __GI___fstatat64 (/usr/lib/x86_64-linux-gnu/libc.so.6)

guardian-burn 21292/21292
\t           87ecb pthread_cond_signal@@GLIBC_2.3.2 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t               0 [unknown] ([unknown])

swapper     0/0
\tffffffff8223f1a2 pv_native_safe_halt ([kernel.kallsyms])
\tffffffff81157b2d do_idle ([kernel.kallsyms])

swapper     0/0
\tffffffff8223f1a2 pv_native_safe_halt ([kernel.kallsyms])
\tffffffff81157b2d do_idle ([kernel.kallsyms])
"""


def test_perf_script_folds_root_first_with_kernel_frames_marked() -> None:
    folded = fold_perf_script(PERF_SCRIPT.splitlines())[0]
    assert folded == Counter({
        "guardian-burn;__GI___fstatat64;entry_SYSCALL_64_after_hwframe_[k];"
        "do_syscall_64_[k];vfs_statx_[k];path_lookupat_[k]": 1,
        "guardian-burn;[unknown];pthread_cond_signal@@GLIBC_2.3.2": 1,
        "swapper;do_idle_[k];pv_native_safe_halt_[k]": 2})


def test_hottest_kernel_leaves_out_idle_and_says_one_line() -> None:
    hot = hottest_kernel(fold_perf_script(PERF_SCRIPT.splitlines())[0] or Counter())
    assert hot["kernel_samples"] == 1  # the idle task's halts are no kernel work
    assert hot_line(hot) == "guardian-burn: 1 of 1 kernel samples (100%) in path_lookupat"
    # 41 of 100 kernel samples: the issue's own example, with the counts it comes from
    folded = Counter({"kubelet;read_k;mem_cgroup_nr_lru_pages_[k]": 41,
                      "kubelet;read_k;other_[k]": 39, "x;a_[k]": 20, "x;user": 50})
    assert hot_line(hottest_kernel(folded)) == (
        "kubelet: 41 of 100 kernel samples (41%) in mem_cgroup_nr_lru_pages "
        "(then kubelet 39 in other, x 20 in a)")


def test_proc_stack_lines_are_function_names() -> None:
    assert stack_frames("[<0>] exit_to_user_mode_loop+0x51/0xe0\n"
                        "[<0>] do_syscall_64+0x250/0x290\n") == \
        ["exit_to_user_mode_loop", "do_syscall_64"]


def test_flame_graph_and_speedscope_carry_every_frame() -> None:
    folded = Counter({"a;b_[k]": 3, "a;c": 1})
    doc = svg(folded, "t <&>")
    assert doc.startswith("<?xml") and "t &lt;&amp;&gt;" in doc
    assert "b_[k] (3 samples, 75.00%)" in doc
    sp = speedscope(folded, "t")
    assert [f["name"] for f in sp["shared"]["frames"]] == ["a", "b_[k]", "c"]
    assert sp["profiles"][0]["weights"] == [3, 1]


def _ctx(tmp: Path, proc: Path) -> ActionContext:
    return ActionContext("r", Snapshot(0.0), Host(tmp), dry_run=True)


def _fake_proc(tmp: Path, paranoid: int = 2, caps: int = 0) -> Path:
    proc = tmp / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "perf_event_paranoid").write_text(f"{paranoid}\n")
    (proc / "sys" / "kernel" / "kptr_restrict").write_text("0\n")
    (proc / "self").mkdir()
    (proc / "self" / "status").write_text(f"CapEff:\t{caps:016x}\n")
    return proc


def test_plan_refuses_what_this_host_cannot_do(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path)
    act = EvidenceProfile(EvidenceParams(method="perf", perf="/nonexistent/perf",
                                         state_dir="/state"))
    plan = act.plan(_ctx(tmp_path, proc))
    said = " | ".join(plan.refused)
    assert "/nonexistent/perf" in said and "not installed" in said
    assert "perf_event_paranoid is 2" in said and "CAP_PERFMON" in said
    auto = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir="/state"))
    plan = auto.plan(_ctx(tmp_path, proc))
    assert not plan.refused and plan.data["method"] == "proc"
    assert "sampling /proc/<pid>/stack instead" in plan.note
    assert "CAP_SYS_ADMIN" in plan.note  # no stacks without it: said


def test_plan_keeps_cooldown_budget_and_one_capture_at_a_time(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path)
    ev = tmp_path / "state" / "evidence"
    ev.mkdir(parents=True)
    now = time.time()
    (ev / "captures.json").write_text(json.dumps({"captures": [now - 10, now - 20]}))
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir="/state",
                                         cooldown=60, budget=2))
    said = " | ".join(act.plan(_ctx(tmp_path, proc)).refused)
    assert "cooldown" in said and "budget: 2 captures" in said
    (ev / "captures.json").write_text("{")
    assert any("cannot be read" in r for r in act.plan(_ctx(tmp_path, proc)).refused)
    (ev / "captures.json").unlink()
    fd = os.open(ev / ".capture.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert act.plan(_ctx(tmp_path, proc)).refused == \
            ["another capture is running (its lock is held)"]
    finally:
        os.close(fd)
    assert act.plan(_ctx(tmp_path, proc)).refused == []


def _bundle_at(ev: Path, name: str, at: float, size: int = 1000) -> Path:
    d = ev / name
    d.mkdir(mode=0o700)
    (d / "summary.json").write_text(json.dumps({"at": at, "line": name}))
    (d / "stacks.folded").write_text("x" * size)
    return d


def test_bundles_are_bounded_oldest_first_by_their_recorded_time(tmp_path: Path) -> None:
    ev = tmp_path / "evidence"
    ev.mkdir(mode=0o700)
    for i in range(5):
        _bundle_at(ev, f"2026010{i}T000000Z-r", 1000.0 + i)
    # a name that sorts last, a time that is oldest: ordered by time, never by name
    _bundle_at(ev, "99990101T000000Z-fake", 10.0)
    with store.EvidenceDir.open(tmp_path) as d:
        removed = d.prune(keep=3, max_bytes=1 << 30)
        assert removed == ["99990101T000000Z-fake", "20260100T000000Z-r",
                           "20260101T000000Z-r"]
        assert d.prune(keep=3, max_bytes=2100) == ["20260102T000000Z-r"]
    assert sorted(p.name for p in ev.iterdir()) == ["20260103T000000Z-r",
                                                   "20260104T000000Z-r"]
    _bundle_at(ev, "99990101T000000Z-fake", 10.0)
    got = store.latest(tmp_path)
    assert got is not None and got[0].name == "20260104T000000Z-r"
    assert store.latest(tmp_path, since=2000.0) is None  # none that recent


def test_untrusted_state_or_evidence_directory_is_refused(tmp_path: Path) -> None:
    """Root writes the bundles: a state directory anyone can write (a 1777 one) or an
    evidence/ that is not guardian's own is refused, in the plan and in apply."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir=str(shared),
                                         kmsg_lines=0, seconds=0.01))
    ctx = ActionContext("r", Snapshot(0.0), Host(), dry_run=False)
    plan = act.plan(ctx)
    assert any("cannot be trusted" in r and "writable by other users" in r
               for r in plan.refused), plan.refused
    out = act.apply(plan, ctx)
    assert not out.ok and "cannot be trusted" in out.error
    assert list(shared.iterdir()) == []  # nothing made there
    # guardian's own state directory, but an evidence/ anyone can write
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    (own / "evidence").mkdir()
    (own / "evidence").chmod(0o777)
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir=str(own)))
    assert any("cannot be trusted" in r for r in act.plan(ctx).refused)
    assert store.latest(own) is None  # why trusts it no more


def test_bundle_swapped_for_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outside = tmp_path / "outside"
    outside.mkdir()
    with store.EvidenceDir.open(state, create=True) as ev:
        assert stat.S_IMODE(os.stat(state / "evidence").st_mode) == 0o700
        with ev.make_bundle("20260101T000000Z-r") as b:
            # the bundle renamed away and a symlink to elsewhere put in its place
            os.rename(b.path, state / "evidence" / "moved")
            os.symlink(outside, b.path)
            b.write("kmsg.txt", "secret kernel log\n")
        assert list(outside.iterdir()) == []
        assert (state / "evidence" / "moved" / "kmsg.txt").read_text() == \
            "secret kernel log\n"
        # later writers (the service's signals.rec.gz) refuse the link
        with pytest.raises(store.Untrusted):
            store.open_bundle(state / "evidence" / "20260101T000000Z-r")
    from guardian.runtime.evidencebundle import write_into
    with pytest.raises(OSError):
        write_into(state / "evidence" / "20260101T000000Z-r", None, 1.0, [])  # type: ignore[arg-type]
    assert list(outside.iterdir()) == []


def test_why_action_line_points_at_the_bundle() -> None:
    line = action_line({"at": 0.0, "rule": "r", "use": "evidence.profile", "result": "ok",
                        "what": "evidence.profile ok: perf record …",
                        "bundle": "/var/lib/guardian/evidence/X-r",
                        "hot": "kubelet: 41% of sampled kernel time in "
                               "mem_cgroup_nr_lru_pages"})
    assert line.endswith("→ kubelet: 41% of sampled kernel time in "
                         "mem_cgroup_nr_lru_pages; evidence in "
                         "/var/lib/guardian/evidence/X-r")


# what perf record prints (stderr) when perf_event_open(2) is denied with EPERM, as a
# unit's SystemCallFilter=~@debug denies it: perf's evsel__open_strerror (EPERM/EACCES),
# after ui__error's "Error:" line; perf exits 255
PERF_EPERM = """\
Error:
No permission to enable cycles:P event.

Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open
access to performance monitoring and observability operations for processes
without CAP_PERFMON, CAP_SYS_PTRACE or CAP_SYS_ADMIN Linux capability.
More information can be found at 'Perf events and tool security' document:
https://www.kernel.org/doc/html/latest/admin-guide/perf-security.html
perf_event_paranoid setting is -1:
  -1: Allow use of (almost) all events by all users
      Ignore mlock limit after perf_event_mlock_kb without CAP_IPC_LOCK
>= 0: Disallow raw and ftrace function tracepoint access
>= 1: Disallow CPU event access
>= 2: Disallow kernel profiling
To make the adjusted perf_event_paranoid setting permanent preserve it
in /etc/sysctl.conf (e.g. kernel.perf_event_paranoid = <setting>)
"""


def test_perf_failure_says_perfs_own_reason(tmp_path: Path) -> None:
    fake = tmp_path / "perf"
    (tmp_path / "said").write_text(PERF_EPERM)
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv\ncat {tmp_path}/said >&2\n"
                    "exit 255\n")
    fake.chmod(0o755)
    work = tmp_path / "b"
    work.mkdir()
    prof = profile.perf_profile(str(fake), None, 99, 0.1, work, 10, 1 << 20)
    assert prof.error.startswith("perf record exited 255: No permission to enable "
                                 "cycles:P event."), prof.error
    assert "SystemCallFilter=~@debug denies perf_event_open" in prof.error
    argv = (tmp_path / "argv").read_text().split()
    assert "-q" not in argv and "-a" in argv  # perf's reason is not hidden; every cpu


def _stat(pid: int, comm: str, state: str, stime: int, cpu: int = 0) -> str:
    rest = ["0"] * 50
    rest[0], rest[12], rest[36] = state, str(stime), str(cpu)
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def _task(proc: Path, pid: int, comm: str, state: str, stime: int, stack: str = "",
          wchan: str = "0") -> None:
    d = proc / str(pid) / "task" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(_stat(pid, comm, state, stime))
    (d / "stack").write_text(stack)
    (d / "wchan").write_text(wchan)


def test_fallback_reads_task_states_sleepers_are_no_kernel_time(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    tasks = [(10, "burn", "R", ""), (20, "python", "S",
                                      "[<0>] hrtimer_nanosleep+0x1/0x2\n"
                                      "[<0>] do_syscall_64+0x1/0x2\n"),
             (30, "kubelet", "D", "[<0>] mem_cgroup_nr_lru_pages+0x1/0x2\n"
                                  "[<0>] do_syscall_64+0x1/0x2\n"),
             (40, "tiny", "R", "[<0>] other_fn+0x1/0x2\n")]
    used = {10: 100, 20: 40, 30: 20, 40: 1}  # ticks during the scans; tiny: < 10 %
    for pid, comm, state, stack in tasks:
        _task(proc, pid, comm, state, 0, stack)
    now = [0.0]

    def sleep(s: float) -> None:  # the tasks ran meanwhile
        for pid, comm, state, stack in tasks:
            _task(proc, pid, comm, state, used[pid], stack)
        now[0] += max(s, 0.01)

    prof = proc_profile(proc, None, 10, 1.0, 10, clock=lambda: now[0], sleep=sleep)
    comms = {stack.split(";")[0] for stack in prof.folded}
    assert comms == {"burn", "python", "kubelet"}  # tiny's share is too small
    assert all(not k.endswith("_[k]") for k in prof.folded if k.startswith("python;"))
    assert any(k.startswith("python;[sleeping];do_syscall_64;hrtimer_nanosleep")
               for k in prof.folded)
    assert set(k for k in prof.folded if k.startswith("burn")) == {"burn;[running]"}
    hot = hottest_kernel(prof.folded)
    assert [c["comm"] for c in hot["comms"]] == ["kubelet"]  # not the sleeper
    assert hot["functions"][0]["function"] == \
        "mem_cgroup_nr_lru_pages (uninterruptible wait)"
    assert [t["comm"] for t in profile.running_burners(prof)] == ["burn"]


def _applied(tmp_path: Path, prof: profile.Profile, monkeypatch: pytest.MonkeyPatch,
             times: list[dict[tuple[int, int], profile.TaskTime]] | None = None
             ) -> tuple[Outcome, dict[str, Any]]:
    import guardian.actions.evidence as ev
    monkeypatch.setattr(profile, "proc_profile", lambda *a, **k: prof)
    seq = list(times or [{}, {}])
    monkeypatch.setattr(profile, "task_times", lambda proc: seq.pop(0))
    monkeypatch.setattr(ev, "cgroup_of", lambda proc, pid: "/system.slice/x.service")
    monkeypatch.setattr(ev, "real_uid", lambda proc, pid: 0)
    _fake_proc(tmp_path)
    act = EvidenceProfile(EvidenceParams(method="proc", state_dir="/state", kmsg_lines=0,
                                         seconds=1))
    ctx = ActionContext("r", Snapshot(0.0), Host(tmp_path), dry_run=False)
    out = act.apply(act.plan(ctx), ctx)
    bundle = Path(out.data["bundle"])
    return out, json.loads((bundle / "summary.json").read_text())


def test_running_burner_is_said_never_others_stacks_as_hottest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prof = profile.Profile("proc-stack", Counter({
        "burn;[running]": 90, "kubelet;[uninterruptible];do_syscall_64_[k];"
        "mem_cgroup_nr_lru_pages_[k]": 9, "python;[sleeping];hrtimer_nanosleep": 90}))
    prof.tasks = [{"pid": 10, "tid": 10, "comm": "burn", "stime_ticks": 100,
                   "reads": {"running": 90}},
                  {"pid": 30, "tid": 30, "comm": "kubelet", "stime_ticks": 20,
                   "reads": {"uninterruptible": 9}}]
    _, summary = _applied(tmp_path, prof, monkeypatch)
    line = str(summary["line"])
    assert line.startswith("burn (pid 10): the most system time, but on a CPU"), line
    assert "a running task's kernel stack cannot be read" in line
    assert summary["seconds"] == 1 and "took" in summary  # the window, and the run
    assert "9 of 9 kernel samples" in line


def test_no_kernel_stacks_is_captured_not_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prof = profile.Profile("proc-stack", Counter({"python;[sleeping];hrtimer_nanosleep": 5}))
    out, summary = _applied(tmp_path, prof, monkeypatch)
    assert out.ok and out.verified is not True
    assert out.detail.startswith("captured, no kernel stacks sampled")
    assert summary["kernel_samples"] == 0


def test_top_system_time_task_absent_from_the_samples_is_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prof = profile.Profile("perf", Counter({"runc;do_syscall_64_[k];x_[k]": 6}))
    before = {(7, 7): profile.TaskTime(7, 7, "burn", 0, 1, "R")}
    after = {(7, 7): profile.TaskTime(7, 7, "burn", 100, 1, "R")}
    _, summary = _applied(tmp_path, prof, monkeypatch, [before, after])
    assert "the top system-time task, burn (pid 7, 1s system), has no kernel samples" \
        in str(summary["line"]), summary["line"]
    assert any("burn (pid 7" in n for n in summary["notes"])


def _cpu_ctx(tmp_path: Path, online: str, matched: list[str] | None = None
             ) -> ActionContext:
    cpu = tmp_path / "sys" / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    (cpu / "online").write_text(online + "\n")
    ev: dict[str, object] = {}
    if matched:
        ev["matched"] = {(("cpu", c),): 1.0 for c in matched}
    return ActionContext("r", Snapshot(0.0), Host(tmp_path), dry_run=True, evidence=ev)


def test_cores_are_the_whole_node_unless_configured_and_must_be_online(
        tmp_path: Path) -> None:
    _fake_proc(tmp_path)
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir="/state"))
    plan = act.plan(_cpu_ctx(tmp_path, "0-3", matched=["0"]))
    assert plan.data["cores"] is None and plan.data["matched_cores"] == [0]
    assert plan.steps[0].target == "every cpu (the rule matched cpu 0)"
    for bad in ([99], [2, 4]):
        act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir="/state",
                                             cores=bad))
        said = " | ".join(act.plan(_cpu_ctx(tmp_path, "0-3")).refused)
        assert "not online CPUs of this machine (0-3)" in said, said
    with pytest.raises(ValueError):
        EvidenceParams(cores=[-1])


def test_dry_run_says_sizes_in_units_and_flight_only_for_the_service(
        tmp_path: Path) -> None:
    _fake_proc(tmp_path)
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf", state_dir="/state"))
    manual = ActionContext("manual", Snapshot(0.0), Host(tmp_path), dry_run=True,
                           kind="manual")
    said = act.plan(manual).steps[-1].change
    assert "keep 10 bundles, 64 MiB" in said and "flight.folded" not in said
    assert "flight.folded" in act.plan(_ctx(tmp_path, tmp_path)).steps[-1].change


def test_why_evidence_line_has_date_and_age_and_counts() -> None:
    from guardian.cli.why import _evidence_line
    at = time.mktime((2026, 12, 4, 22, 27, 0, 0, 0, -1))
    line = _evidence_line(Path("/x/b"), {"rule": "r", "at": at, "method": "perf",
                                         "seconds": 1, "samples": 84, "kernel_samples": 18,
                                         "line": "l"}, now=at + 180)
    assert line == "Evidence (r, 2026-12-04 22:27, 3m ago, perf, 1s, 18 kernel of 84 " \
                   "samples): l; in /x/b"


def test_journal_line_carries_what_the_capture_found() -> None:
    from guardian.engine.decision import Decision
    from guardian.plugin.contract import Plan, Step
    from guardian.runtime.executor import Executed
    plan: Plan[dict[str, object]] = Plan("evidence.profile", "r", data={})
    plan.steps.append(Step("every cpu", "perf record …"))
    ex = Executed(Decision(0.0, "r", "firing", "info", ""), "evidence.profile", plan,
                  Outcome(ok=True, detail="perf: kubelet: 41 of 100 kernel samples (41%) "
                          "in mem_cgroup_nr_lru_pages", verified=True))
    assert ex.describe().endswith("→ perf: kubelet: 41 of 100 kernel samples (41%) in "
                                  "mem_cgroup_nr_lru_pages")
