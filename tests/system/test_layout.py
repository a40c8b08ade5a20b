"""The package carries its defaults, and `guardian init` lays them out the way package
managers treat configuration files: what the operator changed is never overwritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from guardian.runtime.layout import SHIPPED_RECORD, init
from tests.support.checkout import REPO, RULES, copy_checkout


def test_init_lays_out_the_defaults_and_they_check(tmp_path: Path) -> None:
    changes = init(tmp_path, "/opt/guardian/bin/guardian")
    assert {c.what for c in changes} == {"created"}
    etc = tmp_path / "etc" / "guardian"
    assert sorted(p.name for p in (etc / "rules").iterdir()) == \
        sorted(p.name for p in RULES.glob("*.toml"))
    unit = (tmp_path / "etc/systemd/system/guardian.service").read_text()
    assert "ExecStart=/opt/guardian/bin/guardian run\n" in unit
    first = (etc / "rules" / "nic.toml").read_text().splitlines()[0]
    assert first.startswith("#:schema /") and Path(first.split(" ", 1)[1]).is_file()
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", "--config",
                           str(etc / "guardian.toml"), str(etc / "rules")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("ok: "), proc.stdout
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in (etc / "rules").iterdir())


def test_a_second_init_keeps_what_the_operator_changed(tmp_path: Path) -> None:
    init(tmp_path, "/g")
    config = tmp_path / "etc/guardian/guardian.toml"
    config.write_text('[engine]\ninterval = "1s"\n')  # the operator's
    again = {c.path.name: c.what for c in init(tmp_path, "/g")}
    assert again["guardian.toml"] == "kept" and again["nic.toml"] == "unchanged"
    assert config.read_text() == '[engine]\ninterval = "1s"\n'
    assert (config.parent / "guardian.toml.new").read_text().startswith("#:schema ")


def test_a_file_still_as_shipped_is_updated(tmp_path: Path) -> None:
    """A file init wrote and nobody touched follows the package: a new release's
    version replaces it (here: the file as an older release shipped it, recorded so)."""
    import hashlib
    init(tmp_path, "/g")
    rule = tmp_path / "etc/guardian/rules/zombies.toml"
    old = "# an older release's zombies.toml\nversion = 1\n"
    rule.write_text(old)
    record_path = tmp_path / SHIPPED_RECORD
    record = json.loads(record_path.read_text())
    record["etc/guardian/rules/zombies.toml"] = hashlib.sha256(old.encode()).hexdigest()
    record_path.write_text(json.dumps(record))
    changes = {c.path.name: c.what for c in init(tmp_path, "/g")}
    assert changes["zombies.toml"] == "updated"
    assert "zombie-pileup" in rule.read_text()


def test_init_says_what_it_did(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "guardian", "init", "--root", str(tmp_path),
                           "--exec", "/g"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert f"created {tmp_path}/etc/guardian/guardian.toml" in proc.stdout.splitlines()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir",
                    str(d), str(REPO)], check=True, timeout=600, capture_output=True)
    [built] = d.glob("*.whl")
    return built


def test_the_wheel_carries_the_defaults(wheel: Path) -> None:
    """Before: a wheel install had nothing to check (rules, unit and config were left out)."""
    assert wheel.name.startswith("node_guardian-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for rule in RULES.glob("*.toml"):
        assert f"guardian/data/rules/{rule.name}" in names
    for f in ("guardian/data/systemd/guardian.service", "guardian/data/systemd/guardian.toml",
              "guardian/data/schemas/rules.schema.json"):
        assert f in names


def test_the_readme_installs_this_project() -> None:
    """The name the README and docs/ install is this project's distribution (before: `pip
    install guardian` installed an unrelated project)."""
    import re

    from guardian.core.diagnostics import parse_toml
    name = parse_toml("pyproject.toml", (REPO / "pyproject.toml").read_text())[
        "project"]["name"]
    readme = "".join(p.read_text() for p in [REPO / "README.md",
                                              *sorted((REPO / "docs").glob("*.md"))])
    installs = re.findall(r"pip install '?([A-Za-z0-9_.-]+)(?:\[[a-z0-9,]+\])?'?", readme)
    named = [n for n in installs if not n.startswith((".", "-"))]
    assert named and set(named) == {name}, named


def _readme_commands() -> list[str]:
    import re
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## Using it")]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", quick, re.S)]


def test_the_readme_set_up_commands_make_their_own_venv() -> None:
    """Debian's and Ubuntu's Python refuse `pip install` (PEP 668): both commands make a
    virtual environment first and never call the machine's pip."""
    commands = _readme_commands()
    assert len(commands) == 2
    for command in commands:
        first, *rest = command.split(" && ")
        assert first == "python3 -m venv .venv", command
        assert all(not step.startswith(("pip", "python3 -m pip")) or
                   ". .venv/bin/activate" in command for step in rest), command
    ci = (REPO / ".ci" / "run").read_text()
    test_command = commands[1].split(" && ", 2)[2]  # the part .ci/run runs in its venvs
    assert test_command in ci.replace("pip install -q -e", "pip install -e")


@pytest.mark.os_integration
def test_the_readme_dry_run_works_in_a_fresh_copy(tmp_path: Path) -> None:
    """The main job, exactly as the README gives it, in a copy of this checkout (so it
    makes its own .venv there): every shipped rule is evaluated, and nothing is acted on."""
    tree = copy_checkout(tmp_path / "guardian")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(sys.prefix))
    proc = subprocess.run(["bash", "-c", _readme_commands()[0]], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: some rule holds here
    assert "Traceback" not in proc.stderr
    assert (tree / ".venv" / "bin" / "guardian").exists()


def test_init_never_writes_through_what_another_user_planted(tmp_path: Path) -> None:
    """Before: `guardian init --root DIR` followed directory symlinks another user planted
    under DIR: root created files where that user chose, and overwrote an existing
    guardian.toml there. Now a symlink, or a directory another user owns or may write to,
    is refused, named, and nothing is written through it."""
    from tests.support.kernel import need_root
    need_root()
    root, victim = tmp_path / "image", tmp_path / "victim"
    (root / "etc").mkdir(parents=True)
    victim.mkdir()
    (victim / "guardian.toml").write_text("# the victim's own\n")
    os.chown(root / "etc", 65534, 65534)  # a directory that user owns ...
    os.symlink(victim, root / "etc" / "guardian")  # ... and the link that user planted
    proc = subprocess.run([sys.executable, "-m", "guardian", "init", "--root", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert f"{root / 'etc'}: a directory owned by another user" in proc.stdout
    assert (victim / "guardian.toml").read_text() == "# the victim's own\n"
    assert sorted(p.name for p in victim.iterdir()) == ["guardian.toml"]
    os.chown(root / "etc", 0, 0)  # the directory is root's, the link is still there
    proc = subprocess.run([sys.executable, "-m", "guardian", "init", "--root", str(root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "a symbolic link where a directory was expected" \
        in proc.stdout
    assert sorted(p.name for p in victim.iterdir()) == ["guardian.toml"]
