"""guardian.runtime.evidence: what a condition compared, operand by operand, for people
(`run --once`'s evidence): the value of each comparison's sides now, not the counter a
time function reads, and for a comparison that holds on a family, the members that made
it hold."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

import pytest

from guardian import Engine, default_registry, load_text
from guardian.core.snapshot import SignalSpec
from guardian.policy.expr import compile_subexpression
from guardian.runtime import evidence
from guardian.runtime.evidence import operands
from guardian.testing import family, snapshot


def _operands(when: str, values: Mapping[str, object],
              before: Mapping[str, object] | None = None
              ) -> list[tuple[str, object, str, bool]]:
    rules = load_text(f'version = 1\n[[rule]]\nname = "r"\nsummary = "s"\nwhen = \'{when}\'\n')
    engine = Engine(rules)
    if before is not None:
        engine.evaluate(snapshot(0.0, before))
    snap = snapshot(60.0, values)
    engine.evaluate(snap)
    return [(o.text, o.value, o.unit, o.holds) for o in
            operands(rules.rules[0], default_registry().catalogue(), snap.values,
                     engine.history)]


def test_a_comparison_that_holds_keeps_the_members_that_made_it() -> None:
    cores = family("cpu", {"0": 97.0, "1": 3.0})
    got = _operands("cpu.core.sys_pct >= 90 or processes.zombies >= 5000",
                    {"cpu.core.sys_pct": cores, "processes.zombies": 2.0})
    assert got == [("cpu.core.sys_pct", family("cpu", {"0": 97.0}), "percent", True),
                   ("processes.zombies", 2.0, "processes", False)]


def test_a_comparison_that_does_not_hold_shows_every_member_compared() -> None:
    cores = family("cpu", {"0": 40.0, "1": 3.0})
    got = _operands("cpu.core.sys_pct >= 90", {"cpu.core.sys_pct": cores})
    assert got == [("cpu.core.sys_pct", cores, "percent", False)]  # not `{}`


def test_a_time_function_is_shown_with_its_value_not_the_counter_it_reads() -> None:
    before = {"kmsg.matches": family("pattern", {"hung_task": 7290.0})}
    now = {"kmsg.matches": family("pattern", {"hung_task": 7292.0})}
    [(text, value, unit, holds)] = _operands(
        'increase(kmsg.matches{pattern="hung_task"}, "10m") > 0', now, before)
    assert text == 'increase(kmsg.matches{pattern="hung_task"}, "10m")' and holds
    assert value == family("pattern", {"hung_task": 2.0}) and unit == "lines"


def test_both_sides_of_a_comparison_and_no_constant() -> None:
    got = _operands("memcg.dying > 10000 and memcg.dying > 20 * memcg.live",
                    {"memcg.dying": 47.0, "memcg.live": 6.0})
    assert [(t, v) for t, v, _, _ in got] == [("memcg.dying", 47.0),
                                              ("20 * memcg.live", 120.0)]


def test_under_not_a_part_holds_when_it_is_false() -> None:
    got = _operands("not (processes.zombies > 10)", {"processes.zombies": 2.0})
    assert got == [("processes.zombies", 2.0, "processes", True)]


def test_a_condition_is_compiled_once_not_at_every_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `why.links` (every tick of the service) compiled each part and operand of
    every firing rule's condition again: 1.5 ms a tick with six rules firing."""
    compiled: list[object] = []
    real = compile_subexpression

    def counted(node: ast.AST, catalogue: Mapping[str, SignalSpec]) -> Any:
        compiled.append(node)
        return real(node, catalogue)

    monkeypatch.setattr(evidence, "compile_subexpression", counted)
    rules = load_text('version = 1\n[[rule]]\nname = "r"\nsummary = "s"\n'
                      "when = 'memcg.dying > 10000 and memcg.dying > 20 * memcg.live'\n")
    engine = Engine(rules)
    said = []
    for t, live in ((60.0, 6.0), (61.0, 7.0)):  # two ticks, as the service asks
        snap = snapshot(t, {"memcg.dying": 47.0, "memcg.live": live})
        engine.evaluate(snap)
        said.append([(o.text, o.value) for o in operands(
            rules.rules[0], engine.ruleset.signals, snap.values, engine.history)])
        if t == 60.0:
            after_first = len(compiled)
    assert after_first > 0 and len(compiled) == after_first  # the second tick compiled none
    assert said == [[("memcg.dying", 47.0), ("20 * memcg.live", 120.0)],
                    [("memcg.dying", 47.0), ("20 * memcg.live", 140.0)]]
