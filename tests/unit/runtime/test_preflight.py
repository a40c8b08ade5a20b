"""guardian.runtime.preflight: what ``guardian check`` finds beyond each rule file."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian import load_text
from guardian.runtime.config import Config
from guardian.runtime.preflight import DROPIN, errors, sandbox, sandbox_warnings
from tests.support.checkout import write

REBOOT = '''version = 1
[[rule]]
name = "kernel-update"
summary = "s"
when = "memcg.dying > 10"
fleet = true
  [[rule.action]]
  use = "node.reboot"
  systemctl = ["/bin/true"]
'''


def test_a_reboot_on_a_kubernetes_node_needs_the_fleet_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    rules = load_text(REBOOT, path="r.toml")
    [d] = errors(rules, Config())  # no [fleet] in the config
    assert (d.path, d.line, d.col) == ("r.toml", rules.rules[0].line, 1)
    assert "node.reboot on a Kubernetes node needs the fleet budget" in d.message


def test_a_ladders_reboot_is_checked_and_a_shadow_rules_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node.reboot in a [[rule.step]] escaped the check (it read actions and escalate
    only); the shipped gpu-nvml-needs-reset ships in shadow mode and is checked once it
    acts."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    ladder = REBOOT.replace("  [[rule.action]]\n  use = \"node.reboot\"",
                            "  [[rule.step]]\n  verify = \"10m\"\n  [[rule.step.action]]\n"
                            "  use = \"log\"\n  [[rule.step]]\n  verify = \"30m\"\n"
                            "  [[rule.step.action]]\n  use = \"node.reboot\"")
    [d] = errors(load_text(ladder, path="r.toml"), Config())
    assert "needs the fleet budget" in d.message
    shadow = ladder.replace("fleet = true", "fleet = true\nmode = \"observe\"")
    assert errors(load_text(shadow, path="r.toml"), Config()) == []


LADDER = '''version = 1
[[rule]]
name = "nic-stuck"
summary = "s"
when = "memcg.dying > 10"
fleet = false
  [[rule.step]]
  verify = "10m"
  [[rule.step.action]]
  use = "log"
  message = "m"
  [[rule.step]]
  verify = "30m"
  [[rule.step.action]]
  {step}
'''


@pytest.mark.parametrize("step", [
    'use = "kube.drain"\n  wait = 300',
    'use = "node.reboot"\n  systemctl = ["/bin/true"]\n'
    '  drain = { wait = 200, force = true, force_wait = 100 }',
], ids=["kube.drain", "node.reboot-drain"])
def test_a_drain_in_a_ladders_step_is_checked_against_the_apply_timeout(step: str) -> None:
    """kube/drain.check read a rule's actions and escalation only: a drain in a
    [[rule.step]] that outlasts [service] apply_timeout (300 s) passed `guardian check`."""
    rules = load_text(LADDER.format(step=step), path="l.toml")
    [d] = [d for d in errors(rules, Config()) if "apply_timeout" in d.message]
    assert (d.path, d.line) == ("l.toml", 2)
    assert "rule 'nic-stuck': " in d.message and "= 300s is not below [service] " \
        "apply_timeout (300s)" in d.message


def test_a_ladders_step_is_told_what_the_units_sandbox_denies_it(tmp_path: Path) -> None:
    """The sandbox was compared with a rule's actions and escalation only: a step's
    webhook to a non-loopback address went unwarned."""
    rules = load_text(LADDER.format(step='use = "notify.webhook"\n'
                                         '  url = "http://10.213.0.1:8080/hook"'),
                      path="l.toml")
    [w] = sandbox(rules, Config(), root=tmp_path).warnings
    assert w.startswith("l.toml:2: rule 'nic-stuck': notify.webhook: connects to the "
                        "webhook http://10.213.0.1:8080 (10.213.0.1)")


def test_rules_that_neither_reboot_nor_drain_have_nothing_to_check() -> None:
    rules = load_text('version = 1\n[[rule]]\nname = "a"\nsummary = "s"\n'
                      'when = "memcg.dying > 1"\n  [[rule.action]]\n  use = "log"\n')
    assert errors(rules, Config()) == [] and sandbox_warnings(rules) == []


# -- the unit's sandbox against what each action needs (issue 38) ----------------------

WEBHOOK = '''version = 1
[[rule]]
name = "page-me"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "notify.webhook"
  url = "http://10.213.0.1:8080/hook?token=SECRET"
  [[rule.action]]
  use = "notify.alertmanager"
  url = "http://127.0.0.1:9093"
'''


def test_a_webhook_to_a_non_loopback_address_is_denied_by_the_shipped_unit(
        tmp_path: Path) -> None:
    rules = load_text(WEBHOOK, path="r.toml")
    report = sandbox(rules, Config(), root=tmp_path)  # nothing installed: the package's
    [w] = report.warnings  # Alertmanager on loopback is allowed
    assert w.startswith("r.toml:2: rule 'page-me': notify.webhook: connects to the webhook "
                        "http://10.213.0.1:8080 (10.213.0.1)")
    assert "IPAddressDeny=any, IPAddressAllow=localhost" in w
    assert f"fix: a drop-in {DROPIN} with [Service] IPAddressAllow=10.213.0.1" in w
    assert "SECRET" not in w and "/hook" not in w  # the URL is a secret
    assert report.dropin().endswith("[Service]\nIPAddressAllow=10.213.0.1\n")
    # the drop-in it proposes, installed, silences it
    write(tmp_path, "etc/systemd/system/guardian.service.d/50-actions.conf",
          report.dropin())
    assert sandbox(rules, Config(), root=tmp_path).warnings == []


def test_a_named_unit_and_its_drop_ins(tmp_path: Path) -> None:
    rules = load_text(WEBHOOK, path="r.toml")
    unit = write(tmp_path, "u/guardian.service", "[Service]\nIPAddressDeny=any\n")
    [both] = sandbox(rules, unit=unit).warnings  # Alertmanager too: no localhost; one
    assert both.startswith("2 actions (notify.alertmanager, notify.webhook) need network "
                           "egress the unit's IPAddressDeny=any denies (")
    write(tmp_path, "u/guardian.service.d/any.conf", "[Service]\nIPAddressAllow=any\n")
    report = sandbox(rules, unit=unit)
    assert report.warnings == [] and report.unit == f"{unit} + 1 drop-in(s)"


COMMANDS = '''version = 1
[[rule]]
name = "gpu-reset"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "command"
  argv = ["touch", "/etc/x"]
  [[rule.action]]
  use = "command"
  argv = ["nvidia-smi", "-r"]
  [rule.action.needs]
  devices = ["/dev/nvidia0"]
  capabilities = ["sys_admin"]
  writes = ["/etc/nv", "/var/lib/guardian/x"]
'''


def test_a_command_is_told_its_sandbox_and_each_need_the_unit_denies(
        tmp_path: Path) -> None:
    rules = load_text(COMMANDS, path="c.toml")
    report = sandbox(rules, Config(), root=tmp_path)
    unknown, writes, device, cap = report.warnings
    assert "command: what touch writes, opens and connects to is not known" in unknown
    for said in ("a read-only root (ProtectSystem=strict), writable only "
                 "/proc/sys/vm/drop_caches, /proc/irq, /var/lib/guardian",
                 "(DevicePolicy=closed)", "capabilities: CAP_KILL CAP_SYSLOG",
                 "network: IPAddressDeny=any, IPAddressAllow=localhost"):
        assert said in unknown, said
    assert "writes /etc/nv, which the unit makes read-only (ProtectSystem=strict)" in writes
    assert "ReadWritePaths=-/etc/nv" in writes  # /var/lib/guardian is writable: no warning
    assert "opens /dev/nvidia0, which the unit denies (DevicePolicy=closed)" in device
    assert "DeviceAllow=/dev/nvidia0 rw" in device
    assert "uses CAP_SYS_ADMIN" in cap and "CapabilityBoundingSet=CAP_SYS_ADMIN" in cap
    write(tmp_path, "etc/systemd/system/guardian.service.d/50-actions.conf",
          report.dropin())
    [left] = sandbox(rules, Config(), root=tmp_path).warnings  # what touch needs: unknown
    assert "what touch writes" in left and "/proc/irq, /etc/nv, /var/lib/guardian" in left
    assert "+ 1 drop-in(s)" in left and "CAP_KILL CAP_SYSLOG CAP_SYS_ADMIN" in left


KUBE = '''version = 1
[[rule]]
name = "cordon"
summary = "s"
when = "memcg.dying > 1"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kubeconfig}"
'''
KUBECONFIG = '''apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.96.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
'''


def test_kube_actions_and_the_fleet_need_the_api_server(tmp_path: Path) -> None:
    from guardian.kube.fleet import FleetParams

    kubeconfig = write(tmp_path, "kubeconfig", KUBECONFIG)
    rules = load_text(KUBE.format(kubeconfig=kubeconfig), path="k.toml")
    config = Config(fleet=FleetParams(kubeconfig=str(kubeconfig)), path="g.toml")
    [both] = sandbox(rules, config, root=tmp_path).warnings  # one warning for the two
    assert both.startswith("1 action (kube.cordon) and [fleet] need network egress the "
                           "unit's IPAddressDeny=any, IPAddressAllow=localhost denies (the "
                           "Kubernetes API server https://10.96.0.1:6443 (10.96.0.1)): fix "
                           f"once: a drop-in {DROPIN} with [Service] IPAddressAllow=10.96.0.1")
    assert both.endswith("first: k.toml:2: rule 'cordon': kube.cordon")


# -- perf: a system call the unit's SystemCallFilter= refuses (issue 43) -----------------

def test_an_enabled_flight_recorder_needs_perf_event_open_and_its_capabilities(
        tmp_path: Path) -> None:
    """[evidence.flight] enabled runs perf record -a for as long as the service runs: its
    needs are compared like an action's; disabled, nothing is said."""
    from guardian.runtime.config import EvidenceConfig, FlightConfig

    rules = load_text('version = 1\n[[rule]]\nname = "a"\nsummary = "s"\n'
                      'when = "memcg.dying > 1"\n  [[rule.action]]\n  use = "log"\n')
    assert sandbox(rules, Config(path="g.toml"), root=tmp_path).warnings == []
    config = Config(path="g.toml", evidence=EvidenceConfig(flight=FlightConfig(enabled=True)))
    report = sandbox(rules, config, root=tmp_path)
    said = "\n".join(report.warnings)
    assert "g.toml: [evidence.flight]: calls perf_event_open()" in said
    [caps] = [w for w in report.warnings if "capabilities" in w]
    assert caps.startswith("[evidence.flight] uses capabilities the unit's bounding set lacks "
                           "(CAP_PERFMON; CAP_IPC_LOCK)")
    assert report.dropin().endswith(
        "[Service]\nCapabilityBoundingSet=CAP_PERFMON\nCapabilityBoundingSet=CAP_IPC_LOCK\n"
        "SystemCallFilter=perf_event_open\n")  # CAP_SYSLOG: the shipped unit has it
    write(tmp_path, "etc/systemd/system/guardian.service.d/50-actions.conf",
          report.dropin())
    assert sandbox(rules, config, root=tmp_path).warnings == []


