"""What `guardian signals` and `guardian run --once` print for people (issue 40): numbers
rounded to what they mean, columns as wide as their content, a family's members under it,
evidence that shows the values compared, unknown rules grouped by cause, colour only on a
terminal that wants it. Over a point of tests/data/chain.rec, each is a golden file."""

from __future__ import annotations

import io
import logging
import re

import pytest

from guardian.cli import CommandFormatter, _said_by_the_command, run, signals
from guardian.cli.table import columns, wants_colour, wrap
from guardian.core.evidence import amount, members_text
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import once
from guardian.runtime.config import Config
from guardian.runtime.executor import Executor
from guardian.runtime.recording import read
from guardian.runtime.status import tally
from guardian.testing import family
from tests.support.checkout import DATA, FIXTURES, REPO, RULES
from tests.support.golden import matches_golden
from tests.support.recorded import RecordedCollector

CHAIN = DATA / "chain.rec"
GOLDEN = DATA / "golden"
ROOT = FIXTURES / "hybrid"  # where the actions plan: fixed files, not this machine's
AT = 375.0  # +6m15s: dying-memcgs and the crash loop hold, a core is saturated
RAW = re.compile(r"\d\.\d{3,}")  # 1.1428571428571428, 58.58585858585859: not for people


def _pass(at: float = AT, dry_run: bool = True, colour: bool = False,
          room: int | None = None) -> tuple[Ruleset, once.Pass, list[str]]:
    rec = read(CHAIN)
    reg = default_registry()
    rules = load_rules([RULES], catalogue={**reg.catalogue(), **rec.catalogue})
    coll = RecordedCollector(rec, at, reg, ROOT)
    engine = once.engine_for(rules, Config(), None, ROOT / "no-state.json")
    done = once.run_once(rules, coll, engine, Executor(coll.host, dry_run=dry_run),
                         warmup=0, state_path=None)
    counts = tally((r.rule, r.condition, r.phase, r.blind, r.results) for r in done.rules)
    lines = list(run.report_lines(rules, engine, done, {**reg.catalogue(), **rec.catalogue},
                                  dry_run=dry_run, summary=counts.line(dry_run),
                                  blind=counts.blind, colour=colour, room=room))
    return rules, done, [line.replace(f"{ROOT}/", "/") for line in lines]


def test_run_once_at_6m15s_of_the_chain_is_the_golden_file() -> None:
    """Before: a 28-wide name column that two shipped names overflow,
    `cpu.core.sys_pct={} matched={}` for a rule that does not hold, no colour, and an
    UNKNOWN block per DCGM rule repeating what the blind line says."""
    rules, _, lines = _pass()
    matches_golden(GOLDEN / "run-once-chain-6m15s.txt", "\n".join(lines) + "\n")
    longest = max(len(r.name) for r in rules.rules)
    assert longest == len("nic-linklocal-allowance-exceeded")
    for r in rules.rules:  # every name in one column, two blanks after the longest
        line = next(x for x in lines if x[9:].startswith(r.name + " "))
        assert line[9 + longest:9 + longest + 2] == "  " and line[11 + longest] != " ", line
    assert not any("={}" in line or "matched=" in line or RAW.search(line) for line in lines)
    saturated = next(line for line in lines if " core-system-saturated " in line)
    assert saturated.startswith("PENDING") and saturated.endswith("cpu.core.sys_pct: cpu=1 98.2%")
    dcgm = [line for line in lines if "gpu-dcgm" in line]
    assert all(line.endswith("blind: source exposition unavailable (see below)")
               for line in dcgm[:8])
    assert lines[-1] == "81 rules: 42 ok, 4 pending, 35 unknown; nothing to do"
    blind = [line for line in lines if line.startswith("blind (no value): ")]
    assert len(blind) == 8 and blind[1].endswith("(source exposition unavailable: not in "
                                                 "the recording)")


