"""One tick of the service as one transaction (issue 39): the engine's evaluation proposes,
the proposal is made durable (the state file, then the audit log as the executor writes
it), its decisions are carried out off the loop, and the engine takes the proposal only
then; otherwise it is dropped whole and the engine decides (and acts) again at a later
tick. Whatever cannot be made durable did not happen: nothing is applied without it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from guardian.core.audit import ActCrashRecord
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine, Operating, Proposal
from guardian.engine.lifecycle import RuleState
from guardian.runtime import state as state_file
from guardian.runtime.deadline import DeadlineRunner
from guardian.runtime.executor import Executed, Executor

log = logging.getLogger("guardian.service")

@dataclass
class Decided:
    """What a tick decided, told once its proposal is durable and before anything is
    acted on: the rules' states as the evaluation left them (whatever becomes of its
    proposal) and the decisions to act on (none when the tick was dropped)."""

    snapshot: Snapshot
    states: Mapping[str, RuleState]
    decisions: list[Decision]


@dataclass
class TickResult:
    decisions: list[Decision]  # what the tick acted on: none when it was dropped
    results: list[Executed]  # what came of them


def restore(engine: Engine, state_path: Path | None) -> None:
    """Put back what the state file holds of the engine's rules."""
    if state_path is None:
        return
    restored = state_file.load(engine, state_path)
    if restored:
        log.info("restored state of %d rule(s) from %s", len(restored), state_path)


