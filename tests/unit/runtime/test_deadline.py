"""The one deadline runner (issue 39): a call in a worker thread, waited on up to a deadline,
``tick`` between bounded waits on the waiting thread only, no second call beside one still
running, a late result handed over when it arrives. No sleeps: events."""

from __future__ import annotations

import threading

import pytest

from guardian.runtime.deadline import DeadlineRunner, Ran

WAIT = 10.0  # what a test waits for an event at most; never reached when it passes


def test_done_returns_the_value() -> None:
    ran = DeadlineRunner[int]("t").run(lambda: 7, WAIT)
    assert ran.status == "done" and ran.value == 7


def test_crashed_is_reported_as_what_it_is() -> None:
    def boom() -> int:
        raise ValueError("no")

    ran = DeadlineRunner[int]("t").run(boom, WAIT)
    assert ran.status == "crashed" and isinstance(ran.error, ValueError)


def test_an_overrun_blocks_a_second_call_until_it_ends_and_hands_over_its_late_result(
        ) -> None:
    release, arrived = threading.Event(), threading.Event()
    late: list[Ran[str]] = []
    runner = DeadlineRunner[str]("t")

    def slow() -> str:
        release.wait(WAIT)
        return "at last"

    def on_late(ran: Ran[str]) -> None:
        late.append(ran)
        arrived.set()

    assert runner.run(slow, 0.0, late=on_late).status == "overran"
    assert runner.is_alive()
    second: list[int] = []

    def again() -> str:
        second.append(1)
        return "x"

    assert runner.run(again, WAIT).status == "busy"
    release.set()
    assert arrived.wait(WAIT)
    assert [r.value for r in late] == ["at last"] and not second
    # free once its result is handed over (before: the worker thread's last moments still
    # counted as running, and a next call right then was refused as busy)
    assert not runner.is_alive()
    assert runner.run(lambda: "again", WAIT).value == "again"


def test_tick_runs_on_the_waiting_thread_between_waits_and_never_on_the_worker() -> None:
    ticks: list[threading.Thread] = []
    enough = threading.Event()

    def tick() -> None:
        ticks.append(threading.current_thread())
        if len(ticks) == 3:
            enough.set()

    def work() -> str:
        enough.wait(WAIT)  # the worker ends only once the waiter has ticked three times
        return "ok"

    ran = DeadlineRunner[str]("t").run(work, WAIT, tick=tick, step=0.001)
    assert ran.status == "done" and len(ticks) >= 3
    assert set(ticks) == {threading.current_thread()}


def test_stop_ends_the_wait() -> None:
    release = threading.Event()
    ran = DeadlineRunner[bool]("t").run(lambda: release.wait(WAIT), WAIT, tick=lambda: None,
                                        stop=lambda: True)
    assert ran.status == "stopped"
    release.set()


def test_no_thread_to_be_had_is_unstarted(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    ran = DeadlineRunner[int]("t").run(lambda: 1, WAIT)
    monkeypatch.undo()
    assert ran.status == "unstarted" and "can't start" in str(ran.error)


def test_a_call_that_returned_never_makes_the_next_one_busy() -> None:
    """Before: is_alive() asked the worker thread, which lives on for a moment after it
    hands its result over; an action applied twice in a row was then refused ("the
    previous run of this action is still going"), as a loaded CI machine showed."""
    runner = DeadlineRunner[int]("t")
    for i in range(200):
        ran = runner.run(lambda: i, WAIT)  # noqa: B023
        assert ran.status == "done" and ran.value == i
        assert not runner.is_alive()
