"""Issue 33, through the command line: `guardian import npd` on node-problem-detector's
own shipped configs (tests/fixtures/npd) writes fragments and rules that pass `guardian
check` (the conversion itself: tests/unit/policy/test_npd.py)."""

from __future__ import annotations

import json
from pathlib import Path

from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime.config import load_config
from tests.support.checkout import FIXTURES, REPO
from tests.support.cli import guardian

NPD = FIXTURES / "npd"
SHIPPED = sorted(p.stem for p in (NPD / "config").glob("*.json"))


def test_every_shipped_config_imports_into_one_configuration(tmp_path: Path) -> None:
    """Each of node-problem-detector's shipped custom-plugin and kmsg configs imports, and
    the drop-ins merge onto one guardian.toml that passes `guardian check` with the rules
    (three health-checker configs share NPD's "source": names come from the file names;
    each health-checker's repair is a rule of its own: 27 + 3)."""
    for name in SHIPPED:
        got = guardian("import", "npd", str(NPD / "config" / f"{name}.json"), "-o",
                       str(tmp_path))
        assert got.returncode == 0, got.stderr
    config = tmp_path / "guardian.toml"
    config.write_text("")
    checked = guardian("check", "--config", str(config), str(tmp_path / "rules"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(SHIPPED)} drop-in(s)" in checked.stdout, checked.stdout
    assert len(load_rules([tmp_path / "rules"]).rules) == 30


def test_a_reason_with_a_space_is_made_valid_and_dropped_settings_are_said(
        tmp_path: Path) -> None:
    # a kube action's reason must match ^[A-Za-z][A-Za-z0-9]*$ (`guardian check`)
    own = tmp_path / "config" / "own.json"
    own.parent.mkdir()
    own.write_text('{"plugin": "custom", "source": "own", "pluginConfig": '
                   '{"skip_initial_status": true}, "conditions": [{"type": "DiskBad", '
                   '"reason": "DiskOK"}], "rules": [{"type": "permanent", "condition": '
                   '"DiskBad", "reason": "disk full-ish", "path": "/bin/true"}]}')
    out = tmp_path / "out"
    got = guardian("import", "npd", str(own), "-o", str(out))
    assert got.returncode == 0, got.stderr
    assert "'disk full-ish' is written 'DiskFullIsh'" in got.stderr
    assert "skip_initial_status" in got.stderr
    checked = guardian("check", "--config", str(out / "guardian.toml.d" / "50-npd-own.toml"),
                       str(out / "rules"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _own(tmp_path: Path) -> Path:
    own = tmp_path / "config" / "own.json"
    own.parent.mkdir(exist_ok=True)
    own.write_text('{"plugin": "custom", "source": "own", "rules": [{"type": "temporary", '
                   '"reason": "Slow", "path": "/bin/true"}]}')
    return own


def test_a_planted_symlink_or_file_in_the_output_is_refused_never_followed(
        tmp_path: Path) -> None:
    """Issue 39, round 4. Before: `-o DIR` wrote through a symlink planted at either
    file's name, or at DIR/rules, and over a file put there."""
    own = _own(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dropin = "guardian.toml.d/50-npd-own.toml"
    for plant in (dropin, "rules/npd-own.toml", "rules", "guardian.toml.d", "file"):
        out = tmp_path / f"out-{plant.replace('/', '-')}"
        (out / "rules").mkdir(parents=True)
        (out / "guardian.toml.d").mkdir()
        if plant in ("rules", "guardian.toml.d"):
            (out / plant).rmdir()
            (out / plant).symlink_to(elsewhere)
        elif plant == "file":
            (out / dropin).write_text("mine\n")
        else:
            (out / plant).symlink_to(victim)
        got = guardian("import", "npd", str(own), "-o", str(out))
        assert got.returncode == 1, (plant, got.stdout)
        assert "refused" in got.stderr and "Traceback" not in got.stderr, got.stderr
        assert victim.read_text() == "root's\n" and list(elsewhere.iterdir()) == []
        if plant in (dropin, "file"):  # the rules it wrote first: removed
            assert not (out / "rules" / "npd-own.toml").exists()
    assert (tmp_path / "out-file" / dropin).read_text() == "mine\n"


def test_hostile_json_is_an_error_at_its_place_never_a_traceback(tmp_path: Path) -> None:
    own = tmp_path / "config" / "own.json"
    own.parent.mkdir()
    for text, where in [('{"plugin": "custom",\n "rules": [{"path": 7}]}', ":2:13: "),
                        ('{"plugin": "custom", "rules": [', ":1:32: "),
                        ('{"plugin": "kmsg", "rules": [\n {"reason": "A", "pattern": '
                         '"(a+)+$"}]}', ":2:18: ")]:
        own.write_text(text)
        got = guardian("import", "npd", str(own), "-o", str(tmp_path / "out"))
        assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
        assert f"{own}{where}" in got.stderr
    assert not (tmp_path / "out").exists()


def test_two_kernel_monitors_imported_as_the_output_says_pass_check_beside_the_shipped(
        tmp_path: Path) -> None:
    """Issue 41's done-when. Before: the output said "append it to guardian.toml"; appended
    to the shipped one (`patterns = {}` under [sources.kmsg]) `check` failed with "Cannot
    declare ('sources', 'kmsg', 'patterns') twice", and two kernel monitors collided the
    same way. Now each import's own instructions are run as printed, /etc/guardian being
    a directory of this test: node-problem-detector's kernel-monitor.json (every reason a
    shipped pattern) and two monitors of patterns guardian does not ship."""
    import shlex
    import shutil
    import subprocess

    etc = tmp_path / "root" / "etc" / "guardian"
    (etc / "rules").mkdir(parents=True)
    shipped = (REPO / "systemd" / "guardian.toml").read_text()
    (etc / "guardian.toml").write_text(shipped.replace("/etc/guardian", str(etc)))
    for rule in (REPO / "rules").glob("*.toml"):
        shutil.copy(rule, etc / "rules")
    own = []
    for name, reason, pattern in (("acme-monitor", "AcmeWedged", r"acme: device \d+ wedged"),
                                  ("widget-monitor", "WidgetStuck", r"widget \w+ stuck")):
        own.append(tmp_path / "npd" / f"{name}.json")
        own[-1].parent.mkdir(exist_ok=True)
        own[-1].write_text(json.dumps({"plugin": "kmsg", "source": name, "conditions": [],
                                       "rules": [{"type": "temporary", "reason": reason,
                                                  "pattern": pattern}]}))
    ran = []
    for monitor in (NPD / "config" / "kernel-monitor.json", *own):
        got = guardian("import", "npd", str(monitor), "-o", str(tmp_path / "out"))
        assert got.returncode == 0, got.stderr
        said = [x.strip() for x in got.stdout.splitlines() if x.startswith("  ")]
        assert said[-2:] == ["guardian check", "systemctl restart guardian"], got.stdout
        for line in said[:-2]:  # the install commands, into this test's /etc/guardian
            argv = shlex.split(line.replace("/etc/guardian", str(etc)))
            assert argv[0] == "install", line
            subprocess.run(argv, check=True, timeout=30)
            ran.append(argv[-1])
    assert len(list((etc / "guardian.toml.d").glob("*.toml"))) == 3
    # `guardian check` on the node: the installed config (with its drop-ins) and its rules
    checked = guardian("check", "--config", str(etc / "guardian.toml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "with 3 drop-in(s)" in checked.stdout, checked.stdout
    patterns = load_config(etc / "guardian.toml", default_registry()).sources["kmsg"]
    assert set(patterns.patterns) == {  # type: ignore[attr-defined]
        "npd_acme_monitor_acmewedged", "npd_widget_monitor_widgetstuck"}
    assert len(ran) == 6
