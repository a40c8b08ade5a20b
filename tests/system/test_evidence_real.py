"""evidence.profile on this real kernel (issue 43's "done when"): a named process burns a
core in the kernel (a tight ``stat`` loop), a rule fires on it in the running service, and
the bundle's folded stacks show that process with kernel frames; ``guardian why`` names
the hottest kernel functions and points at the bundle; the flame graph renders in
headless Chromium; without perf the fallback names the process with kernel frames read
from /proc/<pid>/stack. Captures are 1 s at 99 Hz."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.hostio import profile
from tests.support.wait import wait_until

BURN = "guardian-burn"
# a tight system-call loop under a name of its own (PR_SET_NAME = 15)
_BURNER = (f"import ctypes, os\nctypes.CDLL(None).prctl(15, b'{BURN}', 0, 0, 0)\n"
           "while True:\n    os.stat('/')\n")
KERNEL_ENTRY = ("entry_SYSCALL_64", "do_syscall_64", "__x64_sys_", "__do_sys_")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="reads /proc/<pid>/stack and "
                                "profiles every CPU: root only")
needs_perf = pytest.mark.skipif(
    os.geteuid() != 0 or bool(profile.perf_refusals("perf", Path("/proc"))),
    reason="perf cannot profile here: " + "; ".join(profile.perf_refusals("perf",
                                                                           Path("/proc"))))


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", _BURNER])
    try:
        wait_until(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == BURN,
                   "the burner to name itself")
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def burners() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Twice as many burners as cores: the kernel gives no stack of a task that is on a
    CPU (/proc/<pid>/stack is empty while it runs), so at any moment some of them wait,
    preempted, with their kernel stack readable, as a hot task on a busy node does."""
    procs = [subprocess.Popen([sys.executable, "-c", _BURNER])
             for _ in range(2 * (os.cpu_count() or 1))]
    try:
        for proc in procs:
            wait_until(functools.partial(_named, proc.pid), "the burner to name itself")
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _named(pid: int) -> bool:
    return Path(f"/proc/{pid}/comm").read_text().strip() == BURN


def _guardian(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardian", *args], capture_output=True,
                          text=True, timeout=timeout)


def _burner_kernel_stacks(folded: str) -> list[str]:
    return [ln for ln in folded.splitlines()
            if ln.startswith(BURN + ";") and "_[k]" in ln]


def _bundle(state: Path) -> Path | None:
    found = sorted((state / "evidence").glob("*/summary.json"))
    return found[-1].parent if found else None


