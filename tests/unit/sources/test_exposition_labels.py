"""Exporter labels as labels: a sample keeps its own labels in prom.sample, so a rule
selects one GPU as in PromQL (``gpu="0"``, ``err_code="79"``); an own label named like one
of guardian's (target, metric) is renamed ``exported_<name>``, as Prometheus renames a
scraped label that collides with a target's; members keep them through a recording and
guardian's own /metrics; and a signal with fixed labels still refuses one it lacks, at
path:line:col."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from guardian.core.diagnostics import RuleError
from guardian.core.snapshot import Snapshot, check_value, labels_of
from guardian.engine.history import History
from guardian.policy.expr import compile_condition
from guardian.policy.loader import load_text
from guardian.runtime import recording
from guardian.runtime.metrics import SignalCollector
from guardian.sources.exposition import ExpositionSource, parse
from tests.support.checkout import REPO

PAGES = REPO / "tests" / "data" / "dcgm_exporter"
SPECS = {s.name: s for s in ExpositionSource.specs}
XID = 'prom.sample{metric="DCGM_FI_DEV_XID_ERRORS", '


def _page(name: str) -> Snapshot:
    fam, dropped = parse((PAGES / name).read_text(), "dcgm", 100, ["*"])
    assert dropped == 0
    snap = Snapshot.build(0.0, {"prom.sample": fam}, ExpositionSource.specs)
    assert snap.errors == {}
    return snap


def _members(when: str, snap: Snapshot) -> list[dict[str, str]]:
    """The members a condition over prom.sample holds for."""
    got = compile_condition(when, SPECS).fn(snap.values, History({}))
    assert isinstance(got, dict)
    return [dict(k) for k in got]


def test_one_gpu_is_selected_by_its_own_labels() -> None:
    # tests/data/dcgm_exporter/xid79-fallen-off-bus.prom (dcgm-exporter's gpuMetricsFormat):
    # DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-604ac76c-…",…,err_code="79",
    #     err_msg="GPU has fallen off the bus"} 79
    # DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-8d2e4b1a-…",…,err_code="0",
    #     err_msg="No Error"} 0
    snap = _page("xid79-fallen-off-bus.prom")
    [gpu0] = _members(XID + 'gpu="0"} == 79', snap)
    assert gpu0["UUID"] == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    assert gpu0["target"] == "dcgm" and gpu0["metric"] == "DCGM_FI_DEV_XID_ERRORS"
    assert _members(XID + 'gpu="1"} == 79', snap) == []
    assert [m["gpu"] for m in _members('prom.sample{err_code="79"} > 0', snap)] == ["0"]
    assert [m["gpu"] for m in _members('prom.sample{err_msg="No Error"} == 0', snap)] == ["1"]


def test_an_own_label_named_like_guardians_is_renamed_exported() -> None:
    # Prometheus (scrape_config honor_labels: false): "label conflicts are resolved by
    # renaming conflicting labels in the scraped data to exported_<original-label>";
    # a name already taken gets exported_ again
    page = ('x{target="gpu-node",metric="temp",gpu="0"} 1\n'
            'y{target="a",exported_target="b"} 2\n')
    fam, _ = parse(page, "file:x.prom", 100, ["*"])
    assert fam == {
        labels_of({"target": "file:x.prom", "metric": "x", "exported_target": "gpu-node",
                   "exported_metric": "temp", "gpu": "0"}): 1.0,
        labels_of({"target": "file:x.prom", "metric": "y", "exported_target": "b",
                   "exported_exported_target": "a"}): 2.0}
    snap = Snapshot.build(0.0, {"prom.sample": fam}, ExpositionSource.specs)
    [m] = _members('prom.sample{exported_target="gpu-node"} > 0', snap)
    assert m["metric"] == "x"


def test_a_closed_signal_refuses_a_label_it_lacks_at_its_place() -> None:
    text = ('version = 1\n[[rule]]\nname = "r"\nsummary = "s"\n'
            'when = \'prom.up{targt="dcgm"} == 0\'\n')
    with pytest.raises(RuleError) as info:
        load_text(text, "r.toml", catalogue=SPECS)
    assert [str(d) for d in info.value.diagnostics] == [
        "r.toml:5:23: in `when`: signal 'prom.up' has no label 'targt' (its labels: "
        "target)"]
    load_text(text.replace("prom.up{targt", "prom.sample{gpu"), "r.toml", catalogue=SPECS)


def test_every_member_has_target_and_metric() -> None:
    spec = SPECS["prom.sample"]
    good = {labels_of({"target": "t", "metric": "m", "gpu": "0"}): 1.0}
    assert check_value(spec, good) == (good, "")
    value, why = check_value(spec, {labels_of({"metric": "m", "gpu": "0"}): 1.0})
    assert value is None and "does not have the labels metric, target" in why


def test_members_keep_their_own_labels_in_a_recording_and_in_guardians_metrics(
        tmp_path: Path) -> None:
    snap = _page("xid79-fallen-off-bus.prom")
    path = f"{tmp_path}/r.rec"
    head = {"format": recording.FORMAT, "version": recording.VERSION, "signals": {
        "prom.sample": {"labels": ["metric", "target"], "open_labels": True}}}
    w = recording.Writer(path, head)
    w.write(snap)
    w.close()
    back = recording.read(path)
    assert back.damage == "" and back.snapshots[0].values == snap.values
    assert back.catalogue["prom.sample"].open_labels
    # guardian's /metrics: one sample per GPU, never the two summed into one
    metrics = SignalCollector()
    metrics.specs, metrics.selectors = {"prom.sample": SPECS["prom.sample"]}, {
        "prom.sample": None}
    metrics.snapshot = snap
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert 'err_code="79"' in text and 'err_code="0"' in text


def test_a_recording_from_before_replays_with_its_series_label(tmp_path: Path) -> None:
    # format version 1 (guardian before open labels): prom.sample{metric,series,target}
    import gzip
    import json
    path = f"{tmp_path}/old.rec"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"format": recording.FORMAT, "version": 1, "signals": {
            "prom.sample": {"labels": ["metric", "series", "target"]}}}) + "\n")
        f.write(json.dumps({"t": 0, "v": {"prom.sample": [
            ["DCGM_FI_DEV_XID_ERRORS", "gpu=0", "dcgm", 79]]}}) + "\n")
    back = recording.read(path)
    assert back.damage == ""
    assert back.snapshots[0].values == {"prom.sample": {labels_of(
        {"metric": "DCGM_FI_DEV_XID_ERRORS", "series": "gpu=0", "target": "dcgm"}): 79.0}}
