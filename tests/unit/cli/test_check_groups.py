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
