"""The native packages, proven the way an image is baked: `packaging/build` makes the
.deb and the .rpm of this checkout; the .deb is installed into a Debian 12 root under a
real systemd (systemd-nspawn), where guardian starts through READY=1 with the default
rules from /etc/guardian/rules, applies `systemctl reload`, and a purge leaves no file
behind. The .rpm (Amazon Linux 2023's python3.11) is built from the same tree, lists the
same files and passes rpmlint (its /opt findings filtered in packaging/rpmlint.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from guardian.testing.nspawn import Container, booted, nspawn_unavailable
from tests.support.checkout import REPO, STALE_MODULE, shipped_rule_count
from tests.support.wait import BOUND, wait_until

# Boots a container or builds packages: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration


# each package's license where its format puts it: not the same path, so the two file
# lists are compared without them
DEB_COPYRIGHT = "/usr/share/doc/node-guardian/copyright"
RPM_LICENSE = "/usr/share/licenses/node-guardian/LICENSE"


def _deb(dist: Path) -> Path:
    [deb] = dist.glob("*.deb")
    return deb


def _deb_files(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                         check=True).stdout
    names = subprocess.run(["tar", "-t"], input=out, capture_output=True, check=True
                           ).stdout.decode().splitlines()
    return {n.removeprefix(".").rstrip("/") for n in names if n not in ("./", ".")}


def _parents(path: str) -> set[str]:
    """The directories in the .deb that only ``path`` is in (/usr/share and up hold more)."""
    return {str(p) for p in Path(path).parents if str(p).startswith("/usr/share/doc")}


def test_the_deb_is_what_it_says(dist: Path) -> None:
    deb = _deb(dist)
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    assert "Package: node-guardian" in control and "Depends: python3.11" in control
    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True,
                               check=True).stdout
    listed = subprocess.run(["tar", "-xO", "./conffiles"], input=conffiles,
                            capture_output=True, check=True).stdout.decode().split()
    assert "/etc/guardian/guardian.toml" in listed and "/etc/guardian/rules/nic.toml" in listed
    files = _deb_files(deb)
    assert "/lib/systemd/system/guardian.service" in files
    assert "/opt/guardian/bin/guardian" in files and "/usr/bin/guardian" in files
    # bytecode compiled at build time: the unit makes /opt read-only
    assert any(f.endswith("guardian/engine/__pycache__/engine.cpython-311.pyc") for f in files)
    # a build/ left in the tree by another install is not packaged (setuptools reuses it)
    assert not [f for f in files if STALE_MODULE in f]


def test_the_license_travels_in_both_packages(dist: Path) -> None:
    """Before: neither package carried the license pyproject.toml declares. The .deb has
    Debian's machine-readable copyright file with LICENSE's text; the .rpm marks LICENSE
    as its %license."""
    deb = _deb(dist)
    assert DEB_COPYRIGHT in _deb_files(deb)
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                          check=True).stdout
    text = subprocess.run(["tar", "-xO", f".{DEB_COPYRIGHT}"], input=data, capture_output=True,
                          check=True).stdout.decode()
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    assert paragraphs[0].startswith(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
    [standalone] = [p for p in paragraphs if p.startswith("License: Apache-2.0\n")]
    body = "\n".join("" if line == " ." else line.removeprefix(" ")
                     for line in standalone.splitlines()[1:])
    assert body.strip() == (REPO / "LICENSE").read_text().strip()
    if shutil.which("rpm") is None:
        pytest.skip("rpm is not installed (apt-get install rpm)")
    [rpm] = dist.glob("*.rpm")
    licenses = subprocess.run(["rpm", "-qp", "--licensefiles", str(rpm)], capture_output=True,
                              text=True, check=True).stdout.split()
    assert licenses == [RPM_LICENSE]


def test_the_rpm_lists_the_same_files_and_passes_rpmlint(dist: Path) -> None:
    if shutil.which("rpm") is None:
        pytest.skip("rpm is not installed (apt-get install rpm)")
    [rpm] = dist.glob("*.rpm")
    listed = set(subprocess.run(["rpm", "-qlp", str(rpm)], capture_output=True, text=True,
                                check=True).stdout.split("\n")) - {""}
    deb = _deb_files(_deb(dist)) - {DEB_COPYRIGHT, *_parents(DEB_COPYRIGHT)}
    listed -= {RPM_LICENSE}
    # the .deb lists every directory on the way; the .rpm owns only its own
    assert listed - deb == set()
    assert {f for f in deb if not any(d.startswith(f + "/") for d in deb)} <= listed
    req = subprocess.run(["rpm", "-qp", "--requires", str(rpm)], capture_output=True,
                         text=True, check=True).stdout
    assert "python3.11" in req
    if shutil.which("rpmlint"):
        lint = subprocess.run(["rpmlint", "-c", str(REPO / "packaging" / "rpmlint.toml"),
                               str(rpm)], capture_output=True, text=True)
        assert " 0 errors" in lint.stdout, lint.stdout[-3000:]


def test_removal_restores_irqs_and_only_a_purge_deletes_data(dist: Path) -> None:
    """Before: a plain `dnf remove` of the .rpm ran the purge step (the audit log and the
    saved IRQ originals deleted, so `guardian irq restore` could not undo guardian's
    moves), and the .deb's purge dropped the originals without restoring them. Now both
    restore the affinities before the program goes, and only Debian's purge deletes."""
    ctrl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(_deb(dist))],
                          capture_output=True, check=True).stdout
    prerm, postrm = (subprocess.run(["tar", "-xO", f"./{name}"], input=ctrl,
                                    capture_output=True, check=True).stdout.decode()
                     for name in ("prerm", "postrm"))
    assert "guardian irq restore" in prerm
    assert prerm.index("systemctl stop") < prerm.index("guardian irq restore")
    assert postrm.index('[ "$1" = purge ] || exit 0') < postrm.index("rm -rf /var/lib/guardian")
    if shutil.which("rpm") is None:
        pytest.skip("rpm is not installed (apt-get install rpm)")
    [rpm] = dist.glob("*.rpm")
    scripts = subprocess.run(["rpm", "-qp", "--scripts", str(rpm)], capture_output=True,
                             text=True, check=True).stdout
    preun = scripts[scripts.index("preuninstall scriptlet"):
                    scripts.index("postuninstall scriptlet")]
    postun = scripts[scripts.index("postuninstall scriptlet"):]
    assert "guardian irq restore" in preun
    assert "rm -rf" not in postun and "/var/lib/guardian" not in postun


