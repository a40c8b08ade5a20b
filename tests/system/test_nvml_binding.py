"""The gpu source through NVIDIA's real binding: `guardian signals` in a process of its
own loads, through pynvml's own loader (CDLL("libnvidia-ml.so.1")) and LD_LIBRARY_PATH, a
stand-in libnvidia-ml.so.1 built from nvml.h's signatures and struct layouts
(tests/support/nvml_standin.c, compiled here) that answers from the same recording the
recorded NVML (tests/support/nvml_recorded.py) replays. So pynvml's ctypes structures
(nvmlPciInfo_t, nvmlProcessInfo_t, nvmlEventData_t), its two-call list protocol
(INSUFFICIENT_SIZE) and its mapping of return codes to NVMLError classes (GPU_IS_LOST = 15,
NOT_SUPPORTED = 3, NO_PERMISSION = 4, TIMEOUT = 10 ending the event drain) are exercised,
and the values must be those the recorded NVML gives. A stand-in built from nvml.h: no
GPU and no driver in this session."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.hostio.nvml import Nvml
from guardian.sources.gpu import GpuConfig, GpuSource
from tests.support.nvml_recorded import RecordedNvml, load
from tests.support.nvml_standin import ENV, SESSIONS_ENV, build, lines

H100 = load("h100x8.json")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in library, built once per session."""
    try:
        return build(tmp_path_factory.mktemp("nvml-standin"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _signals(tmp_path: Path, lib: Path, rec: dict[str, Any]) -> dict[str, Any]:
    """`guardian signals --json` over the stand-in, the gpu source's signals by name."""
    (tmp_path / "nvml.lines").write_text(lines(rec))
    config = tmp_path / "guardian.toml"
    config.write_text('[sources.gpu]\ngpus = "expected"\n')
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), ENV: str(tmp_path / "nvml.lines")}
    ran = subprocess.run([sys.executable, "-m", "guardian", "signals", "--json",
                          "--warmup", "1ms", "--config", str(config), "--root",
                          str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    got = {s["name"]: s for s in json.loads(ran.stdout)["data"] if s["source"] == "gpu"}
    assert got, ran.stderr
    return got


def _recorded(rec: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    """The recorded NVML's values through the same source: two samples, as --warmup."""
    src = GpuSource(Host(tmp_path), GpuConfig(gpus="expected"),
                    reader=lambda: Nvml(RecordedNvml(copy.deepcopy(rec))))
    src.collect(0.0)
    return src.collect(0.001), src.faults()


def _members(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {labels_of(dict(_LABEL.findall(k))): v for k, v in value.items()}


def _same(tmp_path: Path, lib: Path, rec: dict[str, Any]) -> dict[str, Any]:
    got = _signals(tmp_path, lib, rec)
    want, faults = _recorded(rec, tmp_path)
    assert set(got) == set(want)
    for name, value in want.items():
        assert _members(got[name]["value"]) == value, name
        assert got[name].get("unavailable", "") == "; ".join(faults), name
    return got


def test_the_real_binding_reads_what_the_recording_says(tmp_path: Path, standin: Path
                                                        ) -> None:
    got = _same(tmp_path, standin, H100)
    lost = _members(got["nvml.gpu_lost"]["value"])
    # GPU_IS_LOST (15) from nvmlDeviceGetHandleByIndex_v2: GPU 3 from the start, GPU 5
    # from the second read on (its identity kept from the first)
    assert lost[labels_of({"gpu": "3", "UUID": "", "pci_bus_id": ""})] == 1.0
    assert lost[labels_of({"gpu": "5", "UUID": H100["gpus"][5]["uuid"],
                           "pci_bus_id": "00000000:AB:00.0"})] == 1.0
    # NOT_SUPPORTED (3) for retired pages on a GPU that remaps rows: no value, no fault
    assert _members(got["nvml.retired_pages"]["value"]) == {}
    assert "retired" not in got["nvml.gpus"]["unavailable"]
    # the Xid event through nvmlEventSetWait_v2's nvmlEventData_t, then TIMEOUT (10)
    assert list(_members(got["nvml.xid"]["value"]).values()) == [1.0]


def test_refusals_and_a_card_without_nvlink_through_the_real_binding(
        tmp_path: Path, standin: Path) -> None:
    rec = copy.deepcopy(H100)
    del rec["gpus"][1]["nvlinks"]  # a PCIe card: NOT_SUPPORTED from link 0's state
    rec["gpus"][4]["temperature"] = {"error": "NO_PERMISSION"}
    rec["gpus"][6]["retired_pages.single_bit"] = [4096, 8192]  # the two-call list
    rec["gpus"][6]["retired_pages.double_bit"] = []
    got = _same(tmp_path, standin, rec)
    assert "GPU 4 (00000000:9A:00.0): NVML NO_PERMISSION: temperature" in \
        got["nvml.gpus"]["unavailable"]
    active = _members(got["nvml.nvlinks_active"]["value"])
    assert not any(dict(k)["gpu"] == "1" for k in active)
    pages = _members(got["nvml.retired_pages"]["value"])
    assert sorted(pages.values()) == [0.0, 2.0]


def test_guardian_act_resets_with_no_nvml_session_of_its_own_open(tmp_path: Path,
                                                                   standin: Path) -> None:
    """`guardian act gpu.reset` collects a snapshot first (the gpu source opens NVML
    through pynvml and keeps it open), then runs nvidia-smi --gpu-reset, which
    nvidia-smi(1) -r refuses while a monitoring application holds the GPU. The stand-in
    library counts its open sessions (nvmlInit not yet matched by nvmlShutdown) in a
    file; the stand-in nvidia-smi reads it and, as the real one would with a user of the
    GPU, fails while it is not 0. Before, the source's session was open (1) while
    nvidia-smi ran."""
    (tmp_path / "nvml.lines").write_text(lines(H100))
    config = tmp_path / "guardian.toml"
    config.write_text('[sources.gpu]\ngpus = "expected"\n')
    count, seen = tmp_path / "sessions", tmp_path / "seen"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nn=$(cat "{count}")\necho "$n" >> "{seen}"\n'
                   '[ "$n" = 0 ] || { echo "stand-in: $n NVML session(s) open" >&2; '
                   'exit 1; }\necho "stand-in: GPU $4 reset"\n')
    smi.chmod(0o755)
    env = {**os.environ, "LD_LIBRARY_PATH": str(standin),
           ENV: str(tmp_path / "nvml.lines"), SESSIONS_ENV: str(count)}
    ran = subprocess.run([sys.executable, "-m", "guardian", "act", "gpu.reset", "--set",
                          "gpu=00000000:3A:00.0", "--set", f'nvidia_smi=["{smi}"]',
                          "--warmup", "1ms", "--config", str(config), "--root",
                          str(tmp_path), "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert seen.read_text() == "0\n", ran.stdout + ran.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    outcome = json.loads(ran.stdout)["data"]["outcome"]
    assert outcome["ok"] and outcome["verified"] is True
    assert outcome["data"]["nvml_sessions_released"] == 1  # the gpu source's
    assert count.read_text() == "0\n"  # every session shut at the end
