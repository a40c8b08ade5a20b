"""`guardian check` warns of a `[[group]]` `rules` entry that matches no loaded rule,
located and with the name likely meant, as `guardian pause` says of a rule it does not
know (issue 45's review: `rules = ["memcg-lek", "xid-*"]` passed silently, and the rule
meant then ran in shadow on the group's nodes). Ground truth: the rule names loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.cli import main
from guardian.cli.check import group_rules
from guardian.plugin.registry import default_registry
from guardian.runtime.config import load_config
from tests.support.checkout import write

RULES = ('version = 1\n[[rule]]\nname = "memcg-leak"\nsummary = "s"\n'
         'when = "memcg.dying > 1"\n')
GROUPS = ('[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\n'
          'rules = ["memcg-lek", "xid-*", "memcg-*"]\n\n'
          '[[group]]\nname = "canary"\nlabels = { canary = "true" }\nmode = "shadow"\n'
          'rules = ["nope"]\n')


def test_an_entry_that_matches_no_rule_is_a_located_warning(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "guardian.toml", GROUPS), default_registry())
    got = [w.replace(f"{tmp_path}/", "") for w in group_rules(config, ["memcg-leak"])]
    then = "; only the rules it lists act on its nodes, the others run in shadow there"
    assert got == [
        "guardian.toml:4:10: [[group]] 'gpu': rules: 'memcg-lek' matches no loaded rule "
        f"(did you mean 'memcg-leak'?){then}",
        "guardian.toml:4:23: [[group]] 'gpu': rules: 'xid-*' matches no loaded rule "
        f"(known: memcg-leak){then}",
        # a shadow group runs every rule in shadow: the entry is wrong, nothing more
        "guardian.toml:10:10: [[group]] 'canary': rules: 'nope' matches no loaded rule "
        "(known: memcg-leak)"]
    many = [f"rule-{i}" for i in range(11)]
    assert group_rules(config, many)[-1].endswith("(none of the 11 known is close)")


def test_check_prints_it_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    rules = write(tmp_path, "rules/r.toml", RULES)
    config = write(tmp_path, "guardian.toml", GROUPS)
    assert main(["check", "--config", str(config), str(rules)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {config}:4:10: [[group]] 'gpu': rules: 'memcg-lek' matches" in err


FLEET = '[fleet]\nnamespace = "guardian"\nmax_nodes = 12\n\n'
BUDGETS = ('[[group]]\nname = "gpu"\nlabels = { pool = "gpu" }\nmax_nodes = 2\n\n'
           '[[group]]\nname = "cpu"\nlabels = { pool = "cpu" }\nmax_percent = 10\n\n'
           '[[group]]\nname = "edge"\nlabels = { pool = "edge" }\nmin_healthy = "90%"\n\n'
           '[[group]]\nname = "canary"\nlabels = { canary = "true" }\nmode = "shadow"\n')


def test_slots_the_shipped_role_does_not_name_are_one_located_warning(
        tmp_path: Path) -> None:
    """Ground truth: deploy/kubernetes/rbac.yaml's Role grants get and update on
    guardian-slot-0..9 by name (tests/unit/test_docs_manifests.py holds the code to it);
    the Leases' names are kube/fleet.py's. Before: nothing said so, and under that Role
    every node's count of the slots was refused (403)."""
    pytest.importorskip("lightkube")
    from guardian.cli.check import fleet_role
    from guardian.kube.fleet import FleetParams, role_gaps

    config = load_config(write(tmp_path, "guardian.toml", FLEET + BUDGETS),
                         default_registry())
    [said] = fleet_role(config)
    assert said.replace(f"{tmp_path}/", "").startswith(
        "guardian.toml:3:1: the fleet budget's slots guardian-slot-10..11 ([fleet] "
        "max_nodes = 12), guardian-gpu-slot-0..1 ([[group]] 'gpu' max_nodes = 2), "
        "guardian-cpu-slot-0, -1, ... (as many as [[group]] 'cpu' max_percent = 10 of its "
        "nodes allows; max_nodes bounds them), guardian-edge-slot-0 ([[group]] 'edge' "
        "min_healthy alone: one) are Leases that the Role guardian-fleet of "
        "deploy/kubernetes/rbac.yaml does not grant (get and update on "
        "guardian-slot-0..9 alone; ")
    # within the Role: nothing to say; a Role extended as docs/kubernetes.md shows: none
    fleet = FleetParams(namespace="guardian", max_nodes=10)
    assert role_gaps(fleet, []) == []
    gpu = [g for g in config.groups if g.name == "gpu"]
    assert role_gaps(fleet, gpu, granted=[*(f"guardian-slot-{i}" for i in range(10)),
                                          "guardian-gpu-slot-0", "guardian-gpu-slot-1"]
                     ) == []
    assert fleet_role(load_config(write(tmp_path, "g2.toml", GROUPS), default_registry())
                      ) == []  # no [fleet]: no slots
