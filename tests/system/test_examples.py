"""The examples in examples/ are tested files: the embedding agent runs collect →
evaluate → plan → apply, and the plugin written against the public API passes
mypy --strict without a cast."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.support.checkout import REPO

EXAMPLES = REPO / "examples"


def test_the_embedding_example_runs_end_to_end() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / "embed.py")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "firing: acme.note -> noted in" in proc.stdout
    assert proc.stdout.strip().endswith("queue-backlog firing")


def test_a_plugin_against_the_public_api_is_mypy_strict_clean_without_casts() -> None:
    plugin = EXAMPLES / "acme_plugin.py"
    text = plugin.read_text()
    assert "cast(" not in text and "isinstance(self.params" not in text
    assert "type: ignore" not in text
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(plugin),
                           str(EXAMPLES / "embed.py")], cwd=EXAMPLES, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_benchmarks_need_neither_pytest_nor_the_test_suite() -> None:
    """bench/run after a plain install: its modules import with pytest and tests/ absent;
    the one that boots the tests' nspawn systemd imports that helper inside run(), and the
    helper itself imports without pytest."""
    code = ("import sys; sys.modules['pytest'] = None; sys.modules['tests'] = None; "
            f"sys.path.insert(0, {str(REPO / 'bench')!r}); "
            "import cli, daemon, engine_eval, sources, systemd_units; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    helper = ("import sys; sys.modules['pytest'] = None; "
              f"sys.path.insert(0, {str(REPO)!r}); import guardian.testing.nspawn; print('ok')")
    proc = subprocess.run([sys.executable, "-c", helper], cwd="/", capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    for path in [*sorted((REPO / "bench").glob("*.py")), REPO / "bench" / "run"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "pytest" for n in names), path
            assert all(n in ("tests.nspawn",) for n in names
                       if n.split(".")[0] == "tests"), path
