"""A script check that did not answer (its program missing, its run timed out, no run
finished yet) is no value, never "ok": the families it would have fed have no value and
the source's fault says why, so `guardian run --once` reports its rules UNKNOWN. Runs are
fed to the source by hand (no program is started here; running them for real:
tests/system/test_script_source.py)."""

from __future__ import annotations

from pathlib import Path

from guardian.core.snapshot import Snapshot, labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.hostio.programs import Ran
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.script import ScriptConfig, ScriptSource

# the rules `guardian import npd --log-only` writes for a custom-plugin monitor's temporary
# and permanent rules (policy/npd.py), over two checks of one monitor
RULES = """
version = 1

[[rule]]
name = "npd-mon-gone-temporary-0"
summary = "GoneIsDown: event from missing.sh"
when = 'script.result{check="mon.missing"} >= 1'
  [[rule.action]]
  use = "log"
  message = "GoneIsDown: $values"

[[rule]]
name = "npd-mon-gone-permanent-1"
summary = "GoneIsDown: node condition GoneProblem from missing.sh"
when = 'script.problem{check="mon.missing"} == 1'
  [[rule.action]]
  use = "log"
  message = "GoneIsDown: $values"

[[rule]]
name = "npd-mon-ntp-permanent-2"
summary = "NTPIsDown: node condition NTPProblem from check_ntp.sh"
when = 'script.problem{check="mon.ntp"} == 1'
  [[rule.action]]
  use = "log"
  message = "NTPIsDown: $values"
"""

MISSING = "/opt/npd/config/plugin/missing.sh"
# what run_bounded says when the program cannot start (hostio/programs.py);
# node-problem-detector's plugin.go: cmd.Start() failed -> Unknown, "Error in starting
# plugin. Please check the error log"
CANNOT_START = Ran(None, b"", b"", 0.001,
                   error=f"cannot run {MISSING}: No such file or directory")
# NPD's protocol (plugin.go): exit 0 OK, 1 NonOK, anything else Unknown
OK_RUN = Ran(0, b"ntp is up\n", b"", 0.01)


def _setup(tmp_path: Path) -> tuple[ScriptSource, Collector, Engine]:
    src = ScriptSource(Host(), ScriptConfig.model_validate({"checks": {
        "mon.missing": {"argv": [MISSING], "timeout": "3s"},
        "mon.ntp": {"argv": ["/opt/npd/config/plugin/check_ntp.sh"]}}}))
    src.close()  # no workers: the test feeds each run as a worker would
    (tmp_path / "npd-mon.toml").write_text(RULES)
    return src, Collector(Host(), [src]), Engine(load_rules([tmp_path / "npd-mon.toml"]))


def _report(engine: Engine, snap: Snapshot) -> dict[str, tuple[str, list[str]]]:
    """Each rule's condition as `guardian run --once` reports it (runtime/once.py): holds,
    ok or unknown, and the signals that have no value."""
    out = {}
    for rule in engine.ruleset.rules:
        result = rule.condition.fn(snap.values, engine.history)
        out[rule.name] = ("unknown" if result is None else "holds" if result else "ok",
                          [r.key for r in rule.condition.refs if r.value(snap.values) is None])
    return out


