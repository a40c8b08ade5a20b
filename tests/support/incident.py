"""The incident's first links, reproduced for real on this VM.

A systemd unit (``ecs.service``, as on the incident's nodes) crash-loops under a real
systemd booted in systemd-nspawn. Each of its lives makes a fresh memory cgroup in the
host's cgroup v1 memory hierarchy (a test-owned subtree bind-mounted into the container),
moves itself in, writes a file to a disk-backed directory (page cache charged to that
cgroup), moves out, removes the cgroup and exits 1: so every restart leaves one dying
memcg behind, as the incident's unit did. guardian runs on the host and reaches the
container's systemd through the systemd source's argv prefix.

    python -m tests.incident record  OUT [--minutes 9]   # the incident, recorded
    python -m tests.incident healthy OUT [--minutes 3]   # a busy, healthy node, recorded
    python -m tests.incident chain   OUT [--minutes 13]  # the whole chain, recorded

The chain recording adds the later links. Kernel time on a core: on this VM's kernel the
root memory.stat read stays flat however many memcgs are dying, so kubelet's walk of older
kernels cannot be reproduced; a process pinned to core 1 (`dd` from /dev/zero, which the
kernel clears page by page) burns that core in system time instead. The ENA reset
sequence: this VM has no ENA NIC, so the driver's own lines (format strings of
drivers/net/ethernet/amazon/ena/ena_netdev.c, netdev_err: "ena <pci> <netdev>: ...") are
written to /dev/kmsg at the moments they would come. The recording's note says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from guardian.testing import MEMCG_V1
from guardian.testing.nspawn import Container, booted
from tests.support.kernel import drop_caches, need_memcg_v1, settle_memcgs
from tests.support.wait import wait_until

LIFE = (
    "test -e /spill/enough || { mkdir /incident-memcg/life-$$ && "
    "echo 0 > /incident-memcg/life-$$/cgroup.procs && "
    "head -c 16384 /dev/urandom > /spill/life-$$ && echo 0 > /incident-memcg/cgroup.procs "
    "&& rmdir /incident-memcg/life-$$; }; exit 1"
)
# systemd expands "$" in ExecStart=; "$$" is a literal "$" for the shell
UNIT = f"""[Unit]
Description=an agent that does not belong on this node, crash-looping
StartLimitIntervalSec=0

[Service]
ExecStart=/bin/sh -c '{LIFE.replace("$", "$$")}'
Restart=always
RestartSec=0
"""


@contextlib.contextmanager
def crash_loop() -> Iterator[tuple[Container, Path]]:
    """Boot the container with the crash-looping unit running; yield it and the host
    directory holding the page cache that pins the dying memcgs. On exit the unit stops,
    the files go (releasing the memcgs) and the test cgroup is removed."""
    need_memcg_v1()
    parent = MEMCG_V1 / f"guardian-incident-{os.getpid()}"
    spill = Path(tempfile.mkdtemp(prefix="guardian-incident-", dir="/var/tmp"))
    parent.mkdir()
    try:
        with booted(rw_binds=[(str(parent), "/incident-memcg"), (str(spill), "/spill")],
                    name="guardian-incident") as c:
            c.write("/usr/lib/systemd/system/ecs.service", UNIT)
            c.run("systemctl", "daemon-reload")
            c.run("systemctl", "start", "ecs.service")
            yield c, spill
            c.run("systemctl", "stop", "ecs.service", check=False)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        def removed() -> bool:
            try:
                for child in parent.iterdir():
                    if child.is_dir():
                        child.rmdir()
                parent.rmdir()
            except OSError:  # busy until its last processes are gone
                return False
            return True

        with contextlib.suppress(AssertionError):  # cleanup: never the test's failure
            wait_until(removed, f"{parent} removed", timeout=10, every=0.1)
        settle_memcgs()


def config_for(c: Container, path: Path) -> Path:
    """A guardian config whose systemd source talks to the container's systemd and whose
    kernel-log source counts lines written into /dev/kmsg."""
    argv = ", ".join(f'"{a}"' for a in [*c.enter, "systemctl"])
    # the ENA lines are written into /dev/kmsg, which gives them the user facility (the
    # kernel's cannot be written from user space): let that facility match too
    path.write_text(f"[sources.systemd]\nsystemctl = [{argv}]\nunits = [\"*.service\"]\n"
                    f"restart_window = \"1m\"\n"
                    f"[sources.kmsg]\nfacilities = [\"kern\", \"user\"]\n")
    return path


def cap_leak(spill: Path, at: int) -> threading.Thread:
    """Stop making cgroups once ``at`` are dying (the unit keeps crash-looping), so the
    host's kernel memory stays bounded however long the recording runs."""
    from guardian.hostio.host import Host
    from guardian.sources.cgroups import CgroupsSource

    def watch() -> None:
        src = CgroupsSource(Host())
        while spill.exists() and not (spill / "enough").exists():
            dying = src.collect(0.0)["memcg.dying"]
            if isinstance(dying, int) and dying >= at:
                (spill / "enough").touch()
            time.sleep(0.5)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def record(out: Path, minutes: float, interval: str = "5s", cap: int = 20_000) -> None:
    with crash_loop() as (c, spill), tempfile.TemporaryDirectory() as tmp:
        cap_leak(spill, cap)
        cfg = config_for(c, Path(tmp) / "guardian.toml")
        subprocess.run([sys.executable, "-m", "guardian", "record", "-o", str(out),
                        "--interval", interval, "--duration", f"{minutes * 60:g}s",
                        "--config", str(cfg)], check=True)
    drop_caches()


