"""The DaemonSet's image is set in one place, deploy/kubernetes/kustomization.yaml's
`images:` entry, whose tag is the package's version, as are the Containerfile's version
label and every `node-guardian:<version>` the docs and comments write; the docs say how
to point it at a registry. Before: the DaemonSet named its own tag beside the
kustomization's, and no doc said how to set the image (only "set images[0].newName")."""

from __future__ import annotations

import re
import sys

import yaml

from guardian.core.version import __version__
from tests.support.checkout import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEPLOY = REPO / "deploy" / "kubernetes"
CONTAINERFILE = REPO / "Containerfile"
DOC = REPO / "docs" / "kubernetes.md"
SET_IMAGE = "kustomize edit set image node-guardian="


def _images() -> list[dict[str, str]]:
    images: list[dict[str, str]] = yaml.safe_load(
        (DEPLOY / "kustomization.yaml").read_text())["images"]
    return images


def test_the_image_is_set_in_the_kustomization_only() -> None:
    [entry] = _images()
    [ds] = [d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text())
            if d and d["kind"] == "DaemonSet"]
    images = [c["image"] for c in ds["spec"]["template"]["spec"]["containers"]]
    # the bare name the entry maps: no tag or registry of its own to disagree with it
    assert images == [entry["name"]] == ["node-guardian"]
    assert entry["newName"].endswith("/node-guardian")


def test_the_tag_is_the_package_version_everywhere() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    [entry] = _images()
    assert entry["newTag"] == __version__
    text = CONTAINERFILE.read_text()
    assert re.findall(r"(?m)^ARG VERSION=(\S+)$", text) == [__version__]
    assert 'org.opencontainers.image.version="${VERSION}"' in text
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in text
    assert project["license"] == "Apache-2.0"
    # each node-guardian:X.Y.Z written out for operators to copy
    sources = [REPO / "README.md", CONTAINERFILE, *sorted((REPO / "docs").rglob("*.md")),
               *sorted((REPO / "deploy").rglob("*.yaml"))]
    tags = {(p.name, m) for p in sources
            for m in re.findall(r"node-guardian:(\d[\w.+-]*\w)", p.read_text())}
    assert tags and {t for _, t in tags} == {__version__}, sorted(tags)


def test_the_docs_say_where_and_how_to_set_the_image() -> None:
    doc = DOC.read_text()
    assert SET_IMAGE in doc and SET_IMAGE in (DEPLOY / "kustomization.yaml").read_text()
    assert "newTag" in doc


def test_the_image_installs_perf() -> None:
    """Issue 43's review: the docs say the DaemonSet's image must hold perf (evidence.profile,
    the flight recorder), and the last stage installed only the .deb and util-linux."""
    last = CONTAINERFILE.read_text().rsplit("\nFROM ", 1)[1]
    assert last.startswith("debian:bookworm-slim")  # Debian's package name: linux-perf
    installs = " ".join(re.findall(r"apt-get install ((?:\\\n|[^\n])+)", last))
    assert "linux-perf" in installs.split(), installs
