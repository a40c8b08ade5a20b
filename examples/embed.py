"""An agent that embeds guardian: collect → evaluate → plan → apply, in its own loop,
with its own plugin, against a host root it chooses. Run: ``python examples/embed.py``.

It installs no signal handlers and touches nothing outside the temporary directory it
makes: the host root is a fake spool, and the action writes a note there.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import guardian
from guardian.testing import FakeHost

sys.path.insert(0, str(Path(__file__).parent))
from acme_plugin import NoteAction, QueueSource

RULES = """
version = 1

[[rule]]
name = "queue-backlog"
summary = "a queue is backing up"
when = 'max(acme.queue_depth{queue="mail"}) > 2'
for = "20s"
  [[rule.action]]
  use = "acme.note"
  path = "{notes}"
  token = "s3cret"
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake = FakeHost(root / "host")
        notes = root / "notes.txt"
        fake.write("var/spool/acme/mail/first.eml", "hello")
        registry = guardian.Registry()  # this agent's own plugins only
        registry.add_source(QueueSource)
        registry.add_action(NoteAction)
        rules = guardian.load_text(RULES.replace("{notes}", str(notes)), registry=registry)
        collector = guardian.Collector.from_registry(fake.host, registry)
        engine = guardian.Engine(rules)
        executor = guardian.Executor(fake.host, dry_run=False)
        for t in range(0, 60, 10):  # the agent's own clock: one tick every 10 s
            fake.write(f"var/spool/acme/mail/{t}.eml", "hello")
            snapshot = collector.collect(float(t))
            for done in executor.run(engine.evaluate(snapshot), snapshot):
                print(f"t={t}s {done.decision.kind}: {done.use} -> "
                      f"{done.outcome.detail if done.outcome else done.error}")
        print(notes.read_text().strip())
        return 0 if notes.read_text().splitlines() == ["queue-backlog firing"] else 1


if __name__ == "__main__":
    sys.exit(main())
