"""The cost of the exposition and journal sources.

1. Textfile .prom files the size of a dense GPU worker's (dcgm-exporter's page for 8 GPUs:
   the default counters of etc/default-counters.csv plus the ECC, NVLink and row-remap
   blocks, with its labels; and a kubelet-sized page of 5,000 samples) read and turned
   into signals by the exposition source, per sample, against node_exporter's textfile
   collector (Debian's package) reading the same directory, per sample of a scrape, in
   the same run (its CPU from /proc; ours from the process's CPU clock).
2. The journal source under a flood, per entry: a stand-in journalctl writes 50,000
   JSON entries as fast as the pipe takes them; the source's CPU (the process's, the
   reader thread's included) per entry, against a bare json.loads of the same lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import cpu_seconds, figure, interleaved, node_exporter

from guardian.hostio.host import Host
from guardian.sources.exposition import ExpositionConfig, ExpositionSource
from guardian.sources.journal import JournalConfig, JournalSource

DCGM_FIELDS = [
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
]


def dcgm_page(gpus: int = 8) -> str:
    out = []
    for f in DCGM_FIELDS:
        out += [f"# HELP {f} {f}.", f"# TYPE {f} gauge"]
        for g in range(gpus):
            out.append(
                f'{f}{{gpu="{g}",UUID="GPU-{g:08x}-d9cf-fef3-62e9-d92044ab6e52",'
                f'pci_bus_id="00000000:{g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",hostname="worker-7",'
                f'container="trainer",namespace="ml",pod="trainer-{g}"}} {g * 7 + 1}')
    return "\n".join(out) + "\n"


def kubelet_page(samples: int = 5000) -> str:
    out = ["# HELP kubelet_x A kubelet-sized histogram.", "# TYPE kubelet_x gauge"]
    out += [f'kubelet_x{{pod="p{i // 10}",container="c{i % 10}",namespace="default"}} {i}'
            for i in range(samples)]
    return "\n".join(out) + "\n"


def exposition_vs_node_exporter(rounds: int = 40) -> tuple[float, float | None, int]:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "dcgm.prom").write_text(dcgm_page())
        Path(d, "kubelet.prom").write_text(kubelet_page())
        src = ExpositionSource(Host(), ExpositionConfig(
            textfile_directories=[d], max_series=10_000))

        def ours() -> None:
            src.refresh()
            src.collect(0.0)

        ours()
        fam = src.collect(0.0)["prom.sample"]
        n = len(fam) if isinstance(fam, dict) else 0
        (cost,) = interleaved([ours], rounds)
        peer = None
        binary = node_exporter()
        if binary is not None:
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = subprocess.Popen(
                [str(binary), "--collector.disable-defaults", "--collector.textfile",
                 f"--collector.textfile.directory={d}", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                for _ in range(100):
                    try:
                        urllib.request.urlopen(url, timeout=2).read()
                        break
                    except OSError:
                        time.sleep(0.05)
                for _ in range(5):  # warm
                    urllib.request.urlopen(url, timeout=5).read()
                before = cpu_seconds(proc.pid)
                for _ in range(rounds * 5):
                    urllib.request.urlopen(url, timeout=5).read()
                peer = (cpu_seconds(proc.pid) - before) / (rounds * 5)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        return cost, peer, n


FAKE = r'''
import sys
line = sys.argv[1]
out = sys.stdout
for i in range(int(sys.argv[2])):
    out.write(line % i)
out.flush()
import time; time.sleep(3600)
'''


def journal_flood(n: int = 50_000) -> tuple[float, float]:
    line = json.dumps({"__CURSOR": "s=abc;i=%x", "_SYSTEMD_UNIT": "kubelet.service",
                       "_UID": "0", "_PID": "1234",
                       "MESSAGE": 'E0101 12:00:00.000000 1 kubelet.go:2412] "Skipping pod '
                                  'synchronization" err="container runtime is down"'})
    line = line.replace("%x", "%d") + "\n"
    with tempfile.TemporaryDirectory() as d:
        Path(d, "fake.py").write_text(FAKE)
        src = JournalSource(Host(), JournalConfig(
            journalctl=[sys.executable, f"{d}/fake.py", line, str(n)],
            patterns={"pleg": "PLEG is not healthy", "runtime_down": "runtime is down",
                      "oom": "out of memory"}, max_entries_per_tick=10 ** 9))
        start = time.process_time()
        src.follow(lambda _: None)
        deadline = time.monotonic() + 120
        while src.lines < n and time.monotonic() < deadline:
            time.sleep(0.01)
        ours = (time.process_time() - start) / n
        src.close()
    lines = [(line % i).encode() for i in range(n)]
    start = time.process_time()
    for raw in lines:
        json.loads(raw)
    floor = (time.process_time() - start) / n
    return ours, floor


def run() -> Iterator[dict[str, Any]]:
    cost, peer, n = exposition_vs_node_exporter()
    how = (f"a dcgm-exporter page for 8 GPUs ({len(DCGM_FIELDS)} fields, pod labels) and a "
           f"5,000-sample kubelet-sized page as textfile .prom files: {n} samples read, "
           "parsed and made signals, median of 40")
    peer_name = "node_exporter's textfile collector, one scrape of the same files (its CPU)"
    yield figure("exposition per sample", cost / n * 1e6, "µs", how, peer_name,
                 None if peer is None else peer / n * 1e6, digits=2)
    ours, floor = journal_flood()
    yield figure("journal per entry under a flood", ours * 1e6, "µs",
                 "50,000 JSON entries from a stand-in journalctl as fast as the pipe takes "
                 "them, 3 patterns, the process's CPU", "a bare json.loads of the same lines",
                 floor * 1e6, digits=2)


if __name__ == "__main__":
    for f in run():
        print(json.dumps(f))
    sys.exit(0)
