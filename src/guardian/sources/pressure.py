"""Pressure stall information (PSI): /proc/pressure/{cpu,memory,io}."""

from __future__ import annotations

from typing import ClassVar

from guardian.core.snapshot import SignalSpec
from guardian.hostio.host import Host, is_dir, read_kernel_file
from guardian.hostio.kernelstats import KINDS, parse_pressure
from guardian.plugin.contract import NoParams, Source

RESOURCES = ("cpu", "memory", "io")
_WHO = {"some": "at least one task", "full": "all non-idle tasks"}


class PressureSource(Source[NoParams]):
    name: ClassVar[str] = "pressure"
    specs: ClassVar[tuple[SignalSpec, ...]] = tuple(
        spec
        for res in RESOURCES for kind in KINDS
        for spec in (
            *(SignalSpec(f"pressure.{res}.{kind}_avg{w}", f"share of time {_WHO[kind]} "
                         f"stalled on {res}, {w}s average", "percent")
              for w in (10, 60, 300)),
            SignalSpec(f"pressure.{res}.{kind}_total", f"total {kind} stall time on {res}",
                       "microseconds", counter=True),
        )
    )

    def __init__(self, host: Host, config: NoParams | None = None) -> None:
        super().__init__(host, config)
        self.files = [(res, str(host.proc / "pressure" / res)) for res in RESOURCES]
        self.names = {res: {f"{kind}_{k}": f"pressure.{res}.{kind}_{k}" for kind in KINDS
                            for k in ("avg10", "avg60", "avg300", "total")}
                      for res in RESOURCES}

    def unavailable(self) -> str | None:
        if not is_dir(self.host.proc / "pressure"):
            return "no /proc/pressure (kernel without PSI, or psi=0 on its command line)"
        return None

    def collect(self, now: float) -> dict[str, object]:
        out: dict[str, object] = {}
        for res, path in self.files:
            try:
                text = read_kernel_file(path)
            except FileNotFoundError:
                continue
            names = self.names[res]
            for k, v in parse_pressure(text).items():
                out[names[k]] = v
        return out
