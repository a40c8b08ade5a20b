"""Sources against the real kernel of this (root) VM: real zombies, real dying memory
cgroups, a real veth pair, real kernel-log lines. Nothing here is mocked."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import cast

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.plugin.registry import default_registry
from guardian.runtime.collector import Collector
from guardian.sources.cgroups import CgroupsSource
from guardian.sources.cpu import CpuSource
from guardian.sources.kmsg import KmsgSource
from guardian.sources.processes import ProcessesSource
from tests.support.daemon import NotifySocket
from tests.support.kernel import (
    drop_caches,
    dying_memcgs,
    inject_kmsg,
    need_memcg_v1,
    need_root,
    netns_with_veth,
    zombies,
)
from tests.support.wait import BOUND, wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def test_real_zombies_are_counted_per_parent() -> None:
    src = ProcessesSource(Host())
    src.collect(0.0)
    with zombies(7) as parent:
        out = src.collect(10.0)
        fam = out["processes.zombies_by_parent"]
        assert isinstance(fam, dict)
        key = labels_of({"ppid": str(parent.pid), "comm": "python3"})
        mine = {k: v for k, v in fam.items() if dict(k)["ppid"] == str(parent.pid)}
        assert list(mine.values()) == [7.0], fam
        assert dict(next(iter(mine)))["comm"] in ("python3", "python", key[0][1])
        # The total is every parent's zombies: ours and any other process's on this host
        # (another test's or a service's), which come and go on their own.
        others = sum(v for k, v in fam.items() if k not in mine)
        assert out["processes.zombies"] == others + 7
        later = src.collect(25.0)
        assert later["processes.zombie_max_age_seconds"] >= 15.0  # type: ignore[operator]
        pid = str(parent.pid)
    after = src.collect(30.0)
    gone = after["processes.zombies_by_parent"]
    assert isinstance(gone, dict) and not [k for k in gone if dict(k)["ppid"] == pid]


def test_kernel_threads_are_kept_apart() -> None:
    out = ProcessesSource(Host()).collect(0.0)
    assert out["processes.kernel_threads"] >= 1  # type: ignore[operator]
    assert out["processes.total"] > out["processes.kernel_threads"]  # type: ignore[operator]


def test_real_dying_memcgs_rise_and_fall_after_drop_caches() -> None:
    need_memcg_v1()
    src = CgroupsSource(Host())
    assert src.unavailable() is None
    base = src.collect(0.0)
    assert base["memcg.hierarchy_version"] == 1
    with dying_memcgs(40):
        made = src.collect(1.0)
        rise = made["memcg.dying"] - base["memcg.dying"]  # type: ignore[operator]
        assert 36 <= rise <= 44, (base, made)  # a few may be released at once by the kernel
        assert made["memcg.live"] == cast(float, base["memcg.live"]) + 1  # our parent cgroup
        drop_caches()
        released = cast(float, made["memcg.dying"]) - 30
        wait_until(lambda: cast(float, src.collect(2.0)["memcg.dying"]) < released,
                   "the dying memcgs released by drop_caches")


def test_ethtool_stats_of_a_veth_pair_in_our_namespace() -> None:
    """A veth answers the same ETHTOOL_GSTATS ioctl as an ENA NIC; read it from inside a
    network namespace made for this test, through the real CLI. It is also what the
    DaemonSet's hostNetwork gives the pod: guardian reads the NICs of the namespace it runs
    in (here one the test makes plays the node's), not those of the one it started from."""
    with netns_with_veth() as (ns, a, b):
        proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m", "guardian",
                               "signals", "--json", "--warmup", "0s"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rows = {r["name"]: r for r in json.loads(proc.stdout)["data"]}
        stats = rows["nic.stat"]["value"]
        peer_of_a = stats[f'{{driver="veth", iface="{a}", stat="peer_ifindex"}}']
        own = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f" {a}:" not in own and f" {b}:" not in own  # not the test's own NICs
        b_index = subprocess.run(["ip", "netns", "exec", ns, "cat",
                                  f"/sys/class/net/{b}/ifindex"], capture_output=True,
                                 text=True, check=True).stdout
        assert peer_of_a == int(b_index)
        assert rows["nic.stats_available"]["value"] == 2


# Lines written into /dev/kmsg carry the user facility: a process cannot write the
# kernel's (Documentation/ABI/testing/dev-kmsg). These tests let it match, as the closest
# real stand-in for a driver's line; tests/system/test_kmsg_reader.py shows it does not by default.
WRITTEN = KmsgSource.Config(facilities=["kern", "user"])


def test_kmsg_counts_injected_ena_lines_and_wakes_at_once() -> None:
    need_root()
    src = KmsgSource(Host(), WRITTEN)
    assert src.unavailable() is None
    woke = threading.Event()
    reasons: list[str] = []

    def wake(reason: str) -> None:
        reasons.append(reason)
        woke.set()

    src.follow(wake)
    try:
        src.collect(0.0)
        inject_kmsg("ena 0000:20:03.0 eth0: TX q 3 is paused for too long "
                    "(threshold 5000000). Time since last napi 6102000 usec.")
        # woken by the line itself: no collection happens until the wake-up
        assert woke.wait(BOUND), "no wake-up after a matching line"
        assert "ena_tx_paused" in reasons[0]
        inject_kmsg("ena 0000:20:03.0 eth0: Trigger reset is on")
        inject_kmsg("ena 0000:20:03.0 eth0: Device reset completed successfully")
        inject_kmsg("an unrelated line")
        def completed() -> dict[str, object] | None:
            out = src.collect(1.0)
            m = out["kmsg.matches"]
            assert isinstance(m, dict)
            return out if m[labels_of({"pattern": "ena_reset_completed"})] == 1 else None

        out = wait_until(completed, "the reset's completion counted")
        m = out["kmsg.matches"]
        assert isinstance(m, dict)
        assert m[labels_of({"pattern": "ena_tx_paused"})] == 1
        assert m[labels_of({"pattern": "ena_reset_triggered"})] == 1
        assert m[labels_of({"pattern": "ena_reset_completed"})] == 1
        assert m[labels_of({"pattern": "oom_kill"})] == 0
        assert out["kmsg.records"] >= 4  # type: ignore[operator]
    finally:
        src.close()


def test_kmsg_starts_at_the_end_unless_replay() -> None:
    need_root()
    inject_kmsg("ena 0000:20:03.0 eth0: Keep alive watchdog timeout.")
    fresh = KmsgSource(Host(), WRITTEN)
    replay = KmsgSource(Host(), KmsgSource.Config(replay=True, facilities=["kern", "user"]))
    try:
        key = labels_of({"pattern": "ena_keep_alive_timeout"})
        assert fresh.collect(0.0)["kmsg.matches"][key] == 0  # type: ignore[index]
        assert replay.collect(0.0)["kmsg.matches"][key] >= 1  # type: ignore[index]
    finally:
        fresh.close()
        replay.close()


def test_kmsg_overrun_is_counted_not_fatal() -> None:
    """Flood the ring buffer past its size while the source is not reading; the source
    reports lost records and keeps going. printk_devkmsg is set to 'on' for the flood
    (no write rate limit) and restored."""
    need_root()
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    src = KmsgSource(Host(), WRITTEN)
    try:
        src.collect(0.0)
        knob.write_text("on\n")
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            line = b"<7>guardian-test: flood " + b"x" * 200 + b"\n"
            for _ in range(12000):  # ~2.7 MB: more than the ring buffer holds
                os.write(fd, line)
        finally:
            os.close(fd)
        out = src.collect(1.0)
        assert out["kmsg.lost"] > 0  # type: ignore[operator]
        assert out["kmsg.records"] > 0  # type: ignore[operator]
        inject_kmsg("ena 0000:20:03.0 eth0: Trigger reset is on")
        triggered = labels_of({"pattern": "ena_reset_triggered"})
        wait_until(lambda: src.collect(2.0)["kmsg.matches"][triggered] == 1,  # type: ignore[index]
                   "the line after the overrun counted")
    finally:
        knob.write_text(old + "\n")
        src.close()


def test_cpu_percentages_of_real_cores_sum_to_100() -> None:
    src = CpuSource(Host())
    assert "cpu.core.sys_pct" not in src.collect(0.0)  # first sample: no value, not zero
    busy_until = time.monotonic() + 0.3
    while time.monotonic() < busy_until:
        pass
    out = src.collect(0.3)
    cores = out["cpu.cores"]
    assert cores == os.cpu_count()
    total: dict[tuple[tuple[str, str], ...], float] = {}
    for sig in ("user", "nice", "sys", "irq", "softirq", "iowait", "steal", "idle"):
        fam = out[f"cpu.core.{sig}_pct"]
        assert isinstance(fam, dict)
        for k, v in fam.items():
            total[k] = total.get(k, 0.0) + v
    assert total and all(abs(v - 100.0) < 1e-6 for v in total.values())
    ks = out["cpu.ksoftirqd_pct"]
    assert isinstance(ks, dict) and len(ks) == cores


def test_every_default_source_is_available_or_says_why() -> None:
    coll = Collector.from_registry(Host(), default_registry())
    names = {s.name for s in coll.sources} | set(coll.unavailable)
    assert names == set(default_registry().sources)
    assert all(why for why in coll.unavailable.values())
    snap = coll.collect(0.0)
    assert snap.errors == {}, snap.errors


def test_a_failing_source_yields_no_value_and_counts_an_error(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("garbage\n")
    coll = Collector(Host(tmp_path), [CpuSource(Host(tmp_path))])
    snap = coll.collect(0.0)
    assert "cpu.cores" not in snap.values
    assert "cpu" in snap.errors
    assert snap.values["guardian.source_errors"] == {labels_of({"source": "cpu"}): 1.0}


@pytest.mark.parametrize("n", [0, 3])
def test_zombie_helper_leaves_nothing_behind(n: int) -> None:
    from tests.support.kernel import _zombie_children
    with zombies(n) as parent:
        pid = parent.pid
    assert _zombie_children(pid) == 0


def test_a_kernel_log_match_wakes_the_running_loop_at_once(tmp_path: Path) -> None:
    """`guardian run` with a one-hour interval acts on the line: woken by it, since its
    next tick is an hour away."""
    need_root()
    rules = tmp_path / "r.toml"
    rules.write_text('''version = 1
[[rule]]
name = "reset-seen"
summary = "s"
when = 'increase(kmsg.matches{pattern="ena_reset_triggered"}, "1h") > 0'
''')
    config = tmp_path / "g.toml"
    config.write_text('[sources.kmsg]\nfacilities = ["kern", "user"]\n')  # see WRITTEN
    notify = NotifySocket(str(tmp_path / "notify"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env["NOTIFY_SOCKET"] = notify.address
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--dry-run", "--interval", "1h",
         "--config", str(config),
         "--rules", str(rules), "--metrics-port", "0", "--state", str(tmp_path / "s.json"),
         "--audit", str(tmp_path / "a.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stderr is not None
        os.set_blocking(proc.stderr.fileno(), False)
        _read_until(proc, "events: kmsg", BOUND)
        notify.wait_for("READY", timeout=BOUND)  # the first tick is done; the next in 1h
        inject_kmsg("ena 0000:20:03.0 eth0: Trigger reset is on")
        _read_until(proc, "rule reset-seen: firing", BOUND)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        notify.close()


def _read_until(proc: subprocess.Popen[bytes], text: str, timeout: float) -> str:
    """Read the process's (non-blocking) stderr until ``text`` shows, bounded in time."""
    assert proc.stderr is not None
    read: list[str] = []

    def shown() -> bool:
        with contextlib.suppress(BlockingIOError):
            read.append(os.read(stderr, 65536).decode(errors="replace"))
        return text in "".join(read)

    stderr = proc.stderr.fileno()
    try:
        wait_until(shown, f"{text!r} in the log", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it said: {''.join(read)}") from None
    return "".join(read)
