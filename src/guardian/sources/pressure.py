"""Pressure stall information (PSI): /proc/pressure/{cpu,memory,io}."""

from __future__ import annotations

from typing import ClassVar

from ..plugins import NoParams, Source
from ..snapshot import SignalSpec

RESOURCES = ("cpu", "memory", "io")
KINDS = ("some", "full")
_WHO = {"some": "at least one task", "full": "all non-idle tasks"}


def parse_pressure(text: str) -> dict[str, float]:
    """``some avg10=0.00 avg60=0.00 avg300=0.00 total=123`` -> {"some_avg10": 0.0, ...}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, *fields = line.split() or [""]
        if kind not in KINDS or len(fields) != 4:
            raise ValueError(f"bad pressure line {line!r}")
        for f in fields:
            k, _, v = f.partition("=")
            if k not in ("avg10", "avg60", "avg300", "total"):
                raise ValueError(f"bad pressure field {f!r}")
            out[f"{kind}_{k}"] = float(v)
    if "some_total" not in out:
        raise ValueError("pressure file has no 'some' line")
    return out


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

    def unavailable(self) -> str | None:
        if not (self.host.proc / "pressure").is_dir():
            return "no /proc/pressure (kernel without PSI, or psi=0 on its command line)"
        return None

    def collect(self, now: float) -> dict[str, object]:
        out: dict[str, object] = {}
        for res in RESOURCES:
            path = self.host.proc / "pressure" / res
            if not path.exists():
                continue
            for k, v in parse_pressure(path.read_text()).items():
                out[f"pressure.{res}.{k}"] = v
        return out