def _files(c: Container) -> list[str]:
    """Every path the package could touch (dpkg's own database and the journal aside)."""
    return sorted(c.run("find", "/etc", "/opt", "/usr", "/lib/systemd", "/var/lib",
                        "/var/log", "-xdev", "-not", "-path", "/var/lib/dpkg/*",
                        "-not", "-path", "/var/log/journal/*", "-not", "-path",
                        "/var/lib/systemd/*", "-not", "-path", "/var/log/apt/*",
                        "-not", "-path", "/var/log/dpkg.log", timeout=60,
                        check=False).stdout.splitlines())  # a missing /opt is fine


def _status(c: Container, want: str, timeout: float = BOUND) -> str:
    text = [""]

    def shows() -> bool:
        text[0] = c.run("systemctl", "show", "guardian.service", "-p",
                        "ActiveState,SubState,StatusText", check=False).stdout
        return want in text[0]

    try:
        wait_until(shows, f"{want!r} in the service's status", timeout, every=0.3)
    except AssertionError:
        raise AssertionError(f"no {want!r} in {text[0]}") from None
    return text[0]


def _journal(c: Container, want: str, timeout: float = BOUND) -> str:
    journal = [""]

    def holds() -> bool:
        journal[0] = c.run("journalctl", "--no-pager", "-o", "cat", "-u",
                           "guardian.service", check=False).stdout
        return want in journal[0]

    try:
        wait_until(holds, f"{want!r} in the journal", timeout, every=0.3)
    except AssertionError:
        raise AssertionError(journal[0][-2000:]) from None
    return journal[0]


def test_a_fresh_deb_does_what_install_md_says_at_first_boot(dist: Path) -> None:
    """docs/install.md, "First boot": on Debian 12 the unit is enabled, started, started at
    every boot, and observes (`dry run` in its status and its journal) until
    `dry_run = false` is set in the shipped guardian.toml and it is restarted. Before: the
    shipped guardian.toml set no dry_run, so a fresh install acted at once."""
    why = nspawn_unavailable()
    if why:
        pytest.skip(f"systemd-nspawn test skipped: {why}")
    deb = _deb(dist)
    doc = (REPO / "docs" / "install.md").read_text()
    assert "## First boot: observing until you turn acting on" in doc
    with booted(binds=[(str(dist), "/dist")], name="guardian-first") as c:
        c.run("dpkg", "-i", f"/dist/{deb.name}", timeout=300)
        assert c.run("systemctl", "is-enabled", "guardian.service").stdout.strip() == "enabled"
        wanted = c.run("systemctl", "show", "guardian.service", "-p", "WantedBy").stdout
        assert wanted.strip() == "WantedBy=multi-user.target"  # started at every boot
        status = _status(c, "SubState=running")
        assert "StatusText=dry run" in status, status
        _journal(c, "guardian dry run:")
        # the switch docs/install.md names: [service] dry_run = false, then a restart
        conf = c.run("cat", "/etc/guardian/guardian.toml").stdout
        assert "\n[service]\ndry_run = true " in conf, conf[:600]
        c.write("/etc/guardian/guardian.toml", conf.replace("dry_run = true ",
                                                            "dry_run = false", 1))
        c.run("systemctl", "restart", "guardian.service", timeout=60)
        status = _status(c, "SubState=running")
        assert "dry run" not in status and f"{shipped_rule_count()} rules" in status, status
        _journal(c, "guardian live:")
        # the audit log's rotation came with the package
        c.run("test", "-f", "/etc/logrotate.d/node-guardian")


