"""Nobody but the kernel fires a kernel-log pattern.

The kernel logs kernel-facility lines for ordinary processes that *begin* with the
process's own name and end with its own file name (``<comm>[<pid>]: segfault at ... in
<file>[...]``; arch/x86/mm/fault.c show_signal_msg, mm/memory.c print_vma_addr), so
anchoring a pattern at the line's start does not protect it. Here a real unprivileged
process, named after each shipped pattern's text and run from a file of that name,
segfaults and divides by zero (the kernel's own lines, read back from /dev/kmsg), and no
shipped pattern fires; the same lines matched without masking fire them (the attack is
real). Then every template of guardian.sources.kernel_usertext is filled with each
pattern's text, and `check` names a configured pattern an unprivileged process can fire.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest

from guardian.core.regexsafety import example_match
from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.hostio.kmsg import parse_record
from guardian.sources.kernel_patterns import SHIPPED
from guardian.sources.kernel_usertext import (
    MASK,
    TEMPLATES,
    UserTextTemplate,
    mask,
    named_task,
    spoofable,
)
from guardian.sources.kmsg import KmsgConfig, KmsgSource, match_line
from tests.support.checkout import REPO, write
from tests.support.kernel import inject_kmsg, need_root
from tests.support.wait import wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global

CRASHER = r"""
#include <sys/prctl.h>
int main(int argc, char **argv) {
    prctl(PR_SET_NAME, argv[1], 0, 0, 0);  /* its comm: the start of the kernel's line */
    volatile int zero = 0, seven = 7;
    if (argv[2][0] == 'd') return seven / zero;  /* traps: ... trap divide error ... */
    *(volatile char *)0 = 0;  /* segfault at 0 ... in <this file's name>[...] */
    return 0;
}
"""
NOBODY = 65534


def _attacks() -> list[tuple[str, str]]:
    """(comm, file name) for each shipped pattern: the text it matches, as much as a
    name holds (15 characters) and as a file name may be (no '/', 255 bytes)."""
    out = []
    for name, p in SHIPPED.items():
        text = example_match(p.regex)
        assert text is not None, f"no example line for {name}"
        out.append((text[:15], text.replace("/", "_")[:200]))
    return out


@contextmanager
def _printk_burst(n: int) -> Iterator[None]:
    """show_signal_msg is rate-limited (printk_ratelimit: 10 lines per 5 s by default)."""
    knob = Path("/proc/sys/kernel/printk_ratelimit_burst")
    before = knob.read_text()
    knob.write_text(str(n))
    try:
        yield
    finally:
        knob.write_text(before)


def _kernel_lines_since(fd: int) -> list[str]:
    lines: list[str] = []
    while True:
        try:
            raw = os.read(fd, 8192)
        except BlockingIOError:
            return lines
        except BrokenPipeError:
            continue
        record = parse_record(raw)
        if record.facility == 0:
            lines.append(record.text)


def test_no_unprivileged_process_fires_a_shipped_pattern() -> None:
    need_root()
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the crashing program")
    if Path("/proc/sys/debug/exception-trace").read_text().strip() != "1":
        pytest.skip("this kernel does not log user faults (debug.exception-trace)")
    attacks = _attacks()
    home = Path(tempfile.mkdtemp(prefix="guardian-spoof-"))
    try:
        home.chmod(0o755)
        source = home / "crash.c"
        source.write_text(CRASHER)
        subprocess.run(["gcc", "-O0", "-o", str(home / "crash"), str(source)], check=True,
                       capture_output=True, timeout=120)
        src = KmsgSource(Host())
        assert src.unavailable() is None
        base = cast(float, src.collect(0.0)["kmsg.records"])  # from the ring's end
        reader = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(reader, 0, os.SEEK_END)
        with _printk_burst(10_000):
            for comm, file_name in attacks:
                binary = home / file_name
                shutil.copy(home / "crash", binary)
                for how in ("segv", "divide"):
                    subprocess.run([str(binary), comm, how], capture_output=True,
                                   timeout=30, user=NOBODY, group=NOBODY, extra_groups=[])
                binary.unlink()
        # the kernel logs a fault before the process ends: all of them are there now
        lines = [line for line in _kernel_lines_since(reader)
                 if "segfault at" in line or "trap divide error" in line]
        os.close(reader)

        def read_them() -> dict[str, object] | None:  # the source read them too
            out = src.collect(1.0)
            return out if cast(float, out["kmsg.records"]) >= base + len(lines) else None

        matches = wait_until(read_them, "the source reading the faults")["kmsg.matches"]
        src.close()
    finally:
        shutil.rmtree(home)
    assert len(lines) >= 2 * len(attacks), lines[:5]  # every crash was logged
    compiled = {n: re.compile(p.regex) for n, p in SHIPPED.items()}
    unmasked = {n for line in lines for n in match_line(compiled, line)}
    # without masking these fired (four critical rules, and XfsShutdown=True in the
    # DaemonSet): the patterns whose text fits in a name
    assert {"memory_error_uncorrected", "memory_error_corrected", "kernel_oops",
            "xfs_shutdown"} <= unmasked
    assert isinstance(matches, dict)
    fired = {dict(k)["pattern"]: v for k, v in matches.items() if v}
    assert fired == {}, fired
    assert all(KmsgSource(Host()).matches(line) == [] for line in lines)


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_no_shipped_pattern_matches_inside_a_user_field(template: UserTextTemplate) -> None:
    """Each template filled with every shipped pattern's own text, in every field: a
    pattern matches only where it matches the kernel's words alone (an OOM kill is one)."""
    src = KmsgSource(Host(Path("/nonexistent")))
    for name, p in SHIPPED.items():
        text = example_match(p.regex)
        assert text is not None
        line = template.sample.format(comm=text[:15], file=text)
        assert MASK in mask(line), (template, line)
        if name in src.matches(template.sample.format(comm="x", file="x")):
            assert template.reports, (name, template.name)  # the kernel's own report
            continue
        assert name not in src.matches(line), (name, line)


