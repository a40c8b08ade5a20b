"""Issue 20: commands import only what they use. Entry points are listed without importing
them; an action's module is imported when a rule or a command uses it, and the service,
metrics and Kubernetes stacks only by the commands that need them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.checkout import REPO, RULES

HEAVY = ("lightkube", "httpx2", "prometheus_client", "watchdog", "guardian.service.daemon",
         "guardian.kube.actions", "guardian.runtime.metrics")

PROBE = """
import json, sys
from guardian.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def _modules(*argv: str) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["rc"], set(out["modules"])


def test_check_imports_neither_the_service_nor_kubernetes() -> None:
    rc, modules = _modules("check", str(REPO / "rules"))
    assert rc == 0
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}
    # the actions the shipped rules use are imported; the Kubernetes ones are not
    assert "guardian.actions.irq" in modules and "guardian.kube.actions" not in modules


def test_a_rule_that_uses_a_kubernetes_action_imports_it(tmp_path: Path) -> None:
    rules = tmp_path / "k.toml"
    rules.write_text('version = 1\n[[rule]]\nname = "r"\nsummary = "s"\n'
                     'when = "memcg.dying > 1"\nfleet = false\n  [[rule.action]]\n'
                     '  use = "kube.cordon"\n')
    rc, modules = _modules("check", str(rules))
    assert rc == 0 and "guardian.kube.actions" in modules


def test_listing_actions_imports_none_of_them() -> None:
    code = ("import sys\nfrom guardian.plugin.registry import Registry\n"
            "reg = Registry.from_entry_points()\n"
            "assert 'kube.cordon' in reg.actions and len(reg.actions) >= 11\n"
            "print(sorted(m for m in sys.modules if m.startswith('guardian.actions.') or "
            "m.startswith('guardian.kube')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


def test_importing_guardian_imports_nothing_else_of_it() -> None:
    code = ("import sys, guardian\nprint(sorted(m for m in sys.modules if m.startswith("
            "'guardian.')))\nguardian.Engine\nprint('guardian.engine.engine' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.split() == ["[]", "True"]


WITHOUT_K8S = "import sys\nsys.modules['httpx2'] = None\nsys.modules['lightkube'] = None\n"


def test_a_base_install_is_quiet_and_names_the_missing_extra() -> None:
    """Without the k8s extra (its modules made unimportable): commands say nothing about
    it (before: five "No module named 'httpx2'" warnings on every command), and a rule or
    `act` that uses a kube.* action is told which extra to install."""
    quiet = subprocess.run(
        [sys.executable, "-c", WITHOUT_K8S + "from guardian.cli import main\n"
                                             f"sys.exit(main(['check', {str(RULES)!r}]))"],
        capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    told = subprocess.run(
        [sys.executable, "-c", WITHOUT_K8S + "from guardian.plugin.registry import Registry\n"
                                             "reg = Registry.from_entry_points()\n"
                                             "assert reg.actions.get('kube.cordon') is None\n"
                                             "print(reg.action_failure('kube.cordon'))"],
        capture_output=True, text=True, timeout=60)
    assert "pip install 'node-guardian[k8s]'" in told.stdout, told.stdout + told.stderr