def test_the_packaged_logrotate_rotates_the_audit_log_under_a_running_writer(
        dist: Path, tmp_path: Path) -> None:
    """/etc/logrotate.d/node-guardian from the .deb, run by the real logrotate (its paths moved
    under tmp_path) while an audit log is open, as the service holds it: the records before
    the rotation are in audit.jsonl.1, the ones after in a new audit.jsonl, each readable
    whole. Before: the packages shipped no rotation, and the open descriptor kept writing
    into whatever the file was renamed to."""
    from guardian.core.audit import AuditLog, TornLine, read_audit
    logrotate = shutil.which("logrotate") or "/usr/sbin/logrotate"
    if not Path(logrotate).exists():
        pytest.skip("logrotate is not installed (apt-get install logrotate)")
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(_deb(dist))],
                          capture_output=True, check=True).stdout
    conf = subprocess.run(["tar", "-xO", "./etc/logrotate.d/node-guardian"], input=data,
                          capture_output=True, check=True).stdout.decode()
    ctrl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(_deb(dist))],
                          capture_output=True, check=True).stdout
    listed = subprocess.run(["tar", "-xO", "./conffiles"], input=ctrl, capture_output=True,
                            check=True).stdout.decode().split()
    assert "/etc/logrotate.d/node-guardian" in listed  # an operator's edit survives upgrades
    logs = tmp_path / "log"
    logs.mkdir(mode=0o700)
    assert "/var/log/guardian/audit.jsonl {" in conf
    (tmp_path / "guardian.conf").write_text(conf.replace("/var/log/guardian", str(logs)))
    audit = AuditLog(logs / "audit.jsonl")
    audit.write({"type": "plan", "n": 1})
    audit.write({"type": "outcome", "n": 2})
    rotate = subprocess.run([logrotate, "--force", "--state", str(tmp_path / "state"),
                             str(tmp_path / "guardian.conf")], capture_output=True,
                            text=True, timeout=60)
    assert rotate.returncode == 0, rotate.stderr
    audit.write({"type": "plan", "n": 3})  # the service's next record, after the rotation
    audit.close()

    def numbers(path: Path) -> list[object]:
        records = list(read_audit(path))
        assert not any(isinstance(r, TornLine) for r in records), records
        return [r["n"] for r in records if isinstance(r, dict)]

    assert numbers(logs / "audit.jsonl.1") == [1, 2]  # delaycompress: plain until the next
    assert numbers(logs / "audit.jsonl") == [3]


def test_the_deb_installs_boots_reloads_and_purges_clean(dist: Path) -> None:
    why = nspawn_unavailable()
    if why:
        pytest.skip(f"systemd-nspawn test skipped: {why}")
    deb = _deb(dist)
    with booted(binds=[(str(dist), "/dist")], name="guardian-pkg") as c:
        before = _files(c)
        c.run("dpkg", "-i", f"/dist/{deb.name}", timeout=300)
        # the preset policy enabled it, the maintainer script started it: Type=notify,
        # so active (running) means READY=1 came, after the first evaluation
        assert c.run("systemctl", "is-enabled", "guardian.service").stdout.strip() == "enabled"
        status = _status(c, "SubState=running")
        assert f"{shipped_rule_count()} rules" in status, status
        # the default rules it loaded are the ones in /etc/guardian/rules
        check = c.run("guardian", "check").stdout
        assert check.startswith(f"ok: {shipped_rule_count()} rule(s)"), check
        pid = c.run("systemctl", "show", "guardian.service", "-p", "MainPID").stdout
        c.run("systemctl", "reload", "guardian.service", timeout=60)
        _journal(c, "reloaded (SIGHUP)")
        assert c.run("systemctl", "show", "guardian.service", "-p", "MainPID").stdout == pid
        # a purge removes what the package installed and made, and nothing else
        c.run("dpkg", "--purge", "node-guardian", timeout=120)
        after = _files(c)
        left = set(after) ^ set(before)
        assert left == set(), sorted(left)[:40]
