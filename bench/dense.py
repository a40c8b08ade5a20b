"""The daemon with the journal and exposition sources on a node that looks like a busy
Kubernetes worker, against node_exporter with the same collectors, in one run.

The node (made here, removed after; root only): 3,000 processes (sleepers), 400 network
interfaces (veth pairs), 2,000 live memory cgroups (empty ones under the memory
controller), a dcgm-exporter page for 8 GPUs and a kubelet-sized page as textfile-collector
files, and a stand-in journalctl writing 50 kubelet-like entries a second. guardian runs
its shipped rules (dry run, 1 s tick) with every default source plus the journal (3
patterns over those entries) and exposition (the textfile directory); node_exporter runs
the collectors for what guardian's default sources read plus its textfile collector on
the same directory, scraped once a second. Each one's CPU (every thread, children waited
for) per minute over GUARDIAN_BENCH_DENSE_MINUTES (3 unless set); the figure is the median
of the minutes after the first.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import NODE_EXPORTER_COLLECTORS, REPO, cpu_seconds, figure, node_exporter, rss_mib
from daemon import _free_port, _scrape_every_second
from feeds import dcgm_page, kubelet_page

MEMCG = Path("/sys/fs/cgroup/memory")
CGROUP2 = Path("/sys/fs/cgroup")

JOURNAL = r'''
import json, sys, time
n = 0
while True:
    for _ in range(50):
        n += 1
        e = {"__CURSOR": "s=bench;i=%x" % n, "_SYSTEMD_UNIT": "kubelet.service",
             "_UID": "0", "_PID": "1234",
             "MESSAGE": 'I1204 08:00:00.000000 1 kubelet.go:2400] "SyncLoop UPDATE" '
                        'source="api" pods=["default/web-%d"]' % (n % 300)}
        sys.stdout.write(json.dumps(e) + "\n")
    sys.stdout.flush()
    time.sleep(1)
'''


@contextlib.contextmanager
def dense_node(processes: int = 3000, links: int = 400, memcgs: int = 2000) -> Iterator[None]:
    sleep = shutil.which("sleep") or "/bin/sleep"
    pids: list[int] = []
    made_links: list[str] = []
    parent = (MEMCG if MEMCG.is_dir() else CGROUP2) / f"guardian-bench-{os.getpid()}"
    made_cgroups: list[Path] = []
    try:
        pids += [os.posix_spawn(sleep, [sleep, "3600"], {}) for _ in range(processes)]
        for i in range(links // 2):  # veth pairs (this VM's kernel has no dummy links)
            name = f"gbench{i}"
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name",
                            f"gbench{i}p"], check=True, capture_output=True)
            made_links.append(name)
        parent.mkdir()
        made_cgroups.append(parent)
        for i in range(memcgs):
            (parent / f"c{i}").mkdir()
            made_cgroups.append(parent / f"c{i}")
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)
        for name in made_links:
            subprocess.run(["ip", "link", "del", name], capture_output=True)
        for cg in reversed(made_cgroups):
            with contextlib.suppress(OSError):
                cg.rmdir()


@contextlib.contextmanager
def _guardian(tmp: str, textfiles: str) -> Iterator[subprocess.Popen[bytes]]:
    Path(tmp, "journalctl.py").write_text(JOURNAL)
    Path(tmp, "g.toml").write_text(f'''
[sources.journal]
journalctl = ["{sys.executable}", "{tmp}/journalctl.py"]
units = ["kubelet.service", "containerd.service"]
[sources.journal.patterns]
pleg = 'PLEG is not healthy'
runtime_down = 'container runtime is down'
oom = 'out of memory'
[sources.exposition]
textfile_directories = ["{textfiles}"]
interval = "15s"
max_series = 10000
''')
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "PYTHONDONTWRITEBYTECODE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--dry-run", "--rules", str(REPO / "rules"),
         "--config", f"{tmp}/g.toml", "--interval", "1s", "--metrics-port", "0",
         "--state", f"{tmp}/s.json", "--audit", f"{tmp}/a.jsonl"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/stderr", "wb"), env=env)  # noqa: SIM115
    try:
        time.sleep(3)
        if proc.poll() is not None:
            raise RuntimeError(f"guardian exited: {Path(tmp, 'stderr').read_text()[-2000:]}")
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def side_by_side(minutes: int) -> dict[str, Any]:
    binary = node_exporter()
    with tempfile.TemporaryDirectory() as tmp, dense_node():
        textfiles = Path(tmp, "textfile")
        textfiles.mkdir()
        (textfiles / "dcgm.prom").write_text(dcgm_page())
        (textfiles / "kubelet.prom").write_text(kubelet_page())
        with _guardian(tmp, str(textfiles)) as daemon, contextlib.ExitStack() as stack:
            peer = None
            if binary is not None:
                port = _free_port()
                peer = subprocess.Popen(
                    [str(binary), f"--web.listen-address=127.0.0.1:{port}",
                     "--collector.disable-defaults",
                     *(f"--collector.{c}" for c in NODE_EXPORTER_COLLECTORS),
                     "--collector.textfile", f"--collector.textfile.directory={textfiles}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stack.callback(peer.wait, timeout=10)
                stack.callback(peer.terminate)
                stop = threading.Event()
                threading.Thread(target=_scrape_every_second,
                                 args=(f"http://127.0.0.1:{port}/metrics", stop),
                                 daemon=True).start()
                stack.callback(stop.set)
            time.sleep(5)
            ours = [cpu_seconds(daemon.pid)]
            theirs = [cpu_seconds(peer.pid) if peer else 0.0]
            for _ in range(max(minutes, 2)):
                time.sleep(60)
                ours.append(cpu_seconds(daemon.pid))
                theirs.append(cpu_seconds(peer.pid) if peer else 0.0)
            alive = daemon.poll() is None
            rss = rss_mib(daemon.pid)
    per_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(ours)]
    peer_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(theirs)]
    return {"ours": statistics.median(per_min[1:]), "per_minute": per_min,
            "peer": statistics.median(peer_min[1:]) if binary else None,
            "peer_per_minute": peer_min, "rss": rss, "alive": alive}


def run() -> Iterator[dict[str, Any]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise RuntimeError("the dense node needs root and ip(8)")
    minutes = int(os.environ.get("GUARDIAN_BENCH_DENSE_MINUTES", "3"))
    r = side_by_side(minutes)
    assert r["alive"], "the daemon exited during the run"
    how = ("whole process, 1 s tick, shipped rules, dry run, every default source plus "
           "journal (50 entries/s) and exposition (8-GPU dcgm page + 5,000-sample page, "
           "every 15 s) on 3,000 processes, 400 interfaces, 2,000 memcgs; median of minutes "
           f"2-{len(r['per_minute'])} (ours {[round(m, 2) for m in r['per_minute']]}, "
           f"node_exporter {[round(m, 2) for m in r['peer_per_minute']]}); RSS "
           f"{r['rss']:.1f} MiB")
    yield figure("daemon.cpu on a dense worker with journal and exposition", r["ours"],
                 "% of a core", how,
                 "node_exporter, same collectors + textfile, scraped every second"
                 if r["peer"] is not None else "", r["peer"], digits=2)


if __name__ == "__main__":
    import json
    for f in run():
        print(json.dumps(f))