def test_every_shipped_pattern_is_safe_by_check() -> None:
    assert {n: why for n, p in SHIPPED.items() if (why := spoofable(p.regex))} == {}


@pytest.mark.parametrize(("line", "masked"), [
    # a name made of the ENA reset line: the line still reads as a segfault
    ("ena: Trigger r[4242]: segfault at 0 ip 0000000000401106 sp 00007ffd5a1e3c50 error 6 "
     "in NETDEV WATCHDOG: eth0 (ena): transmit queue 0 timed out[401000+1000]",
     f"{MASK}[4242]: segfault at 0 ip 0000000000401106 sp 00007ffd5a1e3c50 error 6 in "
     f"{MASK}[401000+1000]"),
    # a name that itself holds "[1]: segfault ": the kernel's own text follows it
    ("x[1]: segfault [4242]: segfault at 0 ip (null) sp 00007ffd5a1e3c50 error 4",
     f"{MASK}[4242]: segfault at 0 ip (null) sp 00007ffd5a1e3c50 error 4"),
    # a file name too long for one record: cut short, masked to the end
    ("a[4242]: segfault at 0 ip 401106 sp 7ffd5a1e3c50 error 6 in EDAC MC0: 1 UE xxxxx",
     f"{MASK}[4242]: segfault at 0 ip 401106 sp 7ffd5a1e3c50 error 6 in {MASK}"),
    # a file name that fakes the suffix: the last one is the kernel's
    ("a[4242]: segfault at 0 ip 401106 sp 7ffd error 6 in b[1+1] likely on CPU 0 (core 0, "
     "socket 0)[401000+1000] likely on CPU 1 (core 1, socket 0)",
     f"{MASK}[4242]: segfault at 0 ip 401106 sp 7ffd error 6 in {MASK}[401000+1000] likely "
     "on CPU 1 (core 1, socket 0)"),
    ("traps: EDAC MC0: 1 UE [77] general protection fault ip:7f sp:7ffd error:0 in "
     "libc.so.6[7f00+1000]",
     f"traps: {MASK}[77] general protection fault ip:7f sp:7ffd error:0 in {MASK}[7f00+1000]"),
    # a line of the kernel's own about a device: untouched
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1)",
     "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1)"),
], ids=["name-of-the-ena-line", "name-holding-a-segfault", "file-name-cut-short",
        "file-name-faking-the-suffix", "traps-name", "the-kernels-own-line"])
