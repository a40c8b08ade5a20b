"""The suite tests this checkout and nothing else: an older copy of the package left in
the machine's Python (the reason `.ci/run` makes a fresh virtual environment for every
interpreter) must not be what is imported or what provides the built-in plugins."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import guardian
from guardian.core import tomlread
from tests.support.checkout import REPO


def test_guardian_is_imported_from_this_checkout() -> None:
    assert Path(guardian.__file__).resolve().is_relative_to(REPO / "src" / "guardian")


def test_one_distribution_provides_the_built_in_plugins_and_it_is_this_one() -> None:
    project = tomlread.loads((REPO / "pyproject.toml").read_text())["project"]
    providers = {ep.dist.name for group in ("guardian.actions", "guardian.sources")
                 for ep in metadata.entry_points(group=group) if ep.dist is not None
                 and ep.value.startswith("guardian.")}
    assert providers == {project["name"]}
    assert metadata.version(project["name"]) == project["version"]


def test_the_interpreter_is_one_the_project_supports() -> None:
    project = tomlread.loads((REPO / "pyproject.toml").read_text())["project"]
    oldest = tuple(int(p) for p in project["requires-python"].removeprefix(">=").split("."))
    assert sys.version_info[:2] >= oldest