class TickTransaction:
    """The engine, the executor that carries out its decisions, the state file and the
    worker that acts. ``lock`` says why this process does not hold its state directory's
    lock ("" when it does), taking it if it can; ``lock_fault`` is why a start could not.
    ``ping`` is called while the loop waits on the actions, and ``stopping`` ends that
    wait."""

    def __init__(self, engine: Engine, executor: Executor, state_path: Path | None, *,
                 act_deadline: float, lock: Callable[[], str] | None = None,
                 lock_fault: str = "", ping: Callable[[], None] | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.engine = engine
        self.executor = executor
        self.state_path = state_path
        self.act_deadline = act_deadline
        self.lock = lock
        self.ping = ping
        self.stopping = stopping
        self.state_fault = ""  # why the state cannot be saved now
        self.lock_fault = lock_fault  # why the state directory's lock is not held
        self.proposed: Proposal | None = None  # the tick's durable proposal, while acting
        # the worker carrying out decisions
        self.acting: DeadlineRunner[list[Executed]] = DeadlineRunner("guardian-act")
        self.act_fault = ""  # why no worker could be started to act

    def tick(self, snap: Snapshot, op: Operating,
             decided: Callable[[Decided], None] = lambda _: None) -> TickResult:
        """Evaluate ``snap`` under ``op``, act on what it decides once it is durable, and
        commit the proposal or drop it whole."""
        evaluation = self.engine.propose(snap, holds=op.holds, wall=op.wall,
                                         window=op.window, approvals=op.approvals)
        decisions = evaluation.decisions
        proposal: Proposal | None = evaluation.proposal
        # what this evaluation left the rules as, whatever becomes of its proposal
        states = {**self.engine.states, **evaluation.proposal.states}
        if decisions and self.acting.is_alive():
            # the previous tick's actions are still waiting on the outside world: none
            # start beside them, and nothing is decided until they are done
            proposal, decisions = None, []
        elif decisions and not self._persist(evaluation.proposal):
            # Fail closed: what cannot be made durable did not happen
            proposal, decisions = None, []
        elif not decisions:
            self.engine.commit(evaluation.proposal)  # nothing decided: nothing to keep
            proposal = None
        self.proposed = proposal  # what the status says until it is committed
        decided(Decided(snap, states, decisions))
        results = self._act(decisions, snap) if decisions else self.executor.run([], snap)
        self.proposed = None
        if proposal is not None:
            self._settle(proposal, results)
        return TickResult(decisions, results or [])

    def firing(self) -> list[str]:
        """The rules firing, as the proposal being acted on leaves them."""
        return self.engine.firing(self.proposed)

    def _settle(self, proposal: Proposal, results: list[Executed] | None) -> None:
        """Commit a durable tick's proposal once its decisions were carried out, or drop
        it when they never reached the audit log and nothing was applied (no worker could
        be started, or the audit log could not be written): not decided, so decided again
        later, and the state file is put back to the engine's."""
        unapplied = results is None or (
            bool(self.executor.audit_fault) and not self.acting.is_alive()
            and not any(ex.outcome is not None for ex in results))
        if unapplied:
            self._persist()
            return
        self.engine.commit(proposal)

    def _act(self, decisions: list[Decision], snap: Snapshot) -> list[Executed] | None:
        """Carry out decisions off the loop: planning and the fleet budget talk to an API
        server, which may never answer. The loop waits at most ``act_deadline``, a
        bounded join at a time, pinging the watchdog and honouring SIGTERM between joins;
        the worker is then left to end, and no other starts beside it."""
        executor = self.executor
        ran = self.acting.run(lambda: executor.run(decisions, snap), self.act_deadline,
                              tick=self.ping, stop=self.stopping)
        if ran.status == "unstarted":  # no thread to be had (TasksMax): decide again later
            if not self.act_fault:
                log.error("cannot start a thread to act (a task limit?): %s; nothing is "
                          "acted on until one can be", ran.error)
            self.act_fault = f"cannot start a thread: {ran.error}"
            return None
        self.act_fault = ""
        if ran.status == "done":
            return ran.value
        if ran.status == "crashed" and ran.error is not None:
            error = ran.error
            rules = sorted({d.rule for d in decisions})
            log.error("acting on %s crashed: %r", ", ".join(rules), error,
                      exc_info=(type(error), error, error.__traceback__))
            executor.audit_entry(ActCrashRecord(rules=rules, error=repr(error)))
        elif ran.status == "overran":
            log.error("actions did not finish within %gs (an API that does not answer?); "
                      "the loop goes on, and nothing else acts until they end",
                      self.act_deadline)
        return []

    def _persist(self, proposal: Proposal | None = None) -> bool:
        """Save the engine's state (as ``proposal`` leaves it, when given) before anything
        is acted on; False (the fault logged once and shown in the status and metrics)
        when it cannot be saved, or when the state directory's lock is not held."""
        if self.state_path is None:
            return True
        if not self._locked():
            return False
        try:
            state_file.save(self.engine, self.state_path, proposal=proposal)
        except OSError as exc:
            if not self.state_fault:
                log.error("cannot save state to %s: %s; nothing is acted on until it can",
                          self.state_path, exc)
            self.state_fault = f"state: {exc.strerror or exc}"
            return False
        if self.state_fault:
            log.info("state is saved again; acting resumes")
        self.state_fault = ""
        return True

    def _locked(self) -> bool:
        """Whether this process holds its state directory's lock, taken now if a start
        could not (a read-only or full disk then); the fault is logged once."""
        if self.lock is None:
            return True
        fault = self.lock()
        if fault:
            if fault != self.lock_fault:
                log.error("%s; nothing is acted on until the lock is taken", fault)
            self.lock_fault = fault
            return False
        if self.lock_fault and self.state_path is not None:
            log.info("took the lock on %s", self.state_path.parent)
        self.lock_fault = ""
        return True

    def persistence_fault(self) -> str:
        """Why decisions cannot be made durable now ("" when they can)."""
        lock = f"instance lock: {self.lock_fault}" if self.lock_fault else ""
        return "; ".join(f for f in (lock, self.state_fault, self.executor.audit_fault) if f)

    def save(self) -> None:
        """Save the engine's state as it stands (at a stop), unless the lock is not held:
        another guardian may hold it."""
        if self.state_path is None or self.lock_fault:
            return
        try:
            state_file.save(self.engine, self.state_path)
        except OSError as exc:
            log.error("cannot save state: %s", exc)