GPU_RESET = '''version = 1
[[rule]]
name = "gpu-reset"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "gpu.reset"
'''


def test_gpu_reset_gets_the_drivers_device_groups_never_a_glob(tmp_path: Path) -> None:
    """Issue 44: the advice was ``DeviceAllow=/dev/nvidia[0-9]* rw``, which systemd stats
    as one path (systemd.resource-control(5): "such globbing wildcards are not available
    for device node path specifications"), and its one gpu.reset was "2 actions". The
    shipped unit grants the driver's groups: nothing to say. A unit with only
    /dev/kmsg is told the two groups (drivers up to 535, and 545 on), once."""
    rules = load_text(GPU_RESET, path="g.toml")
    # the package's unit grants the devices; the reset's CAP_SYS_ADMIN is its only need
    [cap] = sandbox(rules, Config(), root=tmp_path).warnings
    assert "gpu.reset: uses CAP_SYS_ADMIN, which the unit's bounding set lacks" in cap
    write(tmp_path, "etc/systemd/system/guardian.service",
          "[Service]\nDevicePolicy=closed\nDeviceAllow=/dev/kmsg r\n")
    report = sandbox(rules, Config(), root=tmp_path)
    [w] = report.warnings
    assert w.startswith("1 action (gpu.reset) opens devices the unit denies "
                        "(char-nvidia-frontend; char-nvidia): fix once: a drop-in "), w
    assert "[Service] DeviceAllow=char-nvidia-frontend rw DeviceAllow=char-nvidia rw" in w
    assert "*" not in report.dropin() and "/dev/nvidia" not in report.dropin()
    write(tmp_path, "etc/systemd/system/guardian.service.d/50-actions.conf",
          report.dropin())
    assert sandbox(rules, Config(), root=tmp_path).warnings == []


