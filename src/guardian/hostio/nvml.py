"""The NVIDIA Management Library (NVML) through NVIDIA's own binding, ``nvidia-ml-py``
(the ``pynvml`` module), read-only: what the GPU source and ``gpu.reset`` ask of the
driver, as plain data.

pynvml loads ``libnvidia-ml.so.1`` (installed with the driver) at ``nvmlInit``; every call
returns an ``nvmlReturn_t`` that pynvml raises as ``NVMLError`` (a subclass per code:
``NVMLError_NotSupported``, ``NVMLError_GpuIsLost`` ...). Here each call's failure becomes
"no value" for what it reads and a :class:`Failure` that names the GPU, what was read and
NVML's error (``NOT_SUPPORTED``, ``NO_PERMISSION``, ``GPU_IS_LOST``, ...); nothing is ever
read as 0. ``NOT_SUPPORTED`` is what the GPU does not have (retired pages on GPUs that
remap rows, NVLink on a PCIe card, NVML's documentation of each call): no value, and kept
apart from the failures (:attr:`GpuReading.unsupported`), as it is no fault.

The module is handed in (``nvml``), so tests replay a recording through the same code
with pynvml's own exception classes (tests/support/nvml_recorded.py), and a stand-in
``libnvidia-ml.so.1`` built from nvml.h exercises pynvml itself (tests/system).

Every session (``nvmlInit`` .. ``nvmlShutdown``) is counted in :class:`Sessions`, so
``gpu.reset`` can shut them all down while ``nvidia-smi --gpu-reset`` runs: nvidia-smi(1)
counts monitoring applications that hold the GPU as its users, and nvml.h says of
nvmlShutdown: "This method should be called after NVML work is done, once for each call
to nvmlInit() A reference count of the number of initializations is maintained. Shutdown
only occurs when the reference count reaches zero." A session released so reads again
(initialised anew) at its next :meth:`Nvml.read` after the reset has ended.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from guardian.core.errors import GuardianError

#: NVML's clocks event reasons (nvml.h ``nvmlClocksEventReason*``), by bit.
EVENT_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                 0x100: "display_clock_setting"}
#: nvml.h ``nvmlNvLinkErrorCounter_t``: the DL error counters read per link.
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS of the drivers H100/H200 run (18 links)
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
AMPERE = 7  # nvml.h NVML_DEVICE_ARCH_AMPERE
MAX_EVENTS = 1000  # events taken in one drain (a flood costs bounded time)


class NvmlUnavailable(GuardianError):
    """NVML cannot be used on this host: no library, no driver, a version mismatch.
    ``error`` is the name of what nvmlInit returned (``LIBRARY_NOT_FOUND``), "" when
    NVML was not reached."""

    def __init__(self, why: str, error: str = "") -> None:
        super().__init__(why)
        self.error = error


class NvmlReleased(NvmlUnavailable):
    """NVML is released in this process while a GPU is reset: no session opens, and the
    reads wait for the next one after it."""


@dataclass
class Release:
    """What :meth:`Sessions.released` shut down: the sessions (each nvmlInit matched by
    its nvmlShutdown), and the shutdowns NVML refused (then the library may still hold
    the device files)."""

    sessions: int = 0
    failures: list[str] = field(default_factory=list)


class Sessions:
    """This process's NVML sessions (each nvmlInit not yet matched by nvmlShutdown), and
    the handshake that releases them all for a GPU reset. ``lock`` is held to open or
    shut a session and for one source read (bounded, never waiting on NVML events), never
    while the reset runs: a read in progress ends before a release shuts its session,
    and a read during the release fails at once with why."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: list[Nvml] = []
        self.why = ""  # why NVML is released now ("" when it is not)

    @contextmanager
    def released(self, why: str) -> Iterator[Release]:
        """Shut every open session down and refuse new ones (``why`` is said by each
        refusal) until the block ends, whether it succeeds or raises. Raises
        NvmlReleased when a release is under way already."""
        with self.lock:
            if self.why:
                raise NvmlReleased(self.why)
            self.why = why
            done = Release()
            for nvml in list(self.open):
                failed = nvml._shut()
                done.sessions += 1
                if failed:
                    done.failures.append(failed)
        try:
            yield done
        finally:
            with self.lock:
                self.why = ""


#: the process's sessions: the gpu source's and gpu.reset's readers share them
SESSIONS = Sessions()


def load() -> Any:
    """The pynvml module (``nvidia-ml-py``). Raises NvmlUnavailable without it."""
    try:
        import pynvml
    except ImportError as exc:  # a broken install: it is a dependency
        raise NvmlUnavailable(f"the pynvml module (nvidia-ml-py) cannot be imported: "
                              f"{exc}") from None
    return pynvml


