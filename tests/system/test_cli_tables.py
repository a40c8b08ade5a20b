"""`guardian signals`, `run --once` and `act` on this host as a person runs them (issue
40): a header and rounded numbers, every shipped rule name in its column, colour on a
terminal only (never with NO_COLOR, never into a pipe), `--json` as it was, and the
library's log lines kept out of a command's words."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.checkout import RULES, write

ANSI = "\x1b["
RAW = re.compile(r"\d\.\d{3,}|\b\d+\.0\b")  # 58.58585858585859, 7292.0
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a log line's time


def _guardian(*args: str, env: dict[str, str] | None = None, tty: bool = False
              ) -> subprocess.CompletedProcess[str]:
    """``python -m guardian ARGS``; with ``tty``, its stdout a terminal (a pty)."""
    full = {**os.environ, **(env or {})}
    full.pop("COLUMNS", None)
    argv = [sys.executable, "-m", "guardian", *args]
    if not tty:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=full)
    primary, secondary = os.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=secondary, stderr=subprocess.PIPE, text=True,
                                env=full)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(primary)
    out = b"".join(chunks).decode().replace("\r\n", "\n")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_signals_has_a_header_and_rounded_values_and_json_keeps_the_figures() -> None:
    got = _guardian("signals", "--warmup", "0.2s")
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].split() == ["SIGNAL", "VALUE", "UNIT", "SOURCE", "HELP"]
    end = lines[0].index("VALUE") + len("VALUE")
    values = [line[:end].split()[-1] for line in lines[1:] if line[:end].strip()]
    assert values and not [v for v in values if RAW.fullmatch(v) or RAW.search(v)]
    assert ANSI not in got.stdout
    data = json.loads(_guardian("signals", "--json", "--warmup", "0.2s").stdout)["data"]
    assert set(data[0]) == {"name", "source", "unit", "labels", "counter", "help", "value",
                            "unavailable"}
    cores = next(r for r in data if r["name"] == "cpu.cores")
    assert isinstance(cores["value"], float)  # machines keep the exact figure


def test_run_once_names_every_rule_in_one_column_and_colours_only_a_terminal() -> None:
    args = ("run", "--once", "--dry-run", "--warmup", "0.2s", "--rules", str(RULES))
    piped = _guardian(*args)
    assert piped.returncode == 0, piped.stderr
    assert ANSI not in piped.stdout and "={}" not in piped.stdout
    for name in ("netdevice-refcount-leak-frequent", "nic-linklocal-allowance-exceeded"):
        line = next(x for x in piped.stdout.splitlines() if x[9:].startswith(name + " "))
        assert line[9 + len(name):9 + len(name) + 2] == "  ", line
    assert re.search(r"^\d+ rules: .*; ", piped.stdout.splitlines()[-1])
    shown = _guardian(*args, tty=True)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^\x1b\[\d+m(ok|UNKNOWN|FIRING|PENDING)\x1b\[0m", shown.stdout, re.M)
    plain = _guardian(*args, env={"NO_COLOR": "1"}, tty=True)
    assert ANSI not in plain.stdout and plain.stdout.splitlines()[-1].endswith(
        shown.stdout.splitlines()[-1].split(";")[-1])


def test_act_and_run_once_keep_log_lines_out_of_their_words(tmp_path: Path) -> None:
    """Before: `2026-... INFO guardian.service: ...` among a command's lines."""
    act = _guardian("act", "reap.zombies", "--dry-run", "--warmup", "0s")
    assert act.returncode == 0, act.stderr
    assert act.stdout.startswith("would run (dry run, nothing changed):\n  reap.zombies:")
    assert not STAMP.search(act.stderr) and "guardian." not in act.stderr.replace(
        "guardian: ", "")
    rules = write(tmp_path, "r.toml", 'version = 1\n[[rule]]\nname = "always"\n'
                  'summary = "s"\nwhen = "processes.total > 0"\n  [[rule.action]]\n'
                  '  use = "log"\n  message = "said by the log action"\n')
    live = _guardian("run", "--once", "--warmup", "0s", "--rules", str(rules), "--state",
                     str(tmp_path / "state.json"))
    assert live.returncode == 0, live.stderr
    assert "guardian: warning: said by the log action" in live.stderr.splitlines()
    assert not STAMP.search(live.stderr) and "guardian.action" not in live.stderr
    assert "log ok" not in live.stderr  # the executor's account: stdout says it
    assert "=> ok (verified): logged, in " in live.stdout
    assert "{\"seconds\"" not in live.stdout  # before: `{"seconds": 0.000504}`
