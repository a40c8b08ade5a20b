"""A fleet backtest's directory: each node's recording (``NAME.rec``, from ``guardian
record``) with, beside it, what is known of the node (``NAME.node.toml``: its name, its
labels, the problems its recording shows), and the holds that were in force
(``holds.toml``, ``[[hold]]`` tables as in ``/etc/guardian/holds.d``)::

    # ip-10-0-1-12.node.toml (all keys optional)
    name = "ip-10-0-1-12"                                   # default: the file's stem
    labels = { "topology.kubernetes.io/zone" = "us-east-1a" }
    problems = ["dying-memcgs"]     # rules that should fire here; [] or none: healthy
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_text, read_toml
from guardian.model.holds import Hold, parse_holds
from guardian.runtime.recording import Recording, RecordingError, read

NODE_SUFFIX = ".node.toml"
HOLDS_FILE = "holds.toml"


class NodeFile(BaseModel):
    """``NAME.node.toml``: what is known of the node a recording was made on."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, min_length=1, description="the node's name (default: "
                             "the recording's file name without .rec)")
    labels: dict[str, str] = Field(default_factory=dict, description="the node's labels "
                                   "(zone, node group, ...): the breaker's groups")
    problems: list[str] = Field(default_factory=list, description="the problems the "
                                "recording shows, each a rule's name: caught when that "
                                "rule or one of its chain fired on the node")


@dataclass
class FleetNode:
    """One node of a backtest: its recording and what its node file says."""

    name: str
    path: Path  # the recording
    recording: Recording
    labels: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def started(self) -> float:
        """The Unix time the recording started (its header's ``started``)."""
        return float(self.recording.header["started"])


@dataclass
class Fleet:
    """The nodes (sorted by name) and the holds of a backtest's directory."""

    nodes: list[FleetNode]
    holds: list[Hold] = field(default_factory=list)


def read_fleet(directory: Path) -> Fleet:
    """Read a backtest's directory. Raises :class:`RuleError` with every problem found
    (no recording, an unreadable one, a node file that is not valid or names no
    recording, two nodes of one name, holds that cannot be read)."""
    diags: list[Diagnostic] = []
    if not directory.is_dir():
        raise RuleError([Diagnostic(str(directory), 1, 1, "not a directory")])
    recs = sorted(directory.glob("*.rec"))
    if not recs:
        diags.append(Diagnostic(str(directory), 1, 1, "no recording (*.rec) in it"))
    nodes: list[FleetNode] = []
    for path in recs:
        try:
            rec = read(path)
        except RecordingError as exc:
            diags.append(Diagnostic(str(path), 1, 1, str(exc)))
            continue
        started = rec.header.get("started")
        if not isinstance(started, int | float) or isinstance(started, bool) \
                or not math.isfinite(started):
            diags.append(Diagnostic(str(path), 1, 1, "its header has no start time "
                                                     "(started)"))
            continue
        spec = _node_file(path.with_name(path.name[:-len(".rec")] + NODE_SUFFIX), diags)
        nodes.append(FleetNode(spec.name or path.stem, path, rec, dict(spec.labels),
                               list(spec.problems)))
    for extra in sorted(directory.glob("*" + NODE_SUFFIX)):
        if not extra.with_name(extra.name[:-len(NODE_SUFFIX)] + ".rec").exists():
            diags.append(Diagnostic(str(extra), 1, 1, f"no recording "
                                    f"{extra.name[:-len(NODE_SUFFIX)]}.rec beside it"))
    seen: dict[str, Path] = {}
    for n in nodes:
        if n.name in seen:
            diags.append(Diagnostic(str(n.path), 1, 1, f"node {n.name!r} again (also "
                                                       f"{seen[n.name].name})"))
        seen.setdefault(n.name, n.path)
    holds: list[Hold] = []
    hold_file = directory / HOLDS_FILE
    if hold_file.exists():
        try:
            holds, problems = parse_holds(read_text(hold_file, "holds"), str(hold_file))
        except RuleError as exc:
            diags.extend(exc.diagnostics)
        else:
            diags.extend(Diagnostic(str(hold_file), 1, 1, p) for p in problems)
    if diags:
        raise RuleError(diags)
    return Fleet(sorted(nodes, key=lambda n: n.name), holds)


def _node_file(path: Path, diags: list[Diagnostic]) -> NodeFile:
    """The node file at ``path`` (an empty one where there is none); its errors are
    added to ``diags``, located."""
    if not path.exists():
        return NodeFile()
    try:
        text, data = read_toml(path, "node file")
    except RuleError as exc:
        diags.extend(exc.diagnostics)
        return NodeFile()
    try:
        return NodeFile.model_validate(data)
    except ValidationError as exc:
        Reporter(str(path), text, diags).validation(exc, (), NodeFile)
        return NodeFile()
