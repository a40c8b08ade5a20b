"""`guardian check` compares the actions' needs with guardian.service's sandbox only where
the unit runs the configuration checked, and says each kind of need denied once (issue
41's review: the rendered DaemonSet config got 17 warnings, one ~400-character
"…the unit's IPAddressDeny=any … may deny…" per kube.* action, though a pod has no unit).

Ground truth: the shipped DaemonSet manifests (configmap.yaml, rules.yaml) as written,
and the package's own unit, installed (or not) under a temporary root."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
import yaml

from guardian.cli import main
from tests.support.checkout import write

REPO = Path(__file__).resolve().parents[3]
KUBE = REPO / "deploy" / "kubernetes"
SHIPPED_UNIT = (resources.files("guardian") / "data" / "systemd" / "guardian.service"
                ).read_text()


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host root (tmp_path/root) whose units are the ones guardian check reads, outside
    any pod."""
    import guardian.hostio.sandbox as hs

    real: Callable[..., list[tuple[str, str]]] = hs.unit_sources
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setattr(hs, "unit_sources",
                        lambda _root=None, unit=None: real(root, unit))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return root


def _daemonset_config(tmp_path: Path) -> Path:
    """The DaemonSet's guardian.toml and rules, rendered as its ConfigMaps mount them."""
    text = (KUBE / "configmap.yaml").read_text()
    cm = next(d for d in yaml.safe_load_all(text) if d["metadata"]["name"] == "guardian-config")
    rules = next(d for d in yaml.safe_load_all((KUBE / "rules.yaml").read_text())
                 if d["metadata"]["name"] == "guardian-rules")["data"]
    for name, body in rules.items():
        write(tmp_path, f"rules/{name}", body)
    toml = cm["data"]["guardian.toml"]
    assert '"/etc/guardian/rules"' in toml
    return write(tmp_path, "guardian.toml",
                 toml.replace('"/etc/guardian/rules"', f'"{tmp_path / "rules"}"'))


def test_the_daemonset_config_gets_no_unit_advice(
        host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _daemonset_config(tmp_path)
    assert main(["check", "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert "IPAddress" not in err and "guardian.service.d" not in err, err
    assert out.rstrip().endswith(
        f"unit: not compared (the package's guardian.service runs "
        f"/etc/guardian/guardian.toml, not {config}; --unit FILE compares)")


def test_in_a_pod_there_is_no_unit(host: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    write(tmp_path, "rules/r.toml", WEBHOOKS)
    assert main(["check", str(tmp_path / "rules")]) == 0
    out, err = capsys.readouterr()
    assert "IPAddress" not in err, err
    assert "unit: not compared (in a Kubernetes pod guardian runs under no systemd unit" in out


def test_compared_with_a_unit_the_kube_actions_get_one_warning(
        host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--unit compares anyway: the DaemonSet's kube.* actions are one warning, not one
    each."""
    config = _daemonset_config(tmp_path)
    unit = write(tmp_path, "guardian.service", SHIPPED_UNIT)
    assert main(["check", "--config", str(config), "--unit", str(unit)]) == 0
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning:")]
    said = [w for w in warnings if "IPAddress" in w]
    assert len(said) == 1, said
    assert " actions (kube.condition \N{MULTIPLICATION SIGN}" in said[0]
    assert ("need network egress the unit's IPAddressDeny=any, IPAddressAllow=localhost"
            in said[0])


WEBHOOKS = "version = 1\n" + "".join(f'''
[[rule]]
name = "page-{n}"
summary = "s"
when = "memcg.dying > {n}"
  [[rule.action]]
  use = "notify.webhook"
  url = "http://10.213.0.1:8080/hook"
''' for n in (1, 2))


def test_a_host_config_with_webhooks_warns_once(
        host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The host's unit runs this config (its ExecStart= names it): compared, and the two
    webhooks the unit's firewall drops are one warning with the drop-in that fixes both."""
    write(tmp_path, "rules/r.toml", WEBHOOKS)
    config = write(tmp_path, "guardian.toml", f'[service]\nrules = ["{tmp_path}/rules"]\n')
    write(host, "etc/systemd/system/guardian.service", SHIPPED_UNIT.replace(
        "guardian run\n", f"guardian run --config={config}\n"))
    assert main(["check", "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    [warning] = [w for w in err.splitlines() if w.startswith("warning:")]
    assert warning.startswith(
        "warning: 2 actions (notify.webhook \N{MULTIPLICATION SIGN}2) need network egress "
        "the unit's IPAddressDeny=any, IPAddressAllow=localhost denies (the webhook "
        "http://10.213.0.1:8080 (10.213.0.1)): fix once: a drop-in "
        "/etc/systemd/system/guardian.service.d/50-actions.conf with [Service] "
        "IPAddressAllow=10.213.0.1 (`guardian check --dropin` prints it)")
    assert "unit:" not in out


PROFILE = '''version = 1
[[rule]]
name = "hot-core"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "evidence.profile"
'''


def test_a_perf_profile_gets_its_system_call_in_the_drop_in(
        host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43's review: --dropin printed only CapabilityBoundingSet=CAP_PERFMON, though
    the unit's SystemCallFilter=~…@debug refuses perf_event_open; with the drop-in
    installed check then passed and perf still failed (EPERM)."""
    rules = write(tmp_path, "rules/p.toml", PROFILE)
    unit = write(tmp_path, "guardian.service", SHIPPED_UNIT)
    assert main(["check", "--unit", str(unit), "--dropin", str(rules)]) == 0
    out, err = capsys.readouterr()
    assert "SystemCallFilter=perf_event_open\n" in out
    assert "CapabilityBoundingSet=CAP_PERFMON\n" in out
    assert "which the unit's SystemCallFilter=~@debug refuses" in err
    dropin = write(tmp_path, "guardian.service.d/50-actions.conf", out)
    write(host, "etc/systemd/system/guardian.service", SHIPPED_UNIT)
    write(host, "etc/systemd/system/guardian.service.d/50-actions.conf", dropin.read_text())
    assert main(["check", "--dropin", str(rules)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "warning:" not in err, err


def test_a_config_with_the_flight_recorder_gets_its_drop_in(
        host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43's review: [evidence.flight] enabled got "ok" and an empty --dropin."""
    write(tmp_path, "rules/r.toml", 'version = 1\n[[rule]]\nname = "a"\nsummary = "s"\n'
          'when = "memcg.dying > 1"\n  [[rule.action]]\n  use = "log"\n')
    config = write(tmp_path, "x.toml", f'[service]\nrules = ["{tmp_path}/rules"]\n'
                   "[evidence.flight]\nenabled = true\n")
    unit = write(tmp_path, "guardian.service", SHIPPED_UNIT)
    assert main(["check", "--config", str(config), "--unit", str(unit), "--dropin"]) == 0
    out, err = capsys.readouterr()
    for line in ("CapabilityBoundingSet=CAP_PERFMON", "CapabilityBoundingSet=CAP_IPC_LOCK",
                 "SystemCallFilter=perf_event_open"):
        assert f"\n{line}\n" in out, out
    assert f"{config}: [evidence.flight]: calls perf_event_open()" in err
