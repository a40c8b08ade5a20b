"""Sources, actions and the Kubernetes plugins read and write the host only through
``guardian.hostio``: a scan of their syntax fails on any call that opens, reads, writes
or lists a file or device itself (builtin ``open``, ``io.open``, ``os.open``/``read``/
``write``/``listdir``/``scandir``, ``fcntl.ioctl``, ``glob``, and the ``Path`` methods
``open``/``read_text``/``read_bytes``/``write_text``/``write_bytes``/``iterdir``/``glob``/
``rglob``), naming file:line. Before hostio took them over it failed on, among others,
sources/kmsg.py (``os.open``/``os.read`` of /dev/kmsg), sources/ethtool.py
(``fcntl.ioctl``) and actions/irq.py (``smp_affinity_list``).

Network sockets are not file reads and stay where they are: the probe source's connects,
the webhook action's HTTP request (urllib's ``OpenerDirector.open``, the one allowed
``.open``) and the Kubernetes client. Asking whether a path exists (``exists``,
``is_dir``, ``stat``) and running programs (``subprocess``) are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import guardian

SRC = Path(guardian.__file__).resolve().parent
PACKAGES = ("sources", "actions", "kube")
MODULE_CALLS = {
    "builtins": {"open"},
    "io": {"open"},
    "os": {"open", "read", "write", "listdir", "scandir", "fdopen", "pread", "pwrite"},
    "fcntl": {"ioctl"},
    "glob": {"glob", "iglob"},
}
PATH_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir",
                "glob", "rglob"}
# (module, the call as written) -> why it is no file access
ALLOWED = {
    ("actions/notify.py", "_OPENER.open"): "an HTTP request (urllib's OpenerDirector)",
}


def direct_io(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, call) of each call in a module that touches a file or device itself."""
    modules: dict[str, str] = {}  # local name -> module, from `import os (as x)`
    functions: dict[str, str] = {}  # local name -> "module.function", from `from os import read`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                modules[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name in MODULE_CALLS.get(node.module, ()):
                    functions[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    shadowed = {n.name for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, call = node.func, None
        if isinstance(func, ast.Name):
            if func.id in functions:
                call = functions[func.id]
            elif func.id == "open" and "open" not in shadowed:
                call = "open"
        elif isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id in modules:
                if func.attr in MODULE_CALLS.get(modules[func.value.id], ()):
                    call = f"{modules[func.value.id]}.{func.attr}"
            elif func.attr in PATH_METHODS:
                call = ast.unparse(func)
        if call is not None:
            found.append((node.lineno, call))
    return sorted(found)


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (SRC / pkg).rglob("*.py"))


def test_sources_and_actions_touch_the_host_only_through_hostio() -> None:
    offences, allowed_seen = [], set()
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        for line, call in direct_io(ast.parse(path.read_text(), str(path))):
            if (rel, call) in ALLOWED:
                allowed_seen.add((rel, call))
            else:
                offences.append(f"src/guardian/{rel}:{line}: {call}(...)")
    assert not offences, ("sources, actions and kube must not touch files or devices "
                          "themselves; read through guardian.hostio:\n  "
                          + "\n  ".join(offences))
    assert allowed_seen == set(ALLOWED), (
        f"allowed calls no longer there (drop them from ALLOWED): "
        f"{sorted(set(ALLOWED) - allowed_seen)}")


@pytest.mark.parametrize("code", [
    "open('/proc/x').read()",
    "import io\nio.open('/proc/x')",
    "import builtins\nbuiltins.open('/proc/x')",
    "import os\nos.read(fd, 10)",
    "import os as o\no.listdir('/sys/class/net')",
    "from os import scandir\nscandir('/sys')",
    "from os import write as w\nw(fd, b'1')",
    "import fcntl\nfcntl.ioctl(sock, 1, b'')",
    "(host.proc / 'x').read_text()",
    "Path(p).write_bytes(b'')",
    "with self.position.open() as f: pass",
    "list(d.iterdir())",
    "list(d.rglob('*.prom'))",
])
def test_the_scan_sees_direct_io(code: str) -> None:
    assert direct_io(ast.parse(code)), code


@pytest.mark.parametrize("code", [
    "import urllib.request\nurllib.request.urlopen(url)",
    "import socket\nsocket.socket().connect(addr)",
    "path.exists() and path.is_dir()",
    "from guardian.hostio.records import read_json\nread_json(p)",
    "def open(x): return x\nopen(1)",
    "import os\nos.lseek(fd, 0, os.SEEK_END)",
])
def test_the_scan_lets_other_calls_be(code: str) -> None:
    assert not direct_io(ast.parse(code)), code
