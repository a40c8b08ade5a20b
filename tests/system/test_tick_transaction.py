"""One tick, one transaction (issue 39): the service evaluates, makes the proposal durable
(the state file, then the audit log) and only then commits it, or drops it whole. Before,
a tick that could not be made durable was undone by re-importing the engine's saved
state, which left out what the evaluation had consumed (a reload's `changed`): a rule
whose `for` a reload raised went on firing and acted again at once.

Each test drives the daemon in-process through one way a tick is dropped (the state save
fails, the audit write fails, the previous tick's actions still run) across a reload
that raises `for` to an hour, and counts the action's runs: exactly one."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from guardian.plugin.contract import Action, ActionContext, NoParams, Outcome, Plan
from guardian.runtime import state as state_file
from tests.support.checkout import write
from tests.support.plugins import registry_with

RULE = '''version = 1
[[rule]]
name = "acts"
summary = "s"
when = "processes.total > 0"
for = "{for_}"
cooldown = "0s"
limit = {{ runs = 1000, within = "1h" }}
  [[rule.action]]
  use = "test.counted"
'''


class Counted(Action[NoParams]):
    """Counts its apply() runs; one may be made to wait on ``gate``."""

    name: ClassVar[str] = "test.counted"
    runs: ClassVar[int] = 0
    gate: ClassVar[threading.Event | None] = None

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Counted.runs += 1
        if Counted.gate is not None:
            Counted.gate.wait(30)
        return Outcome(ok=True)


def _enospc(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Any]:
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions
    from guardian.service.notify import Notifier

    Counted.runs, Counted.gate = 0, None
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "r.toml", RULE.format(for_="0s"))
    opts = ServiceOptions(rules=[str(rules)], state_path=tmp_path / "state.json",
                          audit_path=tmp_path / "audit.jsonl", metrics_port=None,
                          require_root_owned_rules=False, act_deadline=0.2)
    d = Daemon(opts, Config(), registry=registry_with(Counted), notifier=Notifier({}))
    assert d.start() == 0
    try:
        yield d
    finally:
        if Counted.gate is not None:
            Counted.gate.set()
        d.shutdown()


def _raise_for(d: Any, tmp_path: Path) -> None:
    """The rules reloaded with `for = "1h"`: the firing rule goes back to pending."""
    write(tmp_path / "rules", "r.toml", RULE.format(for_="1h"))
    d.request_reload("test")
    assert d.reload()


def _pending_and_once(d: Any) -> None:
    """The drop left the reload's promise in place: pending, and no second run."""
    for _ in range(3):
        d.tick()
    assert Counted.runs == 1  # before: 4, a run at each tick
    assert d.transaction.engine.states["acts"].phase == "pending"
    assert d.transaction.persistence_fault() == ""


def test_a_failed_state_save_across_a_reload_acts_once(
        service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the undo lost the reload's `changed`; the disk back, the rule said
    `retry` and acted again (and again) instead of waiting an hour."""
    d = service
    d.tick()
    assert Counted.runs == 1 and d.transaction.engine.states["acts"].phase == "firing"
    with monkeypatch.context() as m:
        m.setattr(state_file, "write_json", _enospc)  # the state's filesystem is full
        _raise_for(d, tmp_path)
        for _ in range(2):
            d.tick()
        assert "NOT ACTING, persistence failing (state: No space left on device)" \
            in d.status()
        assert d.metrics.persistence_ok._value.get() == 0
        assert d.transaction.engine.states["acts"].changed  # not consumed: the tick was dropped
    _pending_and_once(d)


def test_a_failed_audit_write_across_a_reload_acts_once(
        service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = service
    d.tick()
    assert Counted.runs == 1
    with monkeypatch.context() as m:
        m.setattr(d.transaction.executor.audit, "write", _enospc)  # the audit log's disk is full
        _raise_for(d, tmp_path)
        for _ in range(2):
            d.tick()
        assert "audit log: No space left on device" in d.transaction.persistence_fault()
        assert d.transaction.engine.states["acts"].changed
    _pending_and_once(d)


def test_actions_still_running_across_a_reload_act_once(
        service: Any, tmp_path: Path) -> None:
    d = service
    Counted.gate = threading.Event()
    d.tick()  # the action outlives the tick's act deadline
    assert Counted.runs == 1 and d.transaction.acting.is_alive()
    _raise_for(d, tmp_path)
    for _ in range(2):
        d.tick()  # nothing is decided beside actions still running
    assert d.transaction.engine.states["acts"].changed
    Counted.gate.set()
    deadline = time.monotonic() + 10
    while d.transaction.acting.is_alive() and time.monotonic() < deadline:  # poll, bounded
        threading.Event().wait(0.05)
    assert not d.transaction.acting.is_alive()
    _pending_and_once(d)