def test_a_false_condition_shows_the_values_it_compared_largest_first() -> None:
    """At the start of the chain no core is saturated: the cores' values, not `{}`."""
    lines = _pass(at=10.0)[2]
    line = next(x for x in lines if " core-system-saturated " in x)
    assert re.fullmatch(r"ok +core-system-saturated +cpu\.core\.sys_pct: cpu=\d [\d.]+%, "
                        r"cpu=\d [\d.]+%", line), line
    kernel = next(x for x in lines if " kernel-oops " in x)
    assert 'increase(kmsg.matches{pattern=…}, "1h"): kernel_oops ' in kernel


def test_signals_at_6m15s_of_the_chain_is_the_golden_file() -> None:
    """Before: `memcg.dying_ratio 1.1428571428571428`, `{cpu="0"}=58.58585858585859`,
    counters as `7292.0`, no header, columns moving on every family line, 800-character
    lines, and no value blank for some signals and `-` for others."""
    rec = read(CHAIN)
    coll = RecordedCollector(rec, AT, default_registry(), ROOT)
    rows = signals.signal_rows(default_registry(), coll.snapshot.values,
                               {**coll.snapshot.errors, **coll.unavailable})
    lines = signals.table(rows)
    matches_golden(GOLDEN / "signals-chain-6m15s.txt", "\n".join(lines) + "\n")
    assert lines[0].split() == ["SIGNAL", "VALUE", "UNIT", "SOURCE", "HELP"]
    assert not any(RAW.search(line.split("  ")[0] + line[36:60]) for line in lines[1:])
    value_end = lines[0].index("VALUE") + len("VALUE")
    for line in lines[1:]:
        if not line.startswith(" "):  # a signal's row: its value ends under VALUE
            assert line[value_end] == " " and line[value_end - 1] != " ", line
    # a member's value under VALUE too, however long its labels (before: nic.stat's and
    # processes.top_system_cpu_pct's ended at column 67), its labels as run --once,
    # replay and why say them (`cpu=0`, before `cpu="0"`)
    for line, after in zip(lines[1:], [*lines[2:], ""], strict=True):
        if line.startswith("  ") and not line.startswith("  …"):  # or labels cut: more
            assert len(line) == value_end or after.startswith("    "), line
    cores = lines.index(next(x for x in lines if x.startswith("cpu.core.sys_pct ")))
    assert lines[cores + 1].split() == ["cpu=0", "44.1"]
    units = next(i for i, x in enumerate(lines) if x.startswith("systemd.unit_restarts "))
    assert lines[units + 1].startswith("  ecs.service ")  # the largest first
    assert lines[units + 9].strip() == "… 58 more (all 0)"


def test_no_value_is_one_form() -> None:
    rows: list[dict[str, object]] = [
        {"name": "a.b", "source": "s", "unit": "", "help": "h", "value": None},
        {"name": "a.c", "source": "s", "unit": "", "help": "h", "value": {}},
        {"name": "a.d", "source": "s", "unit": "percent", "help": "h", "value": 58.5858}]
    lines = signals.table(rows)
    assert [line.split()[1] for line in lines[1:]] == ["-", "-", "58.6"]


def test_help_wraps_in_its_column_on_a_terminal_and_goes_under_a_narrow_one() -> None:
    rows = [{"name": "a.b", "source": "src", "unit": "u", "value": 1,
             "help": "one two three four five six seven eight nine ten eleven twelve"}]
    wide = signals.table(rows, room=70)
    start = wide[1].index("one")
    assert len(wide) > 2 and all(x.startswith(" " * start) and x[start] != " "
                                 for x in wide[2:])
    assert all(len(x) <= 70 for x in wide)
    narrow = signals.table(rows, room=30)
    assert narrow[1] == "    HELP" and narrow[3].startswith("    one")
    assert all(len(x) <= 30 for x in narrow)
    assert signals.table(rows)[1].endswith("eleven twelve")  # a pipe: one line, for grep