def test_a_device_path_is_granted_through_its_group_on_this_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's /dev/nvidia0 under a unit that allows char-nvidia: granted where this
    host's /proc/devices names the node's major nvidia (as systemd resolves it), and
    warned about where the node is not here to tell."""
    import guardian.hostio.sandbox as hs

    text = COMMANDS.replace('argv = ["touch", "/etc/x"]', 'argv = ["true"]\n  needs = {}')
    rules = load_text(text, path="c.toml")
    write(tmp_path, "etc/systemd/system/guardian.service",
          "[Service]\nDevicePolicy=closed\nDeviceAllow=char-nvidia rw\n")
    said = " ".join(sandbox(rules, Config(), root=tmp_path).warnings)
    assert "opens /dev/nvidia0, which the unit denies (DevicePolicy=closed)" in said
    monkeypatch.setattr(hs, "device_groups", lambda path, root: (
        ("char-nvidia", "char-nvidiactl") if path == "/dev/nvidia0" else ()))
    said = " ".join(sandbox(rules, Config(), root=tmp_path).warnings)
    assert "/dev/nvidia0" not in said, said


def test_a_command_may_need_a_device_group_but_no_glob_path(tmp_path: Path) -> None:
    """systemd.resource-control(5): a DeviceAllow= specifier is a node's path (no
    globbing) or char-/block- and a /proc/devices name (globs allowed)."""
    from guardian.core.errors import GuardianError

    text = COMMANDS.replace('devices = ["/dev/nvidia0"]', 'devices = ["char-nvidia"]')
    unit = write(tmp_path, "u/guardian.service",
                 "[Service]\nDevicePolicy=closed\nDeviceAllow=/dev/kmsg r\n")
    report = sandbox(load_text(text, path="c.toml"), unit=unit)
    assert "DeviceAllow=char-nvidia rw\n" in report.dropin()
    with pytest.raises(GuardianError, match="without globs"):
        load_text(COMMANDS.replace('"/dev/nvidia0"', '"/dev/nvidia*"'), path="c.toml")


def test_a_gpu_reset_needs_cap_sys_admin_and_a_shadow_rule_needs_nothing(
        tmp_path: Path) -> None:
    """The reset is a privileged request of the driver (nvidia-smi(1): "Requires root";
    the open driver's os_is_administrator() is capable(CAP_SYS_ADMIN)): before, gpu.reset
    declared only the devices and the shipped unit's bounding set (CAP_KILL CAP_SYSLOG)
    went unwarned. A rule in shadow mode (mode = "observe") never applies, so it needs
    nothing of the unit: before, the shipped gpu-nvml-needs-reset, shipped in shadow mode,
    was warned about on every `guardian check rules/`."""
    rules = load_text(GPU_RESET, path="g.toml")
    report = sandbox(rules, Config(), root=tmp_path)
    assert "CapabilityBoundingSet=CAP_SYS_ADMIN" in report.dropin()
    shadow = load_text(GPU_RESET.replace('when = "memcg.dying > 1"\n',
                                         'when = "memcg.dying > 1"\nmode = "observe"\n'),
                       path="g.toml")
    assert sandbox(shadow, Config(), root=tmp_path).warnings == []