def test_mask(line: str, masked: str) -> None:
    assert mask(line) == masked


def test_check_names_a_pattern_any_process_can_fire(tmp_path: Path) -> None:
    """Before: `check` cleared every anchored pattern; `^.{1,40}: segfault at` is
    anchored and fires on any process's crash."""
    config = write(tmp_path, "g.toml", '[sources.kmsg]\npatterns = { crash = '
                   "'^.{1,40}\\[\\d+\\]: segfault at', xid = '^NVRM: Xid' }\n")
    rules = write(tmp_path, "r.toml", 'version = 1\n[[rule]]\nname = "r"\nsummary = "s"\n'
                  'when = "processes.total > 0"\n  [[rule.action]]\n  use = "log"\n')
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", "--config",
                           str(config), str(rules)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "pattern 'crash' matches the 'segfault' line the kernel logs for any process" \
        in proc.stderr
    assert "pattern 'xid'" not in proc.stderr


@contextmanager
def _process_in_service(unit: str | None, uid: int = 0) -> Iterator[int]:
    """A sleeping process, moved into system.slice/<unit> of the pids hierarchy (as
    systemd places a service's processes), as ``uid``."""
    proc = subprocess.Popen(["sleep", "60"], user=uid)
    made: list[Path] = []
    try:
        if unit is not None:
            where = Path("/sys/fs/cgroup/pids/system.slice") / unit
            for d in (where.parent, where):
                if not d.exists():
                    d.mkdir()
                    made.append(d)
            (where / "cgroup.procs").write_text(str(proc.pid))
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        for d in reversed(made):
            def removed(d: Path = d) -> bool:
                with contextlib.suppress(OSError):  # busy until the process is reaped
                    d.rmdir()
                return not d.exists()

            with contextlib.suppress(AssertionError):  # left behind: not this test's point
                wait_until(removed, f"{d} removed", timeout=5, every=0.05)


def test_a_hung_runtime_is_known_by_its_service_not_its_name() -> None:
    """node-problem-detector's DockerHung matches the name `docker`, which any process
    can take; hung_task_runtime asks the live host which service the PID runs in."""
    need_root()
    if not Path("/sys/fs/cgroup/pids").is_dir():
        pytest.skip("needs the cgroup v1 pids hierarchy to place a process in a service")
    src = KmsgSource(Host(), KmsgConfig(facilities=["kern", "user"]))
    assert src.unavailable() is None
    src.collect(0.0)
    with _process_in_service("containerd.service") as runtime, \
            _process_in_service(None) as elsewhere, \
            _process_in_service("containerd.service", uid=NOBODY) as not_root:
        for name, pid in (("containerd", runtime), ("docker", elsewhere),
                          ("dockerd", not_root)):
            line = f"INFO: task {name}:{pid} blocked for more than 120 seconds."
            assert named_task(line) == pid
            inject_kmsg(line)
        def counted() -> dict[object, float] | None:
            m = src.collect(1.0)["kmsg.matches"]
            assert isinstance(m, dict)
            return m if m[labels_of({"pattern": "hung_task"})] >= 3 else None

        m = wait_until(counted, "the three hung-task lines counted")
    src.close()
    assert isinstance(m, dict)
    assert m[labels_of({"pattern": "hung_task"})] == 3
    assert m[labels_of({"pattern": "hung_task_runtime"})] == 1


def test_every_shipped_pattern_and_template_is_cheap_on_crafted_lines() -> None:
    """What runs on every line (shipped patterns, the masking templates) passes the cost
    check configured patterns must pass."""
    from guardian.core.regexsafety import cost_risk
    costly = {n: why for n, p in SHIPPED.items() if (why := cost_risk(p.regex))}
    costly |= {t.name: why for t in TEMPLATES if (why := cost_risk(t.regex))}
    assert costly == {}
