"""A recorded NVML: the functions of pynvml that guardian.hostio.nvml calls, answering from
a recording (tests/fixtures/nvml/*.json, written by tests/support/nvml_record.py on a real
node or by hand from NVML's documented structures), raising pynvml's own ``NVMLError``
classes for the errors recorded. Every other name (constants, ``NVMLError``) is pynvml's.

Recording: ``init`` (null, or the error nvmlInit returns), ``driver_version``, ``count``,
``gpus`` (one object per index: each key one call's answer, or ``{"error": NAME}`` with
NAME one of pynvml's ``NVML_ERROR_*`` without the prefix), ``events`` (``[index, xid]``
pairs the first drain of the event set gives), ``later`` (per index, the answers that
change from the second read on: a GPU that falls off the bus meanwhile).

No GPU in this session: recordings are shaped from NVML's documentation (nvml.h), never
from a machine unless their ``about`` says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def load(name: str) -> dict[str, Any]:
    """A recording of tests/fixtures/nvml by file name."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def _raise(name: str) -> None:
    raise pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


def _answer(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"error"}:
        _raise(value["error"])
    return value


@dataclass
class _Event:
    device: int
    eventType: int
    eventData: int


class RecordedNvml:
    """pynvml's module as far as guardian reads it, over a recording."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.rec = recording
        self.events = [tuple(e) for e in recording.get("events", [])]
        self.calls: list[str] = []  # every call, by name: the test sees what was asked
        self.registered: set[int] = set()
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)  # constants, NVMLError and its classes

    def _gpu(self, handle: int, key: str) -> Any:
        gpu = self.rec["gpus"][handle]
        if key not in gpu:
            _raise("NOT_SUPPORTED")
        return _answer(gpu[key])

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.rec.get("init"):
            _raise(self.rec["init"])

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.rec["driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        self.reads += 1
        if self.reads == 2:
            for index, answers in self.rec.get("later", {}).items():
                self.rec["gpus"][int(index)].update(answers)
        return int(_answer(self.rec["count"]))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self.calls.append(f"handle {index}")
        _answer(self.rec["gpus"][index].get("handle"))
        return index

    # -- identity ------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._gpu(h, "uuid"))

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=str(self._gpu(h, "pci_bus_id")).encode())

    # -- health --------------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, h: int, error: int, counter: int) -> int:
        e = "uncorrected" if error == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        c = "aggregate" if counter == pynvml.NVML_AGGREGATE_ECC else "volatile"
        return int(self._gpu(h, f"ecc.{e}.{c}"))

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        c = "double_bit" if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR \
            else "single_bit"
        return list(self._gpu(h, f"retired_pages.{c}"))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return int(self._gpu(h, "retired_pages_pending"))

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._gpu(h, "remapped_rows")
        return corr, unc, pending, failure

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._gpu(h, "clocks_event_reasons"))

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return int(self._gpu(h, "pcie_replays"))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._gpu(h, "temperature"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._gpu(h, "power_mw"))

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return int(self._gpu(h, "persistence_mode"))

    def _link(self, h: int, link: int) -> dict[str, int]:
        links = self._gpu(h, "nvlinks")
        if link >= len(links):
            _raise("INVALID_ARGUMENT")
        return dict(_answer(links[link]))

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return int(self._link(h, link)["state"])

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        names = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
        return int(_answer(self._link(h, link)[names[counter]]))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        answers = self._link(h, link)
        if "remote" not in answers:
            _raise("NOT_SUPPORTED")
        return int(_answer(answers["remote"]))

    # -- gpu.reset's questions -----------------------------------------------------------
    def _procs(self, h: int, kind: str) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=None)
                for p in self._gpu(h, f"processes.{kind}")]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self._procs(h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return self._procs(h, "graphics")

    def nvmlDeviceGetDisplayActive(self, h: int) -> int:
        return int(self._gpu(h, "display_active"))

    def nvmlDeviceGetDisplayMode(self, h: int) -> int:
        return int(self._gpu(h, "display_mode"))

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return int(self._gpu(h, "architecture"))

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return list(self._gpu(h, "mig_mode"))

    # -- events --------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> str:
        return "event set"

    def nvmlEventSetFree(self, s: str) -> None:
        pass

    def nvmlDeviceGetSupportedEventTypes(self, h: int) -> int:
        return int(self._gpu(h, "supported_events"))

    def nvmlDeviceRegisterEvents(self, h: int, types: int, s: str) -> None:
        self.registered.add(h)

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> _Event:
        assert timeout_ms == 0, "the loop must never wait on NVML"
        while self.events:
            index, code = self.events.pop(0)
            if index in self.registered:
                return _Event(index, pynvml.nvmlEventTypeXidCriticalError, code)
        _raise("TIMEOUT")
        raise AssertionError  # unreachable: _raise raised
