"""Issue 33: script checks in node-problem-detector's custom-plugin protocol, run off the
loop on their own interval, bounded in time, output and concurrency."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.hostio.programs import run_bounded
from guardian.runtime.collector import Collector
from guardian.sources.script import ScriptConfig, ScriptSource
from tests.support.checkout import FIXTURES
from tests.support.wait import BOUND, ends, wait_until

NPD = FIXTURES / "npd"


def source(checks: dict[str, Any], **kw: Any) -> ScriptSource:
    return ScriptSource(Host(Path("/")), ScriptConfig.model_validate({"checks": checks, **kw}))


@pytest.fixture
def sources() -> Iterator[list[ScriptSource]]:
    made: list[ScriptSource] = []
    yield made
    for s in made:
        s.close()


def wait_for(src: ScriptSource, done: Callable[[dict[str, Any]], bool],
             what: str = "the checks' results", timeout: float = BOUND) -> dict[str, Any]:
    """A collection of ``src`` once ``done`` says it holds what was awaited."""
    def collected() -> dict[str, Any] | None:
        out = src.collect(time.monotonic())
        return out if done(out) else None

    return wait_until(collected, what, timeout)


def script(tmp: Path, name: str, body: str) -> str:
    p = tmp / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def check(name: str) -> tuple[tuple[str, str], ...]:
    return labels_of({"check": name})


# node-problem-detector's TestNewPluginRun (pkg/custompluginmonitor/plugin/plugin_test.go),
# its test-data scripts, a 1 s timeout, max_output_length 80: (status, message). Timeouts
# and a program that cannot start are Unknown there with a message of NPD's own; here they
# have no value and count as errors (a failed run is no evidence either way).
NPD_CASES = {
    "ok": (0, "OK"),
    "non-ok": (1, "NonOK"),
    "unknown": (2, "UNKNOWN"),  # exit 3
    "non-defined-exit-status": (2, "NON-DEFINED-EXIT-STATUS"),  # exit 100
    "longer-than-80-stdout-with-ok-exit-status":
        (0, "01234567890123456789012345678901234567890123456789012345678901234567890123456789"),
    "non-executable": (None, "start"),
    "sleep-3-second-with-ok-exit-status": (None, "timeout"),
}


def test_node_problem_detectors_own_plugin_tests(sources: list[ScriptSource]) -> None:
    def npd_checks(names: list[str]) -> dict[str, Any]:
        return {name: {"argv": [str(NPD / "test-data" / f"{name}.sh")], "timeout": "1s"}
                for name in names}

    src = source(npd_checks(list(NPD_CASES)))
    sources.append(src)
    # every check ended, the one that sleeps 3 s cut at its 1 s timeout (counted below)
    out = wait_for(src, lambda o: len(o["script.duration_seconds"]) == len(NPD_CASES))
    # two checks did not answer: the families they feed have no value (never a partial
    # family that reads "no problem" for them), and each is an error with why
    for name in ("script.status", "script.problem", "script.result"):
        assert out[name] is None, name
    for name, (status, reason) in NPD_CASES.items():
        if status is None:
            assert out["script.errors"][labels_of({"check": name, "reason": reason})] == 1
    assert len(src.faults()) == 2
    answered = [name for name, (status, _) in NPD_CASES.items() if status is not None]
    src = source(npd_checks(answered))
    sources.append(src)
    out = wait_for(src, lambda o: len(o["script.result"] or {}) == len(answered))
    result = {dict(k)["check"]: (v, dict(k)["message"]) for k, v in out["script.result"].items()}
    for name in answered:
        status, message = NPD_CASES[name]
        assert result[name] == (status, message), name
        assert out["script.status"][check(name)] == status
        # a problem is exit 1 only; Unknown is no value, never a problem
        said = labels_of({"check": name, "message": message})
        assert out["script.problem"].get(said) == (
            None if status == 2 else float(status == 1))
    assert src.faults() == []


def test_the_loop_never_waits_for_a_check(tmp_path: Path, sources: list[ScriptSource]) -> None:
    """A hanging check, one that floods stdout and one that forks children which keep its
    pipe open: each run is cut at its timeout, and nothing of theirs is left running;
    collect() returns throughout, while a check of its own pool hangs longer than the
    test waits."""
    marker = f"guardian-test-{os.getpid()}-{time.monotonic_ns()}"
    checks = {
        "hang": {"argv": [script(tmp_path, "hang", "exec sleep 60\n")], "timeout": "1s"},
        "flood": {"argv": [script(tmp_path, "flood", "exec yes flood\n")], "timeout": "1s"},
        # a bounded fork bomb (200 children holding stdout, each a shell waiting)
        "children": {"argv": [script(tmp_path, "children",
                                     "i=0; while [ $i -lt 200 ]; do GUARDIAN_TEST_MARK="
                                     f"{marker} sleep 60 & i=$((i+1)); done; wait\n")],
                     "timeout": "1.5s"},
        "fine": {"argv": ["/bin/true"]},
        # in flight (a minute) for as long as the test waits: a collection that waited
        # on a check would not return within the bound
        "held": {"argv": ["/bin/sleep", "60"], "timeout": "2m", "pool": "held"},
    }
    src = source(checks, pools={"held": {"concurrency": 1}})
    sources.append(src)
    timeouts = [labels_of({"check": n, "reason": "timeout"}) for n in ("hang", "flood",
                                                                        "children")]

    def cut() -> dict[str, Any] | None:
        out: dict[str, Any] = ends(lambda: src.collect(time.monotonic()),
                                   "a collection while checks hang")
        return out if all(k in out["script.errors"] for k in timeouts) else None

    out = wait_until(cut, "each hanging check cut at its timeout")
    for k in timeouts:
        assert out["script.errors"][k] == 1
    assert out["script.status"] is None  # four checks have not answered: no value
    assert check("fine") in out["script.duration_seconds"]  # it ran, and was not held
    assert check("held") not in out["script.duration_seconds"]  # still in flight

    def left() -> list[str]:
        return [p for p in os.listdir("/proc") if p.isdigit() and _environ_has(p, marker)]

    wait_until(lambda: not left(), "the forked children killed with their check")


def _environ_has(pid: str, text: str) -> bool:
    try:
        return text.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def test_a_flood_is_read_to_its_end_and_the_exit_status_decides(
        sources: list[ScriptSource]) -> None:
    # node-problem-detector reads a plugin's whole output and drops what is past its
    # buffer (plugin.go run(): io.Copy to io.Discard), so the exit status decides
    ran = run_bounded(["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; exit 1"],
                      timeout=5, keep=4096)
    assert (ran.status, len(ran.stdout), ran.timed_out) == (1, 4096, False)
    src = source({"flood": {"argv": ["/bin/sh", "-c",
                                     "head -c 3000000 /dev/zero | tr '\\0' x; exit 1"]}})
    sources.append(src)
    out = wait_for(src, lambda o: bool(o["script.status"]))
    assert out["script.status"] == {check("flood"): 1.0}
    ((said, value),) = out["script.problem"].items()
    assert value == 1.0 and dict(said)["message"] == "x" * 80


def test_checks_run_on_their_own_interval_and_never_twice_at_once(
        tmp_path: Path, sources: list[ScriptSource]) -> None:
    log = tmp_path / "runs"
    slow = script(tmp_path, "slow", f"echo start >> {log}; sleep 0.6; echo end >> {log}\n")
    fast = script(tmp_path, "fast", f"echo fast >> {tmp_path / 'fast.log'}\n")
    src = source({"slow": {"argv": [slow], "interval": "0.1s", "timeout": "5s"},
                  "fast": {"argv": [fast], "interval": "0.5s"}})
    sources.append(src)
    for _ in range(30):  # ticks far more often than either interval
        src.collect(time.monotonic())
        time.sleep(0.05)
    lines = log.read_text().split()
    # never two runs of one check at once: starts and ends alternate
    assert lines[::2] == ["start"] * len(lines[::2])
    assert all(x == "end" for x in lines[1::2])
    assert 2 <= lines.count("start") <= 3  # 1.5 s of 0.6 s runs, not one per tick
    assert 3 <= len((tmp_path / "fast.log").read_text().split()) <= 4  # at 0, 0.5, 1.0, (1.5)


def test_concurrency_is_bounded(tmp_path: Path, sources: list[ScriptSource]) -> None:
    spans = tmp_path / "spans"
    body = f"s=$(date +%s.%N); sleep 0.3; echo $s $(date +%s.%N) >> {spans}\n"
    src = source({f"c{i}": {"argv": [script(tmp_path, f"c{i}", body)], "interval": "1h"}
                  for i in range(6)}, concurrency=2)
    sources.append(src)
    wait_for(src, lambda o: len(o["script.status"] or {}) == 6)
    times = [tuple(map(float, line.split())) for line in spans.read_text().splitlines()]
    assert len(times) == 6
    most = max(sum(1 for a, b in times if a <= t < b) for t, _ in times)
    assert most == 2


def test_checks_hanging_in_one_pool_never_delay_another_pool(
        tmp_path: Path, sources: list[ScriptSource]) -> None:
    # node-problem-detector gives each monitor its own workers (custom_plugin_monitor.go:
    # plugin.NewPlugin per config, its concurrency); three checks hanging to a long timeout
    # fill their pool, and a check of another pool still runs at once and again
    hang = {f"h{i}": {"argv": ["/bin/sleep", "30"], "timeout": "30s", "pool": "slow"}
            for i in range(3)}
    src = source({**hang, "quick": {"argv": ["/bin/true"], "interval": "0.1s"},
                  "queued": {"argv": ["/bin/true"], "pool": "slow"}},
                 pools={"slow": {"concurrency": 3}})
    sources.append(src)
    # within 20 s: the slow pool's checks hang for 30
    out = wait_for(src, lambda o: check("quick") in o["script.duration_seconds"],
                   "the quick check's run beside the full pool", timeout=20)
    assert check("queued") not in out["script.duration_seconds"]  # its own pool is full
    # the hanging checks (and the queued one) have not answered: no value for any check
    assert out["script.status"] is None
    assert set(src.pools) == {"default", "slow"}


def test_argv_is_never_a_shell(tmp_path: Path, sources: list[ScriptSource]) -> None:
    src = source({"echo": {"argv": ["echo", "a; exit 1", "$(id)"]}})
    sources.append(src)
    out = wait_for(src, lambda o: bool(o["script.result"]))
    assert out["script.result"] == {labels_of({"check": "echo", "message": "a; exit 1 $(id)"}):
                                    0.0}


def test_a_relative_program_path_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute path or a bare name"):
        ScriptConfig.model_validate({"checks": {"x": {"argv": ["./config/plugin/x.sh"]}}})


def test_a_check_that_cannot_start_is_a_source_error_and_no_value(
        tmp_path: Path) -> None:
    # node-problem-detector's plugin.go: cmd.Start() failing is Unknown ("Error in
    # starting plugin"), no evidence either way: here no value, and a fault saying why
    src = source({"gone": {"argv": [str(tmp_path / "missing")]},
                  "bad": {"argv": [script(tmp_path, "bad", "echo broken; exit 1\n")]}})
    collector = Collector(Host(Path("/")), [src])
    try:
        wait_for(src, lambda o: len(o["script.duration_seconds"]) == 2)
        snap = collector.collect(time.monotonic())
    finally:
        collector.close()
    assert snap.errors["script"] == \
        f"check gone: cannot run {tmp_path / 'missing'}: No such file or directory"
    assert collector.error_counts["script"] == 1
    # one family per signal: "gone" not answering leaves script.problem no value, never
    # a family without it (docs/signals.md)
    assert "script.problem" not in snap.values
    assert snap.values["script.errors"] == {labels_of({"check": "gone", "reason": "start"}):
                                            1.0}


def test_a_status_change_wakes_the_loop(tmp_path: Path, sources: list[ScriptSource]) -> None:
    flag = tmp_path / "broken"
    src = source({"flip": {"argv": [script(tmp_path, "flip",
                                           f"[ -e {flag} ] && exit 1; exit 0\n")],
                           "interval": "0.1s"}})
    sources.append(src)
    woken: list[str] = []
    assert src.follow(woken.append)
    wait_until(lambda: len(woken) >= 1, "a wake-up for the first result")
    flag.touch()
    wait_until(lambda: len(woken) >= 2, "a wake-up for the change")
    assert woken == ["check flip", "check flip"]  # the first result, then the change only


def test_close_stops_the_scheduler(tmp_path: Path) -> None:
    src = source({"t": {"argv": ["/bin/true"], "interval": "0.05s"}})
    src.collect(0.0)
    src.close()
    assert all(p.thread is not None and not p.thread.is_alive() for p in src.pools.values())


def test_run_once_ends_without_waiting_for_a_hanging_check(tmp_path: Path) -> None:
    """`guardian run --once` with the shipped rules/health.toml: a check that hangs
    (timeout 30 s) is killed when guardian ends, which does not wait for it; it has not
    answered, so script-check-problem is unknown, never ok (nor held on the other check's
    part alone)."""
    import subprocess
    import sys

    from tests.support.checkout import RULES

    config = tmp_path / "guardian.toml"
    config.write_text('[sources.script.checks.bad]\n'
                      'argv = ["/bin/sh", "-c", "echo disk is sick; exit 1"]\n'
                      '[sources.script.checks.hang]\nargv = ["/bin/sleep", "600"]\n'
                      'timeout = "5m"\n')
    # it ends within the bound: waiting for the hanging check would take five minutes
    got = subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--dry-run",
                          "--config", str(config), "--rules", str(RULES / "health.toml")],
                         capture_output=True, text=True, timeout=2 * BOUND)
    lines = got.stdout.splitlines()
    i = next(i for i, x in enumerate(lines) if "script-check-problem" in x)
    assert lines[i].startswith("UNKNOWN"), got.stdout
    assert "  blind: source script " in lines[i], got.stdout  # its one line: the cause


def test_run_once_shows_an_imported_npd_check_whose_program_is_missing_as_unknown(
        tmp_path: Path) -> None:
    """An imported node-problem-detector monitor whose plugin is not there: `guardian run
    --once --dry-run` reports its rule UNKNOWN and why: its check cannot run (it read
    "ok ... script.result{...}={}" before); with the plugin in place and saying NonOK,
    the rule holds."""
    import json
    import re
    import subprocess
    import sys

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "mon.json").write_text(json.dumps({
        "plugin": "custom", "source": "gone-monitor",
        "pluginConfig": {"invoke_interval": "30s", "timeout": "5s"},
        "conditions": [{"type": "GoneProblem", "reason": "GoneIsOk", "message": "ok"}],
        "rules": [{"type": "temporary", "reason": "GoneIsDown",
                   "path": "./config/plugin/gone.sh", "timeout": "3s"}]}))

    def guardian(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "guardian", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    got = guardian("import", "npd", str(tmp_path / "config" / "mon.json"), "-o", "out",
                   "--log-only", "--base", str(tmp_path))
    assert got.returncode == 0, got.stderr
    config = tmp_path / "out" / "guardian.toml.d" / "50-npd-mon.toml"
    rules = tmp_path / "out" / "rules"
    run = ("run", "--once", "--dry-run", "--warmup", "0.5s", "--config", str(config),
           "--rules", str(rules))
    got = guardian(*run)
    lines = got.stdout.splitlines()
    i = next(i for i, x in enumerate(lines) if x.split()[1:2] == ["npd-mon-goneisdown-"
                                                                  "temporary-0"])
    assert lines[i].split()[0] == "UNKNOWN", got.stdout
    assert lines[i].endswith("  blind: source script failing (see below)"), got.stdout
    assert re.search(r"^blind \(no value\): npd-mon-goneisdown-temporary-0 \(source script "
                     r"failing: check mon\.gone: cannot run ", got.stdout, re.M), got.stdout
    plugin = tmp_path / "config" / "plugin" / "gone.sh"
    assert f"source script failed: check mon.gone: cannot run {plugin}: No such file or " \
        "directory" in got.stderr, got.stderr
    plugin.parent.mkdir()
    script(plugin.parent, "gone.sh", "echo gone is down; exit 1\n")
    got = guardian(*run)
    line = next(x for x in got.stdout.splitlines() if "npd-mon-goneisdown" in x)
    assert line.startswith("FIRING") and line.endswith(': gone is down 1'), got.stdout


def test_check_warns_of_a_program_that_is_missing_or_not_executable() -> None:
    cfg = ScriptConfig.model_validate({"checks": {
        "fine": {"argv": ["true"]},
        "gone": {"argv": ["/nonexistent/check.sh"]},
        "plain": {"argv": [str(NPD / "test-data" / "non-executable.sh")]}}})
    assert ScriptSource.config_warnings(cfg) == [
        "check gone: /nonexistent/check.sh not found",
        f"check plain: {NPD / 'test-data' / 'non-executable.sh'} is not executable"]