def error_name(nvml: Any, exc: BaseException) -> str:
    """NVML's name of an error (``GPU_IS_LOST``), from pynvml's constants; the code when
    no constant names it."""
    value = getattr(exc, "value", None)
    module = sys.modules.get(type(exc).__module__, nvml)  # pynvml, where it is defined
    for name in dir(module):
        if name.startswith("NVML_ERROR_") and getattr(module, name) == value:
            return name[len("NVML_ERROR_"):]
    return f"NVML error {value}"


@dataclass(frozen=True)
class Failure:
    """One read that NVML refused: which GPU (index), what, and NVML's error name."""

    gpu: int | None
    what: str
    error: str

    def __str__(self) -> str:
        where = f"GPU {self.gpu}: " if self.gpu is not None else ""
        return f"{where}{self.what}: NVML {self.error}"


@dataclass
class GpuReading:
    """What NVML said of one GPU. ``values`` maps a field (``ecc.uncorrected.volatile``,
    ``temperature``) to its number; a field NVML refused is absent (no value), with its
    :class:`Failure` in ``failures`` or its name in ``unsupported``. ``lost`` is True when
    NVML answered GPU_IS_LOST (fallen off the bus), False when it answered, None when the
    GPU could not be asked at all. ``nvlinks`` maps each active NVLink's number to its DL
    error counters (``replay``, ``recovery``, ``crc_flit``, ``crc_data``), as NVML keeps
    them per link: a link that is not active has no entry (it is not read)."""

    index: int
    uuid: str = ""
    pci_bus_id: str = ""
    lost: bool | None = None
    values: dict[str, float] = field(default_factory=dict)
    nvlinks: dict[int, dict[str, float]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


@dataclass
class Reading:
    """One read of every GPU NVML counts, and the Xid events taken since the last one
    (``(GPU index, Xid code)``; index -1 when the event's GPU is not one of them)."""

    count: int
    gpus: list[GpuReading]
    xids: list[tuple[int, int]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)


@dataclass
class ResetFacts:
    """What decides whether one GPU may be reset (``gpu.reset``'s plan): each None when
    NVML could not say (then the reset is refused: unknown is not "free")."""

    index: int
    uuid: str
    pci_bus_id: str
    pids: list[int] | None  # compute and graphics processes on it
    display_active: bool | None
    display_mode: bool | None
    mig_enabled: bool | None
    active_nvlinks: int | None
    architecture: int | None = None  # nvml.h nvmlDeviceArchitecture_t (7 Ampere, 9 Hopper)
    failures: list[Failure] = field(default_factory=list)
    # an active NVLink reaches an NVSwitch (nvmlDeviceGetNvLinkRemoteDeviceType SWITCH);
    # asked of Ampere GPUs with active links only (their reset alone needs Fabric
    # Manager there), else None
    nvswitch: bool | None = None


def _key(handle: Any) -> Any:
    """A device handle as a dict key (pynvml's is a ctypes pointer)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class Nvml:
    """NVML, opened once (:meth:`start`) and read many times; every read is bounded and
    never waits (Xid events are taken with a 0 ms wait). Its session is one of
    ``sessions`` (the process's by default), which a GPU reset may release."""

    def __init__(self, nvml: Any | None = None, sessions: Sessions = SESSIONS) -> None:
        self.nvml: Any = nvml
        self.sessions = sessions
        self.opened = False
        self.events: Any = None
        self.registered: dict[Any, int] = {}  # handle key -> index
        self.known: dict[int, tuple[str, str]] = {}  # index -> (uuid, pci) last read

    # -- open and close ------------------------------------------------------------------
    def start(self) -> None:
        """nvmlInit and the Xid event set. Raises NvmlUnavailable with NVML's reason (no
        library, driver not loaded, library/driver version mismatch, ...), or
        NvmlReleased while a GPU reset runs."""
        with self.sessions.lock:
            self._start()

    def _start(self) -> None:
        """:meth:`start` with the sessions' lock held."""
        if self.opened:
            return
        if self.sessions.why:
            raise NvmlReleased(self.sessions.why)
        if self.nvml is None:
            self.nvml = load()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            name = error_name(self.nvml, exc)
            raise NvmlUnavailable(_WHY_NOT.get(name, f"nvmlInit failed: NVML {name}"),
                                  name) from None
        self.opened = True
        self.sessions.open.append(self)

    def driver_version(self) -> str | None:
        """The driver's version as NVML says it, or None."""
        got = self._call(None, "driver version", self.nvml.nvmlSystemGetDriverVersion, [])
        return str(got) if got is not None else None

    def close(self) -> None:
        """Free the event set and shut NVML down (best effort)."""
        with self.sessions.lock:
            self._shut()

    def _shut(self) -> str:
        """:meth:`close` with the sessions' lock held: "" when NVML shut down, else what
        it refused. The session is closed either way (never shut down twice)."""
        if not self.opened:
            return ""
        failed = ""
        if self.events is not None:
            try:
                self.nvml.nvmlEventSetFree(self.events)
            except self.nvml.NVMLError as exc:
                failed = f"nvmlEventSetFree: NVML {error_name(self.nvml, exc)}"
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            failed = f"nvmlShutdown: NVML {error_name(self.nvml, exc)}"
        self.events, self.registered, self.opened = None, {}, False
        if self in self.sessions.open:
            self.sessions.open.remove(self)
        return failed

    # -- one call ------------------------------------------------------------------------
    def _call(self, gpu: int | None, what: str, fn: Callable[..., Any], failures: list[Failure],
              *args: Any, unsupported: list[str] | None = None) -> Any:
        """``fn(*args)``, or None with the failure recorded (NOT_SUPPORTED in
        ``unsupported`` when given)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            name = error_name(self.nvml, exc)
            if name == "NOT_SUPPORTED" and unsupported is not None:
                unsupported.append(what)
            else:
                failures.append(Failure(gpu, what, name))
            return None

    # -- the source's read ---------------------------------------------------------------
    def read(self) -> Reading:
        """Every GPU's health fields, then the Xid events waiting (never waits on NVML).
        A session a GPU reset released is opened again first (its event set anew);
        during the reset this raises NvmlReleased at once."""
        with self.sessions.lock:
            self._start()
            return self._read()

    def _read(self) -> Reading:
        n = self.nvml
        failures: list[Failure] = []
        count = self._call(None, "device count", n.nvmlDeviceGetCount, failures)
        reading = Reading(int(count) if count is not None else 0, [], failures=failures)
        for index in range(reading.count):
            reading.gpus.append(self._read_gpu(index))
        reading.xids = self._drain_xids(reading)
        return reading

    def _handle(self, g: GpuReading) -> Any:
        handle = self._call(g.index, "handle", self.nvml.nvmlDeviceGetHandleByIndex,
                            g.failures, g.index)
        if handle is None:
            g.lost = True if any(f.error == "GPU_IS_LOST" for f in g.failures) else None
            g.uuid, g.pci_bus_id = self.known.get(g.index, ("", ""))
        return handle

    def _read_gpu(self, index: int) -> GpuReading:
        n = self.nvml
        g = GpuReading(index)
        handle = self._handle(g)
        if handle is None:
            return g
        uuid = self._call(index, "uuid", n.nvmlDeviceGetUUID, g.failures, handle)
        pci = self._call(index, "pci info", n.nvmlDeviceGetPciInfo, g.failures, handle)
        known = self.known.get(index, ("", ""))
        g.uuid = _text(uuid) if uuid is not None else known[0]
        g.pci_bus_id = _text(pci.busId) if pci is not None else known[1]
        if uuid is not None and pci is not None:
            self.known[index] = (g.uuid, g.pci_bus_id)

        def get(what: str, fn: Callable[..., Any], *args: Any) -> Any:
            return self._call(index, what, fn, g.failures, handle, *args,
                              unsupported=g.unsupported)

        v = g.values
        for err_name, err in (("corrected", n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                              ("uncorrected", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            for ctr_name, ctr in (("volatile", n.NVML_VOLATILE_ECC),
                                  ("aggregate", n.NVML_AGGREGATE_ECC)):
                _put(v, f"ecc.{err_name}.{ctr_name}",
                     get(f"ecc {err_name} {ctr_name}", n.nvmlDeviceGetTotalEccErrors, err, ctr))
        for cause_name, cause in (
                ("single_bit", n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                ("double_bit", n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)):
            pages = get(f"retired pages {cause_name}", n.nvmlDeviceGetRetiredPages, cause)
            if pages is not None:
                v[f"retired_pages.{cause_name}"] = float(len(pages))
        _put(v, "retired_pages.pending", get("retired pages pending",
                                             n.nvmlDeviceGetRetiredPagesPendingStatus))
        rows = get("remapped rows", n.nvmlDeviceGetRemappedRows)
        if rows is not None:
            corr, unc, pending, failure = rows
            v.update({"remapped_rows.correctable": float(corr),
                      "remapped_rows.uncorrectable": float(unc),
                      "remap.pending": float(bool(pending)),
                      "remap.failed": float(bool(failure))})
        reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            n.nvmlDeviceGetCurrentClocksThrottleReasons
        _put(v, "clocks_event_reasons", get("clocks event reasons", reasons))
        _put(v, "pcie_replays", get("pcie replay counter", n.nvmlDeviceGetPcieReplayCounter))
        _put(v, "temperature", get("temperature", n.nvmlDeviceGetTemperature,
                                   n.NVML_TEMPERATURE_GPU))
        milliwatts = get("power usage", n.nvmlDeviceGetPowerUsage)
        if milliwatts is not None:
            v["power_watts"] = milliwatts / 1000.0
        mode = get("persistence mode", n.nvmlDeviceGetPersistenceMode)
        if mode is not None:
            v["persistence_mode"] = float(mode == n.NVML_FEATURE_ENABLED)
        self._nvlinks(g, handle)
        g.lost = any(f.error == "GPU_IS_LOST" for f in g.failures)
        if g.index not in self.registered.values():
            self._register(g, handle)
        return g

    def _nvlinks(self, g: GpuReading, handle: Any) -> None:
        """Each active link's DL error counters (nvmlDeviceGetNvLinkErrorCounter is per
        link), and how many links are active; nothing when the GPU has no NVLink
        (NOT_SUPPORTED on link 0). Never a sum: a link that goes inactive takes its
        counters out of any sum over the active links, which a rate reads as a counter
        reset (all the others' errors new) and again when it comes back."""
        n = self.nvml
        active = 0
        for link in range(NVLINK_MAX_LINKS):
            unsupported: list[str] = []
            failed: list[Failure] = []
            state = self._call(g.index, f"nvlink {link} state", n.nvmlDeviceGetNvLinkState,
                               failed, handle, link, unsupported=unsupported)
            if state is None:
                if unsupported and link == 0:
                    g.unsupported.append("nvlink")
                # past the GPU's last link: NOT_SUPPORTED, or INVALID_ARGUMENT ("link is
                # invalid", nvml.h nvmlDeviceGetNvLinkState)
                if unsupported or (link > 0 and failed[0].error == "INVALID_ARGUMENT"):
                    break
                g.failures += failed
                return  # a failure: the active links are not all known
            if not state:
                continue
            active += 1
            counters: dict[str, float] = {}
            for name, counter in NVLINK_COUNTERS.items():
                got = self._call(g.index, f"nvlink {link} {name} errors",
                                 n.nvmlDeviceGetNvLinkErrorCounter, g.failures, handle, link,
                                 counter, unsupported=unsupported)
                if got is not None:
                    counters[name] = float(got)
            g.nvlinks[link] = counters
        if "nvlink" in g.unsupported:
            return
        g.values["nvlink.active"] = float(active)

    # -- Xid events ----------------------------------------------------------------------
    def _register(self, g: GpuReading, handle: Any) -> None:
        n = self.nvml
        if self.events is None:
            self.events = self._call(None, "event set", n.nvmlEventSetCreate, g.failures)
            if self.events is None:
                return
        types = self._call(g.index, "supported events", n.nvmlDeviceGetSupportedEventTypes,
                           g.failures, handle, unsupported=g.unsupported)
        if types is None or not int(types) & XID_EVENT:
            if types is not None:
                g.unsupported.append("xid events")
            return
        try:
            n.nvmlDeviceRegisterEvents(handle, XID_EVENT, self.events)
        except n.NVMLError as exc:
            g.failures.append(Failure(g.index, "xid events", error_name(n, exc)))
            return
        self.registered[_key(handle)] = g.index

    def _drain_xids(self, reading: Reading) -> list[tuple[int, int]]:
        """The Xid events waiting, each taken with a 0 ms wait until NVML says TIMEOUT
        (none left), at most MAX_EVENTS."""
        n = self.nvml
        out: list[tuple[int, int]] = []
        if self.events is None or not self.registered:
            return out
        for _ in range(MAX_EVENTS):
            try:
                data = n.nvmlEventSetWait_v2(self.events, 0)
            except n.NVMLError as exc:
                name = error_name(n, exc)
                if name != "TIMEOUT":
                    reading.failures.append(Failure(None, "xid events", name))
                break
            if int(data.eventType) & XID_EVENT:
                out.append((self.registered.get(_key(data.device), -1), int(data.eventData)))
        return out

    # -- gpu.reset's questions -----------------------------------------------------------
    def find(self, target: str) -> tuple[int, Any] | None:
        """The GPU a target names (its PCI bus id, any case, with or without the domain's
        leading zeros; its UUID; or its index), as (index, handle); None when none is."""
        n = self.nvml
        failures: list[Failure] = []
        count = self._call(None, "device count", n.nvmlDeviceGetCount, failures) or 0
        want = normal_pci(target)
        for index in range(int(count)):
            handle = self._call(index, "handle", n.nvmlDeviceGetHandleByIndex, failures, index)
            if handle is None:
                continue
            uuid = self._call(index, "uuid", n.nvmlDeviceGetUUID, failures, handle)
            pci = self._call(index, "pci info", n.nvmlDeviceGetPciInfo, failures, handle)
            if target in (str(index), _text(uuid) if uuid is not None else None) or (
                    pci is not None and normal_pci(_text(pci.busId)) == want):
                return index, handle
        return None

    def reset_facts(self, index: int, handle: Any) -> ResetFacts:
        """What NVML says of one GPU that decides whether it may be reset."""
        n = self.nvml
        f: list[Failure] = []
        uuid = self._call(index, "uuid", n.nvmlDeviceGetUUID, f, handle)
        pci = self._call(index, "pci info", n.nvmlDeviceGetPciInfo, f, handle)
        pids: list[int] | None = []
        for what, fn in (("compute processes", n.nvmlDeviceGetComputeRunningProcesses),
                         ("graphics processes", n.nvmlDeviceGetGraphicsRunningProcesses)):
            got = self._call(index, what, fn, f, handle)
            if got is None or pids is None:
                pids = None
            else:
                pids += [int(p.pid) for p in got if int(p.pid) not in pids]
        unsupported: list[str] = []
        active = self._call(index, "display active", n.nvmlDeviceGetDisplayActive, f, handle,
                            unsupported=unsupported)
        mode = self._call(index, "display mode", n.nvmlDeviceGetDisplayMode, f, handle,
                          unsupported=unsupported)
        mig = self._call(index, "mig mode", n.nvmlDeviceGetMigMode, f, handle,
                         unsupported=unsupported)
        arch = self._call(index, "architecture", n.nvmlDeviceGetArchitecture, f, handle)
        links = GpuReading(index)
        self._nvlinks(links, handle)
        f += links.failures
        nvswitch = self._nvswitch(index, handle, f) if arch == AMPERE and \
            links.values.get("nvlink.active") else None
        return ResetFacts(
            index, _text(uuid) if uuid is not None else "",
            _text(pci.busId) if pci is not None else "", pids,
            # NOT_SUPPORTED: no display engine or no MIG on this GPU, which is a "no"
            bool(active) if active is not None else (False if "display active" in
                                                     unsupported else None),
            bool(mode) if mode is not None else (False if "display mode" in unsupported
                                                 else None),
            bool(mig[0]) if mig is not None else (False if "mig mode" in unsupported
                                                  else None),
            int(links.values["nvlink.active"]) if "nvlink.active" in links.values else (
                0 if "nvlink" in links.unsupported else None),
            int(arch) if arch is not None else None, f, nvswitch)

    def _nvswitch(self, index: int, handle: Any, f: list[Failure]) -> bool | None:
        """Whether an active NVLink of the GPU reaches an NVSwitch (None: NVML could not
        say)."""
        n = self.nvml
        for link in range(NVLINK_MAX_LINKS):
            state = self._call(index, f"nvlink {link} state", n.nvmlDeviceGetNvLinkState, [],
                               handle, link)
            if state is None:
                break  # past the last link (read in full by _nvlinks)
            if not state:
                continue
            kind = self._call(index, f"nvlink {link} remote device type",
                              n.nvmlDeviceGetNvLinkRemoteDeviceType, f, handle, link)
            if kind is None:
                return None
            if int(kind) == n.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                return True
        return False


# nvmlInit's errors as people read them (nvml.h: nvmlInit_v2's return values)
_WHY_NOT = {
    # pynvml: dlopen("libnvidia-ml.so.1") failed; the kernel driver may well be loaded
    # (a container without the library): guardian.hostio.gpuhost says which
    "LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 (NVML, the NVIDIA driver's library) cannot be "
                         "loaded: not found",
    "DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded",
    "NO_PERMISSION": "NVML refused: no permission to the NVIDIA device files",
    "LIB_RM_VERSION_MISMATCH": "the NVML library and the loaded kernel driver are of "
                               "different versions (a driver update without a reboot)",
}


def _put(values: dict[str, float], key: str, got: Any) -> None:
    if got is not None:
        values[key] = float(got)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def normal_pci(bus_id: str) -> str:
    """A PCI address as ``dddd:bb:dd.f`` in lower case: NVML writes 8 domain digits
    (``00000000:18:00.0``), the kernel and dcgm-exporter 4 (``0000:18:00.0``)."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text
