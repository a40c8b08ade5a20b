"""The patch docs/kubernetes.md gives for a node group's own fleet budget ("A group's
budget and the Role") makes the shipped Role name that group's slots: rendered with
kustomize (`kubectl kustomize`, as an operator's overlay is), the Role's resourceNames
leave no slot of the documented group that `guardian check --config` would warn of
(guardian.kube.fleet.role_gaps). Ground truth: deploy/kubernetes/rbac.yaml and kustomize's
own rendering; the Leases' names are kube/fleet.py's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.checkout import REPO

DEPLOY = REPO / "deploy" / "kubernetes"


def _documented_patch() -> list[dict[str, Any]]:
    text = (REPO / "docs" / "kubernetes.md").read_text()
    section = text[text.index("**A group's budget and the Role.**"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    patches: list[dict[str, Any]] = yaml.safe_load(block.group(1))["patches"]
    return patches


def test_the_documented_patch_names_the_groups_slots(tmp_path: Path) -> None:
    pytest.importorskip("lightkube")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    from guardian.kube.fleet import FleetParams, role_gaps
    from guardian.model.nodegroups import NodeGroup

    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY, site)],  # kustomize takes no absolute paths
        "patches": _documented_patch()}))
    out = subprocess.run(["kubectl", "kustomize", str(site)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    [role] = [d for d in yaml.safe_load_all(out.stdout)
              if d and d["kind"] == "Role" and d["metadata"]["name"] == "guardian-fleet"]
    [named] = [r for r in role["rules"] if "resourceNames" in r and "leases" in r["resources"]]
    assert named["verbs"] == ["get", "update"]
    fleet = FleetParams(namespace="guardian", max_nodes=10)
    gpu = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_nodes=2)
    assert role_gaps(fleet, [gpu]) != []  # the shipped Role alone: warned of
    assert role_gaps(fleet, [gpu], granted=named["resourceNames"]) == []
