"""Rule files and rule tests that unit tests share with the system tests that run the
same through the command line (`guardian check`, `guardian test`, `run --once`)."""

from __future__ import annotations

GOOD_RULES = '''version = 1

[[rule]]
name = "ok"
summary = "fine"
when = "memcg.dying > 1"
'''

ZOMBIE_RULES = '''version = 1
[[rule]]
name = "many-zombies"
summary = "s"
when = "processes.zombies > 10"
for = "2m"
  [[rule.action]]
  use = "log"
'''

HOT_RULES = '''version = 1

[[rule]]
name = "hot"
summary = "s"
when = "memcg.dying > 5"
'''

HOT_RULE_TEST = '''rule_files = ["r.toml"]
interval = "1m"

[[test]]
name = "t"
[test.series]
"memcg.dying" = "10x3"

  [[test.expect]]
  at = "1m"
  firing = ["hot"]
'''

ACTION_RULE = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "{use}"
'''