def test_on_a_terminal_what_a_rule_compared_wraps_under_itself_at_list_commas() -> None:
    lines = _pass(room=110)[2]
    at = next(i for i, x in enumerate(lines) if " kernel-oops " in x)
    start = lines[at].index("increase(")
    assert all(len(x) <= 110 for x in lines[at:at + 2])
    assert lines[at].endswith(",") and lines[at + 1].startswith(" " * start) and \
        re.fullmatch(r" +\w+ (no member|\d+)(, \w+ (no member|\d+))*,?", lines[at + 1]), \
        lines[at:at + 2]


def test_columns_are_as_wide_as_their_widest_cell() -> None:
    assert columns([["a", "1"], ["bbbb", "22"]], right={1}) == ["a      1", "bbbb  22"]
    assert wrap("aa bb cc", 5) == ["aa bb", "cc"] and wrap("aa bb", None) == ["aa bb"]


def test_members_are_said_in_a_few_words_the_largest_first() -> None:
    cpus = family("cpu", {"0": 1.0, "1": 97.2, "2": 3.0, "10": 2.0, "11": 0.0})
    assert members_text(cpus, "percent", limit=3) == \
        "cpu=1 97.2%, cpu=2 3%, cpu=10 2%, …and 2 more"
    assert members_text(family("unit", {"ecs.service": 711}), "restarts") == \
        "ecs.service 711 restarts"
    assert amount(None) == "no value" and members_text({}) == "no member"
    assert amount(7292.0) == "7292"
    assert members_text(family("message", {"disk, sick": 1})) == 'message="disk, sick" 1'

def test_colour_only_on_a_terminal_without_no_color() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_colour(Tty(), {}) is True
    assert wants_colour(Tty(), {"NO_COLOR": "1"}) is False
    assert wants_colour(Tty(), {"NO_COLOR": ""}) is True  # no-color.org: non-empty only
    assert wants_colour(Tty(), {"TERM": "dumb"}) is False
    assert wants_colour(io.StringIO(), {}) is False  # a pipe or a file


def test_status_words_are_coloured_when_asked() -> None:
    _, _, lines = _pass(colour=True)
    assert any(x.startswith("\x1b[33mPENDING\x1b[0m  dying-memcgs ") for x in lines)
    assert any(x.startswith("\x1b[35mUNKNOWN\x1b[0m  gpu-dcgm-") for x in lines)
    assert any(x.startswith("\x1b[32mok\x1b[0m       kernel-oops ") for x in lines)
    assert any(x.startswith("\x1b[35mblind (no value):\x1b[0m gpu-dcgm-") for x in lines)
    assert not any("\x1b" in x for x in _pass()[2])


@pytest.mark.parametrize("verbose", [False, True])
def test_a_commands_log_lines_have_no_time_and_no_logger(verbose: bool) -> None:
    record = logging.LogRecord("guardian.holds", logging.WARNING, __file__, 1,
                               "hold from %s ended", ("x",), None)
    line = CommandFormatter(names=verbose).format(record)
    assert line == ("guardian: warning: guardian.holds: hold from x ended" if verbose else
                    "guardian: warning: hold from x ended")
    done = logging.LogRecord("guardian.executor", logging.WARNING, __file__, 1,
                             "rule %s: %s", ("r", "log ok"), None)
    late = logging.LogRecord("guardian.executor", logging.WARNING, __file__, 1,
                             "rule %s: action %s finished after its timeout: %s",
                             ("r", "log", "ok"), None)
    assert not _said_by_the_command(done) and _said_by_the_command(late)


def test_the_docs_give_the_command_that_writes_the_golden_files_anew() -> None:
    text = (REPO / "docs" / "testing.md").read_text()
    assert "GUARDIAN_GOLDEN_UPDATE=1 python -m pytest tests -k golden_file" in text
