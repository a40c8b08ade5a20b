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

import difflib
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_text, read_toml
from guardian.model.holds import Hold, parse_holds
from guardian.runtime.holds import check_hold_file
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
    file: Path | None = None  # its node file, where it has one

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
    recording, two nodes of one name, holds that cannot be read): at path:line:col in a
    TOML file, at the path alone for a directory or a recording (line 0)."""
    diags: list[Diagnostic] = []
    if not directory.is_dir():
        raise RuleError([Diagnostic(str(directory), 0, 0, "not a directory")])
    recs = sorted(directory.glob("*.rec"))
    if not recs:
        diags.append(Diagnostic(str(directory), 0, 0, "no recording (*.rec) in it"))
    nodes: list[FleetNode] = []
    for path in recs:
        try:
            rec = read(path)
        except RecordingError as exc:
            diags.append(Diagnostic(str(path), 0, 0, str(exc).removeprefix(f"{path}: ")))
            continue
        started = rec.header.get("started")
        if not isinstance(started, int | float) or isinstance(started, bool) \
                or not math.isfinite(started):
            diags.append(Diagnostic(str(path), 0, 0, "its header has no start time "
                                                     "(started)"))
            continue
        file = path.with_name(path.name[:-len(".rec")] + NODE_SUFFIX)
        spec = _node_file(file, diags)
        nodes.append(FleetNode(spec.name or path.stem, path, rec, dict(spec.labels),
                               list(spec.problems), file if file.exists() else None))
    for extra in sorted(directory.glob("*" + NODE_SUFFIX)):
        if not extra.with_name(extra.name[:-len(NODE_SUFFIX)] + ".rec").exists():
            diags.append(Diagnostic(str(extra), 1, 1, f"no recording "
                                    f"{extra.name[:-len(NODE_SUFFIX)]}.rec beside it"))
    seen: dict[str, Path] = {}
    for n in nodes:
        if n.name in seen:
            again = f"node {n.name!r} again (also {seen[n.name].name})"
            if n.file is not None and n.name != n.path.stem:  # its node file's name
                Reporter(str(n.file), read_text(n.file, "node file"), diags)(
                    ("name",), f"name: {again}", value=True)
            else:
                diags.append(Diagnostic(str(n.path), 0, 0, again))
        seen.setdefault(n.name, n.path)
    holds: list[Hold] = []
    hold_file = directory / HOLDS_FILE
    if hold_file.exists():
        located = check_hold_file(hold_file, "holds")  # as `guardian check` says them
        diags.extend(located)
        if not located:
            holds, problems = parse_holds(read_text(hold_file, "holds"), str(hold_file))
            diags.extend(Diagnostic(str(hold_file), 0, 0, p.removeprefix(f"{hold_file}: "))
                         for p in problems)
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


def unknown_problems(fleet: Fleet, rules: Collection[str]) -> list[Diagnostic]:
    """Each problem a node file names that is none of ``rules`` (the rule set's names),
    located in its node file, with the likely meant one: the backtest could judge
    nothing of it."""
    out: list[Diagnostic] = []
    for n in fleet.nodes:
        wrong = [(i, p) for i, p in enumerate(n.problems) if p not in rules]
        if not wrong or n.file is None:
            continue
        report = Reporter(str(n.file), read_text(n.file, "node file"), out)
        for i, p in wrong:
            hint = difflib.get_close_matches(p, sorted(rules), n=1)
            report(("problems", i), f"problems: no rule named {p!r} in the rule set"
                   + (f" (did you mean {hint[0]!r}?)" if hint else ""), value=True)
    return out