def test_a_check_whose_program_is_missing_is_no_value_with_why(tmp_path: Path) -> None:
    src, collector, engine = _setup(tmp_path)
    src.record("mon.ntp", OK_RUN)
    src.record("mon.missing", CANNOT_START)
    snap = collector.collect(0.0)
    # before: script.result{check="mon.missing"} was {} and the rule read "ok"
    for name in ("script.status", "script.problem", "script.result"):
        assert name not in snap.values, name
    assert snap.errors["script"] == \
        f"check mon.missing: cannot run {MISSING}: No such file or directory"
    assert collector.error_counts["script"] == 1
    report = _report(engine, snap)
    assert report["npd-mon-gone-temporary-0"] == ("unknown",
                                                  ['script.result{check="mon.missing"}'])
    assert report["npd-mon-gone-permanent-1"] == ("unknown",
                                                  ['script.problem{check="mon.missing"}'])
    # one family per signal: a check that did not answer leaves the others' rules
    # unknown too (docs/signals.md), never "ok" on a family missing that check
    assert report["npd-mon-ntp-permanent-2"][0] == "unknown"
    # when and how often it ran stand: a rule can watch the check itself
    assert snap.values["script.errors"] == {
        labels_of({"check": "mon.missing", "reason": "start"}): 1.0}
    assert set(snap.values["script.age_seconds"]) == {  # type: ignore[arg-type]
        labels_of({"check": "mon.missing"}), labels_of({"check": "mon.ntp"})}
    # the program installed: it answers, and every rule reads its check again
    src.record("mon.missing", Ran(0, b"", b"", 0.01))
    snap = collector.collect(15.0)
    assert "script" not in snap.errors
    assert {name: cond for name, (cond, _) in _report(engine, snap).items()} == {
        "npd-mon-gone-temporary-0": "ok", "npd-mon-gone-permanent-1": "ok",
        "npd-mon-ntp-permanent-2": "ok"}


def test_a_check_that_timed_out_is_no_value(tmp_path: Path) -> None:
    # node-problem-detector's plugin.go: a run past its timeout is Unknown ("Timeout when
    # running plugin"), no evidence either way
    src, collector, engine = _setup(tmp_path)
    src.record("mon.ntp", OK_RUN)
    src.record("mon.missing", Ran(None, b"", b"", 3.0, error="timed out after 3s",
                                  timed_out=True))
    snap = collector.collect(0.0)
    assert "script.problem" not in snap.values
    assert snap.errors["script"] == "check mon.missing: timed out after 3s"
    assert _report(engine, snap)["npd-mon-gone-permanent-1"][0] == "unknown"


def test_a_check_that_has_not_run_yet_is_no_value(tmp_path: Path) -> None:
    """Before a check's first run ends (it takes longer than `run --once`'s warm-up, or
    the service's first tick comes first) there is nothing to read: no value, and no
    fault (nothing failed)."""
    src, collector, engine = _setup(tmp_path)
    src.record("mon.ntp", OK_RUN)
    snap = collector.collect(0.0)
    assert "script.result" not in snap.values
    assert "script" not in snap.errors
    assert _report(engine, snap)["npd-mon-gone-temporary-0"][0] == "unknown"


def test_a_check_that_answers_unknown_answered(tmp_path: Path) -> None:
    """Exit 2 is node-problem-detector's Unknown, said by the check itself: script.status
    and script.result are 2 (the temporary rule emits its event, as NPD's for
    ExitStatus >= NonOK), script.problem has no member for it, and the other checks'
    rules stand (unchanged)."""
    src, collector, engine = _setup(tmp_path)
    src.record("mon.ntp", Ran(1, b"ntp is down\n", b"", 0.01))
    src.record("mon.missing", Ran(2, b"cannot tell\n", b"", 0.01))
    snap = collector.collect(0.0)
    assert snap.values["script.status"] == {labels_of({"check": "mon.missing"}): 2.0,
                                            labels_of({"check": "mon.ntp"}): 1.0}
    assert snap.values["script.problem"] == {
        labels_of({"check": "mon.ntp", "message": "ntp is down"}): 1.0}
    assert "script" not in snap.errors
    assert {name: cond for name, (cond, _) in _report(engine, snap).items()} == {
        "npd-mon-gone-temporary-0": "holds", "npd-mon-gone-permanent-1": "ok",
        "npd-mon-ntp-permanent-2": "holds"}


def test_with_no_check_configured_the_source_is_unavailable_and_says_why() -> None:
    """Before: the source ran with no checks, and `script-check-problem` read `ok` over an
    empty script.problem: nothing was checked."""
    assert ScriptSource(Host()).unconfigured() == "no checks in [sources.script]"
    assert ScriptSource(Host()).unavailable() == "no checks in [sources.script]"