BUSY = r"""
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""
CHURN = r"""
import os, subprocess, sys, time
end = time.monotonic() + float(sys.argv[1])
parent = sys.argv[2]
i = 0
while time.monotonic() < end:
    # short-lived processes, and cgroups made and removed cleanly (no page cache left)
    p = subprocess.Popen(["true"]); p.wait()
    cg = os.path.join(parent, f"job{i}")
    os.mkdir(cg)
    child = subprocess.Popen(["sleep", "0.01"])
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(str(child.pid))
    child.wait()
    os.rmdir(cg)
    i += 1
    with open(sys.argv[3], "wb") as f:  # I/O load, synced and then dropped from cache
        f.write(os.urandom(1 << 20)); f.flush(); os.fsync(f.fileno())
    os.unlink(sys.argv[3])
"""


def healthy(out: Path, minutes: float, interval: str = "2s") -> None:
    need_memcg_v1()
    seconds = minutes * 60
    parent = MEMCG_V1 / f"guardian-healthy-{os.getpid()}"
    parent.mkdir()
    scratch = Path(tempfile.mkdtemp(prefix="guardian-healthy-", dir="/var/tmp"))
    load = [subprocess.Popen([sys.executable, "-c", BUSY, str(seconds + 10)])]
    load.append(subprocess.Popen([sys.executable, "-c", CHURN, str(seconds + 10), str(parent),
                                  str(scratch / "io")]))
    try:
        subprocess.run([sys.executable, "-m", "guardian", "record", "-o", str(out),
                        "--interval", interval, "--duration", f"{seconds:g}s"], check=True)
    finally:
        for p in load:
            p.kill()
            p.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        for child in parent.iterdir():
            if child.is_dir():
                child.rmdir()
        parent.rmdir()


# (seconds into the recording, line): the driver's words, in the order it says them
ENA_SEQUENCE = [
    # ena_netdev.c, the tx_timeout/missing-completion check: "TX q %d is paused for too
    # long (threshold %u). Time since last napi %u usec. napi scheduled: %d"
    (430, "ena 0000:00:05.0 eth0: TX q 3 is paused for too long (threshold 5000000). "
          "Time since last napi 6104000 usec. napi scheduled: 1"),
    # the same check, next line: "napi handler hasn't been called for a long time but is
    # scheduled"
    (430, "ena 0000:00:05.0 eth0: napi handler hasn't been called for a long time but is "
          "scheduled"),
    # check_missing_comp_in_tx_queue: "Found a Tx that wasn't completed on time, qid %d,
    # index %d. %u usecs have passed since last napi execution. Missing Tx timeout value
    # %u msecs"
    (470, "ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time, qid 3, index "
          "812. 6102000 usecs have passed since last napi execution. Missing Tx timeout "
          "value 5000 msecs"),
    # ena_timer_service / check_for_admin_com_state: "Trigger reset is on"
    (520, "ena 0000:00:05.0 eth0: Trigger reset is on"),
    # ena_restore_device: "Device reset completed successfully, Driver info: %s"
    (540, "ena 0000:00:05.0 eth0: Device reset completed successfully, Driver info: "
          "Elastic Network Adapter (ENA) v2.8.1g"),
]
BURN_AT = 300  # seconds: the dying memcgs have piled up by then


def chain(out: Path, minutes: float, interval: str = "5s", cap: int = 20_000) -> None:
    """The incident's chain from the crash-looping unit to the NIC reset (see above)."""
    from tests.support.kernel import inject_kmsg
    note = ("crash-looping ecs.service in systemd-nspawn leaking dying memcgs into the "
            f"host; at {BURN_AT}s a dd pinned to core 1 burns it in system time (this "
            "kernel's memory.stat read stays flat, so kubelet's walk is not reproducible "
            "here); the ENA reset sequence written to /dev/kmsg at "
            f"{', '.join(str(t) for t, _ in ENA_SEQUENCE)}s (no ENA NIC on this VM)")
    with crash_loop() as (c, spill), tempfile.TemporaryDirectory() as tmp:
        cap_leak(spill, cap)
        cfg = config_for(c, Path(tmp) / "guardian.toml")
        rec = subprocess.Popen([sys.executable, "-m", "guardian", "record", "-o", str(out),
                                "--interval", interval, "--duration", f"{minutes * 60:g}s",
                                "--config", str(cfg), "--note", note])
        start = time.monotonic()
        burner = None
        try:
            pending = list(ENA_SEQUENCE)
            while rec.poll() is None:
                now = time.monotonic() - start
                if burner is None and now >= BURN_AT:
                    burner = subprocess.Popen(["taskset", "-c", "1", "dd", "if=/dev/zero",
                                               "of=/dev/null", "bs=4M"],
                                              stderr=subprocess.DEVNULL)
                while pending and now >= pending[0][0]:
                    inject_kmsg(pending.pop(0)[1])
                time.sleep(0.2)
        finally:
            if burner is not None:
                burner.kill()
                burner.wait()
            rec.wait()
    drop_caches()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["record", "healthy", "chain"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--minutes", type=float, default=9.0)
    args = ap.parse_args()
    {"record": record, "healthy": healthy, "chain": chain}[args.mode](args.out, args.minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
