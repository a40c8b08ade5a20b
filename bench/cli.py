"""CLI latency: CPU (user + system, from the child's rusage) and wall time of guardian's
commands against `python3 -c pass` on the same interpreter, interleaved, medians. Byte
code is written and used, as after a pip install."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import REPO, figure

ROUNDS = 7


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("NOTIFY_SOCKET", None)
    return env


def _run(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_env())
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime, wall


def run() -> list[dict[str, Any]]:
    guardian = [sys.executable, "-m", "guardian"]
    rules = str(REPO / "rules")
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "--version": [*guardian, "--version"],
            "check rules/": [*guardian, "check", rules],
            "test rules/": [*guardian, "test", rules],
            "run --once --dry-run": [*guardian, "run", "--once", "--dry-run", "--warmup",
                                     "0s", "--rules", rules, "--state", f"{tmp}/s.json"],
        }
        floor = [sys.executable, "-c", "pass"]
        argvs = [floor, *commands.values()]
        for argv in argvs:  # warm: byte code written, files in the page cache
            _run(argv)
        samples: list[list[tuple[float, float]]] = [[] for _ in argvs]
        for _ in range(ROUNDS):
            for i, argv in enumerate(argvs):
                samples[i].append(_run(argv))
    cpu = [statistics.median(c for c, _ in s) for s in samples]
    wall = [statistics.median(w for _, w in s) for s in samples]
    out = []
    for (label, _), c, w in zip(commands.items(), cpu[1:], wall[1:], strict=True):
        out.append(figure(f"cli.cpu `guardian {label}`", c * 1000, "ms",
                          "CPU (user + system) of the whole command, median of "
                          f"{ROUNDS} interleaved runs", "python3 -c pass", cpu[0] * 1000,
                          target="≤ 250 ms" if label == "check rules/" else "", digits=1))
        out.append(figure(f"cli.wall `guardian {label}`", w * 1000, "ms",
                          "wall time, same runs", "python3 -c pass", wall[0] * 1000,
                          digits=1))
    return out
