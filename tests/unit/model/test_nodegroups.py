"""Node groups (guardian.model.nodegroups): a node is in the first group whose labels it
carries; a shadow group, or a rule the group does not list, runs in shadow there; a node
whose labels are unknown runs its disruptive decisions in shadow (issue 45)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.model.nodegroups import NodeGroup, group_of, shadow_why
from guardian.plugin.registry import Registry
from guardian.runtime.config import load_config

CANARY = NodeGroup(name="canary", labels={"guardian.io/canary": "true"}, mode="shadow")
GPU = NodeGroup(name="gpu", labels={"pool": "gpu"}, rules=["xid-*"])
GROUPS = [CANARY, GPU]


def test_the_first_matching_group_decides() -> None:
    both = {"guardian.io/canary": "true", "pool": "gpu"}
    assert group_of(both, GROUPS) is CANARY
    assert group_of({"pool": "gpu"}, GROUPS) is GPU
    assert group_of({"pool": "cpu"}, GROUPS) is None
    assert shadow_why("xid-79", True, both, GROUPS) == "node group canary is in shadow mode"
    assert shadow_why("xid-79", True, {"pool": "gpu"}, GROUPS) == ""
    assert shadow_why("memcg-leak", False, {"pool": "gpu"}, GROUPS) == (
        "rule memcg-leak does not act in node group gpu (its rules: xid-*)")
    assert shadow_why("memcg-leak", True, {"pool": "cpu"}, GROUPS) == ""


def test_unknown_labels_fail_closed_for_disruptive_actions_only() -> None:
    assert shadow_why("r", True, None, GROUPS).startswith(
        "this node's labels are not known (its Node object not read yet, or nothing reads it: "
        "set [node] labels")
    assert shadow_why("r", False, None, GROUPS) == ""
    assert shadow_why("r", True, None, []) == ""  # no groups: nothing to tell


def test_groups_and_node_labels_in_guardian_toml(tmp_path: Path) -> None:
    path = tmp_path / "guardian.toml"
    path.write_text('[node]\nlabels = { pool = "gpu" }\n\n[[group]]\nname = "canary"\n'
                    'labels = { "guardian.io/canary" = "true" }\nmode = "shadow"\n\n'
                    '[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\n')
    config = load_config(path, Registry())
    assert config.node.labels == {"pool": "gpu"}
    assert [(g.name, g.mode, g.rules) for g in config.groups] == [
        ("canary", "shadow", ["*"]), ("gpu", "act", ["*"])]
    for text, said in (
            ('[[group]]\nname = "a"\n\n[[group]]\nname = "a"\n',
             "guardian.toml:5:8: node group 'a' is named twice"),
            ('[[group]]\nname = "a"\nmode = "dry"\n',
             "guardian.toml:3:8: [[group]] 'a': mode: Input should be 'act' or 'shadow'")):
        path.write_text(text)
        with pytest.raises(RuleError) as err:
            load_config(path, Registry())
        assert said in str(err.value)


@pytest.mark.parametrize(("text", "said"), ids=["no-labels", "subset", "same"], argvalues=[
    # before: passed `guardian check`, and every node was in "all" (a shadow canary acted)
    ('[[group]]\nname = "all"\nrules = ["*"]\n\n[[group]]\nname = "canary"\n'
     'labels = { "guardian.io/canary" = "true" }\nmode = "shadow"\n',
     "guardian.toml:7:1: node group 'canary' is never reached (a node is in the first "
     "group that matches): node group 'all' before it has no labels, so every node is in "
     "it; a group without labels may only be the last"),
    ('[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\n\n[[group]]\nname = "a100"\n'
     'labels = { pool = "gpu", model = "a100" }\n',
     "guardian.toml:7:1: node group 'a100' is never reached (a node is in the first group "
     "that matches): every node it selects carries the labels of node group 'gpu' "
     "(pool=gpu), which comes first: put 'a100' before it"),
    ('[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\n\n[[group]]\nname = "gpu2"\n'
     'labels = { pool = "gpu" }\n',
     "guardian.toml:7:1: node group 'gpu2' is never reached (a node is in the first group "
     "that matches): node group 'gpu' before it has the same labels (pool=gpu)"),
])
def test_a_group_an_earlier_one_keeps_every_node_from_is_an_error(
        tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "guardian.toml"
    path.write_text(text)
    with pytest.raises(RuleError) as err:
        load_config(path, Registry())
    assert [str(d).replace(f"{tmp_path}/", "") for d in err.value.diagnostics] == [said]


def test_a_group_without_labels_may_be_last_and_more_specific_groups_first(
        tmp_path: Path) -> None:
    path = tmp_path / "guardian.toml"
    path.write_text('[[group]]\nname = "a100"\nlabels = { pool = "gpu", model = "a100" }\n'
                    '[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\n'
                    '[[group]]\nname = "rest"\nmode = "shadow"\n')
    assert [g.name for g in load_config(path, Registry()).groups] == ["a100", "gpu", "rest"]
