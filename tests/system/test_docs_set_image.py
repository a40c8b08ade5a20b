"""docs/kubernetes.md sets the image with what `kubectl` has (issue 41's review: its
build-push-apply block ran `kustomize edit set image`, which is the standalone kustomize
binary's; kubectl has no `edit`).

Ground truth: the doc's own blocks, and `kubectl kustomize` rendering the overlay it
shows (skipped where kubectl is not installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "kubernetes.md").read_text()


def _blocks(lang: str) -> list[str]:
    return [re.sub(r"(?m)^  ", "", b) for b in re.findall(rf"```{lang}\n(.*?)```", DOC, re.S)]


def test_the_shell_steps_need_no_standalone_kustomize() -> None:
    steps = [line.split()[0] for b in _blocks("sh") for line in b.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert "kubectl" in steps and "kustomize" not in steps, steps
    assert "standalone `kustomize`" in DOC  # and it is named as the alternative


def test_the_overlay_shown_sets_the_image(tmp_path: Path) -> None:
    # the overlay that sets the image (another, in "GPU nodes", adds a component)
    [overlay] = [b for b in _blocks("yaml")
                 if "# site/kustomization.yaml" in b and "images:" in b]
    entry = yaml.safe_load(overlay)["images"][0]
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs it)")
    shutil.copytree(REPO / "deploy" / "kubernetes", tmp_path / "deploy" / "kubernetes")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "kustomization.yaml").write_text(overlay)
    out = subprocess.run(["kubectl", "kustomize", str(tmp_path / "site")], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    images = set(re.findall(r"(?m)^\s+image: (\S+)$", out))
    assert images == {f"{entry['newName']}:{entry['newTag']}"}
