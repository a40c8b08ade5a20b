"""The watchdog is pinged by the service's loop alone (issue 39): a loop that hangs stops the
pings, however busy an action's worker is meanwhile.

Before: the executor's apply wait called the daemon's ``ping_if_due`` from the acting
worker's thread, so a hung loop went on pinging systemd while an action ran."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

from guardian import Action, ActionContext, Outcome, Plan
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import default_registry
from guardian.runtime.config import Config
from guardian.runtime.executor import Executed
from guardian.service.daemon import Daemon, ServiceOptions
from guardian.service.notify import Notifier
from tests.support.checkout import write
from tests.support.daemon import RULE

WAIT = 30.0  # what the test waits for an event at most; never reached when it passes


class Pings(Notifier):
    """A watchdog due at every chance (WATCHDOG_USEC=1); each ping noted with whether the
    loop was stuck then."""

    def __init__(self, stuck: threading.Event) -> None:
        super().__init__({"WATCHDOG_USEC": "1"})
        self.stuck = stuck
        self.while_stuck: list[str] = []

    def send(self, *fields: str) -> None:
        pass

    def watchdog(self) -> None:
        if self.stuck.is_set():
            self.while_stuck.append(threading.current_thread().name)


class Busy(Action[NoParams]):
    """An action whose apply runs until the test releases it."""

    name: ClassVar[str] = "test.busy"
    applying = threading.Event()
    release = threading.Event()

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Busy.applying.set()
        Busy.release.wait(WAIT)
        return Outcome(ok=True)


def test_a_stuck_loop_gets_no_pings_while_an_action_worker_is_busy(tmp_path: Path) -> None:
    reg = default_registry().copy()
    reg.add_action(Busy)
    rules = write(tmp_path / "rules", "r.toml",
                  RULE.format(name="r").replace('use = "log"', 'use = "test.busy"')).parent
    stuck, unstick, finished = threading.Event(), threading.Event(), threading.Event()
    pings = Pings(stuck)
    # act_deadline 0: the loop moves on at once, the action's worker goes on running
    d = Daemon(ServiceOptions(rules=[str(rules)], interval=0.0, metrics_port=None,
                              act_deadline=0.0, require_root_owned_rules=False),
               Config(), registry=reg, notifier=pings)
    assert d.start() == 0
    ticks = 0
    real_tick = d.tick

    def tick() -> list[Executed]:
        nonlocal ticks
        ticks += 1
        if ticks == 1:
            return real_tick()  # fires the rule: its action's worker starts and blocks
        if ticks == 2:  # the loop hangs here
            stuck.set()
            unstick.wait(WAIT)
            stuck.clear()
        return []

    def done(ex: Executed) -> None:
        if ex.use == "test.busy":
            finished.set()

    d.tick = tick  # type: ignore[method-assign]
    assert d.transaction is not None
    d.transaction.executor.on_result.append(done)
    loop = threading.Thread(target=d.loop, name="loop", daemon=True)
    loop.start()
    try:
        assert stuck.wait(WAIT) and Busy.applying.wait(WAIT)
        Busy.release.set()  # the worker ends its wait on apply, and its action
        assert finished.wait(WAIT)
        assert pings.while_stuck == [], "a hung loop was pinged for by " + \
            ", ".join(sorted(set(pings.while_stuck)))
    finally:
        Busy.release.set()
        d.request_stop()
        unstick.set()
        loop.join(WAIT)
        d.shutdown()