@needs_perf
def test_service_rule_captures_the_burner_in_the_kernel_and_why_points_at_it(
        tmp_path: Path, burner: subprocess.Popen[bytes]) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(f'''version = 1

[[rule]]
name = "burner-in-kernel"
summary = "the test's burner spends its time in the kernel"
when = 'processes.top_system_cpu_pct{{comm="{BURN}"}} > 1'
severity = "warning"

  [[rule.action]]
  use = "evidence.profile"
  seconds = 1
  state_dir = "{tmp_path}"
  cooldown = "1h"
''')
    config = tmp_path / "guardian.toml"
    config.write_text("")
    service = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--rules", str(rules), "--config",
         str(config), "--state", str(tmp_path / "state.json"), "--audit",
         str(tmp_path / "audit.jsonl"), "--interval", "1s", "--metrics-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        bundle = wait_until(lambda: _bundle(tmp_path), "a bundle", timeout=90)
        # the service reports the action (and its bundle) where `why` reads it
        wait_until(lambda: "bundle" in (tmp_path / "seen.json").read_text()
                   if (tmp_path / "seen.json").exists() else False, "seen.json's action")
        why = _guardian("why", "--config", str(config), "--rules", str(rules),
                        "--state", str(tmp_path / "state.json"))
    finally:
        service.send_signal(signal.SIGTERM)
        service_log = service.communicate(timeout=60)[1].decode(errors="replace")
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["method"] == "perf", summary
    stacks = _burner_kernel_stacks((bundle / "stacks.folded").read_text())
    assert stacks, (bundle / "stacks.folded").read_text()[:2000]
    assert any(e in ln for ln in stacks for e in KERNEL_ENTRY), stacks[:5]
    assert BURN in {c["comm"] for c in summary["hottest"]["comms"]}, summary["hottest"]
    assert " kernel samples (" in summary["line"], summary["line"]
    assert summary["seconds"] == 1 and summary["took"] >= 1  # the window; the whole run
    assert {"stacks.folded", "flamegraph.svg", "kmsg.txt", "tasks.json",
            "signals.rec.gz"} <= {p.name for p in bundle.iterdir()}
    tasks = json.loads((bundle / "tasks.json").read_text())
    assert burner.pid in {t["pid"] for t in tasks["during_capture"]}, tasks
    # the signals' history is a recording guardian reads
    from guardian.runtime.recording import read
    rec = read(bundle / "signals.rec.gz")
    assert rec.snapshots and any("processes.top_system_cpu_pct" in s.values
                                 for s in rec.snapshots)
    # the audit entry and why point at the bundle and name the hottest functions
    audit = (tmp_path / "audit.jsonl").read_text()
    assert str(bundle) in audit
    assert why.returncode == 0, why.stderr
    assert str(bundle) in why.stdout, why.stdout
    assert " kernel samples (" in why.stdout, why.stdout
    assert " ago, perf, 1s, " in why.stdout, why.stdout  # its date and age
    # the journal's line names what was found, not only what was run
    assert " → perf, every cpu, 1s: " in service_log, service_log[-3000:]


@needs_root
def test_fallback_without_perf_names_the_burner_with_kernel_frames(
        tmp_path: Path, burners: list[subprocess.Popen[bytes]]) -> None:
    got = _guardian("act", "evidence.profile", "--set", "perf=/nonexistent/perf",
                    "--set", "seconds=1", "--set", f"state_dir={tmp_path}", "--set",
                    "kmsg_lines=0", "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    bundle = _bundle(tmp_path)
    assert bundle is not None
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["method"] == "proc-stack"
    assert any("perf" in n and "not installed" in n for n in summary["notes"]), summary
    stacks = _burner_kernel_stacks((bundle / "stacks.folded").read_text())
    assert stacks, (bundle / "stacks.folded").read_text()
    # frames read from /proc/<pid>/task/<tid>/stack, e.g. "guardian-burn;
    # entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];exit_to_user_mode_loop_[k]"
    assert any(e in ln for ln in stacks for e in (*KERNEL_ENTRY, "asm_", "irqentry_")), \
        stacks


def _chromium() -> str | None:
    for name in ("chromium", "chromium-headless-shell", "google-chrome", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed")
def test_flame_graph_renders_in_headless_chromium(tmp_path: Path) -> None:
    from collections import Counter

    from guardian.core.flamegraph import svg
    folded = Counter({
        f"{BURN};__GI___fstatat64;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "__do_sys_newfstatat_[k];vfs_statx_[k];path_lookupat_[k]": 40,
        f"{BURN};__GI___fstatat64;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "__do_sys_newfstatat_[k];cp_new_stat_[k];_copy_to_user_[k]": 25,
        "kubelet;[kubelet];entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "mem_cgroup_nr_lru_pages_[k]": 35})
    page = tmp_path / "flamegraph.svg"
    page.write_text(svg(folded, "guardian evidence: test"))
    shot = tmp_path / "shot.png"
    chrome = _chromium()
    assert chrome is not None
    ran = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", f"--screenshot={shot}",
                          "--window-size=1200,260", page.as_uri()],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists(), ran.stderr[-2000:]
    import matplotlib.image
    pixels = matplotlib.image.imread(str(shot))
    colors = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}
    # a blank page is one colour; the frames (orange kernel, red user) and text many
    assert len(colors) > 20, len(colors)
    orange = [p for p in colors if p[0] > 0.8 and 0.45 < p[1] < 0.75 and p[2] < 0.3]
    assert orange, "no kernel frame (orange) was drawn"
