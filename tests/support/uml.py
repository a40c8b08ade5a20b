"""Linux 6.1 as an ordinary process: Debian's user-mode-linux (the ``linux`` binary), no
KVM. Its root is this machine's ``/`` over hostfs, so this checkout and this interpreter
run inside unchanged; an ext4 image on a ``ubd`` disk gives a real page cache and real
writeback; cgroup2 is mounted with ``cpu io memory pids`` enabled. One CPU, no PSI.

:func:`boot` runs one Python script as the guest's only program (under a shell as init)
and returns what it printed; boot and power-off take about 2 s. The guest writes only
under the test's directory on the host (its output and its disk image).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.checkout import REPO

LINUX = shutil.which("linux")

INIT = """#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+cpu +io +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
mount -t ext4 /dev/ubda {disk}
cd {repo}
PYTHONPATH={repo}/src:{repo} {python} {script} {disk} > {out} 2>&1
echo $? > {rc}
sync
poweroff -f
"""


@dataclass(frozen=True)
class Booted:
    rc: int | None  # the script's exit status; None when the guest never got to write it
    output: str  # what the script printed
    console: str  # the kernel's console
    seconds: float


def need_uml() -> None:
    if LINUX is None:
        pytest.skip("user-mode-linux is not installed (Debian's user-mode-linux package: "
                    "the `linux` binary)")
    if os.geteuid() != 0:
        pytest.skip("needs root (the guest's init runs the tests as the guest's root, and "
                    "its files on hostfs are written as the user who runs it)")


def boot(work: Path, script: str, *, disk_mb: int = 256, mem_mb: int = 384,
         timeout: float = 120.0) -> Booted:
    """Boot the 6.1 kernel with ``script`` (Python source; argv[1] is where the ext4
    disk is mounted) as its program; return its exit status and output."""
    assert LINUX is not None
    work.mkdir(parents=True, exist_ok=True)
    image, disk = work / "disk.img", work / "disk"
    with open(image, "wb") as f:
        f.truncate(disk_mb << 20)  # sparse
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    disk.mkdir(exist_ok=True)
    (work / "guest.py").write_text(script)
    init = work / "init.sh"
    init.write_text(INIT.format(disk=disk, repo=REPO, python=sys.executable,
                                script=work / "guest.py", out=work / "out", rc=work / "rc"))
    init.chmod(0o755)
    argv = [LINUX, f"mem={mem_mb}M", f"ubd0={image}", "root=/dev/root",
            "rootfstype=hostfs", "rootflags=/", "rw", f"init={init}", "con=null",
            "con0=fd:0,fd:1", "quiet"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(work)})
    try:
        console, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        console, _ = proc.communicate()
    seconds = time.monotonic() - started
    image.unlink()  # the sparse image and UML's memory file (in TMPDIR) are big
    rc_file = work / "rc"
    rc = int(rc_file.read_text()) if rc_file.exists() else None
    out = (work / "out").read_text() if (work / "out").exists() else ""
    return Booted(rc, out, console.decode(errors="replace"), seconds)
