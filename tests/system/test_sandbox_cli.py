"""`guardian check` warns when the shipped unit's sandbox (ProtectControlGroups=yes)
forbids a rule's `memcg.release` method, and not for the shipped rules (issue 26; the
unit files read in-process: tests/unit/hostio/test_sandbox.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.checkout import REPO, RULES, write
from tests.support.cli import guardian


def test_check_warns_when_the_unit_forbids_reclaim(tmp_path: Path) -> None:
    text = (RULES / "memcg.toml").read_text().replace(
        'method = "drop_caches"', 'method = "reclaim"\n  cgroup = "system.slice"')
    assert 'method = "reclaim"' in text
    write(tmp_path, "memcg.toml", text)
    shutil.copy(RULES / "systemd.toml", tmp_path)
    proc = guardian("check", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "memcg.release" in proc.stderr and "ProtectControlGroups=yes" in proc.stderr
    shipped = guardian("check", str(RULES))
    assert shipped.returncode == 0 and "ProtectControlGroups" not in shipped.stderr


WEBHOOK = '''version = 1
[[rule]]
name = "page-me"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "notify.webhook"
  url = "http://10.213.0.1:8080/hook?token=SECRET"
'''


def test_check_warns_when_the_unit_denies_a_webhook_and_prints_the_drop_in(
        tmp_path: Path) -> None:
    """Issue 38: IPAddressDeny=any dropped the webhook of a native install while check
    said nothing. --unit names the unit (here the shipped one); its FILE.d/ drop-ins count."""
    rules = write(tmp_path, "rules/hook.toml", WEBHOOK)
    unit = tmp_path / "guardian.service"
    shutil.copy(REPO / "systemd" / "guardian.service", unit)
    proc = guardian("check", "--unit", str(unit), str(rules))
    assert proc.returncode == 0, proc.stderr  # a warning, not an error
    assert "warning: " in proc.stderr and "notify.webhook" in proc.stderr
    assert "IPAddressDeny=any, IPAddressAllow=localhost" in proc.stderr
    assert "IPAddressAllow=10.213.0.1" in proc.stderr and "SECRET" not in proc.stderr
    dropin = guardian("check", "--dropin", "--unit", str(unit), str(rules))
    assert dropin.returncode == 0 and "[Service]\nIPAddressAllow=10.213.0.1\n" in dropin.stdout
    write(tmp_path, "guardian.service.d/50-actions.conf", dropin.stdout)
    quiet = guardian("check", "--unit", str(unit), str(rules))
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr
    as_json = guardian("check", "--json", "--unit", str(unit), str(rules))
    assert '"unit": "' in as_json.stdout and "+ 1 drop-in(s)" in as_json.stdout
