"""Memory cgroups, live and dying (counted by :mod:`guardian.hostio.cgroupfs`)."""

from __future__ import annotations

from typing import ClassVar

from guardian.core.errors import in_words
from guardian.core.snapshot import SignalSpec
from guardian.hostio.cgroupfs import Layout, layout_problem, locate, memcg_counts
from guardian.hostio.host import Host
from guardian.plugin.contract import NoParams, Source


class CgroupsSource(Source[NoParams]):
    name: ClassVar[str] = "cgroups"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("memcg.live", "live memory cgroups", "cgroups"),
        SignalSpec("memcg.dying", "dying (removed but still pinned) memory cgroups",
                   "cgroups"),
        SignalSpec("memcg.dying_ratio", "dying memory cgroups per live one", "ratio"),
        SignalSpec("memcg.hierarchy_version", "cgroup version of the memory controller "
                   "(1 = v1 or hybrid, 2 = unified)", ""),
    )

    def __init__(self, host: Host, config: NoParams | None = None) -> None:
        super().__init__(host, config)
        self._layout: Layout | None = None
        self._why_not: str | None = None

    def layout(self) -> Layout | None:
        if self._layout is None:
            found = locate(self.host.root, self.host.proc)
            if isinstance(found, Layout):
                self._layout = found
            else:
                self._why_not = found
        return self._layout

    def unavailable(self) -> str | None:
        try:
            layout = self.layout()
            return self._why_not if layout is None else layout_problem(self.host, layout)
        except OSError as exc:
            return f"cannot read mountinfo: {in_words(exc)}"

    def collect(self, now: float) -> dict[str, object]:
        layout = self.layout()
        if layout is None:
            raise RuntimeError(self._why_not or "no memory cgroup hierarchy")
        live, dying = memcg_counts(self.host, layout)
        return {
            "memcg.live": live,
            "memcg.dying": dying,
            "memcg.dying_ratio": dying / live if live else None,
            "memcg.hierarchy_version": layout.version,
        }
