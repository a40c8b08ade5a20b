"""Sources, actions and the Kubernetes plugins touch the host only through
``guardian.hostio``: a scan of their syntax fails on any call that opens, reads, writes,
lists, looks at or changes a file or device itself, naming file:line:

- reading and writing: builtin ``open``, ``io.open``, ``os.open``/``read``/``write``/
  ``listdir``/``scandir``, ``fcntl.ioctl``, ``glob``, ``tempfile``;
- looking: ``os.stat``/``lstat``/``statvfs``/``access``/``readlink``, the ``os.path``
  questions (``exists``, ``isdir``, ``isfile``, ``realpath`` ...), ``shutil.which``;
- changing: ``os.mkdir``/``makedirs``/``rmdir``/``unlink``/``remove``/``rename``/
  ``replace``/``chmod``/``chown``/``symlink``/``sync`` and ``shutil``'s copies and moves;
- the ``Path`` methods that do any of these (``read_text``, ``iterdir``, ``exists``,
  ``is_dir``, ``stat``, ``readlink``, ``mkdir``, ``unlink``, ``touch`` ...), and
  ``resolve``: it follows the symlinks of the machine guardian runs on, not of the host
  root a fixture or recording relocates (``hostio.host.resolve_under`` follows them
  inside that root). ``Path.rename``/``replace`` are left out: a scan of syntax cannot
  tell them from ``str.replace`` or the Kubernetes client's ``replace``.

Before hostio took them over it failed on, among others, sources/kmsg.py (``os.open``/
``os.read`` of /dev/kmsg), sources/ethtool.py (``fcntl.ioctl``), actions/irq.py
(``smp_affinity_list``), the sources' availability checks (``Path.exists``/``is_dir``),
actions/memcg.py (its probe cgroup's ``mkdir``/``rmdir``, ``os.statvfs``, ``os.sync``),
actions/reap.py (``os.stat`` for owners), actions/node.py (``readlink``),
sources/script.py (``os.access``) and sources/systemd.py (``shutil.which``).

Network sockets are not file reads and stay where they are: the probe source's connects,
the webhook action's HTTP request (urllib's ``OpenerDirector.open``, the one allowed
``.open``) and the Kubernetes client. Running programs (``subprocess``) and signalling
processes (``os.kill``, ``os.killpg``, pidfds) are process operations, not checked.
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
    "os": {"open", "read", "write", "listdir", "scandir", "fdopen", "pread", "pwrite",
           "stat", "lstat", "statvfs", "access", "readlink", "walk", "fwalk",
           "mkdir", "makedirs", "rmdir", "removedirs", "unlink", "remove", "rename",
           "renames", "replace", "truncate", "utime", "mkfifo", "mknod",
           "chmod", "lchmod", "chown", "lchown", "symlink", "link", "sync"},
    "os.path": {"exists", "lexists", "isdir", "isfile", "islink", "ismount", "realpath",
                "samefile", "getsize", "getmtime", "getatime", "getctime"},
    "fcntl": {"ioctl"},
    "glob": {"glob", "iglob"},
    "shutil": {"which", "copy", "copy2", "copyfile", "copyfileobj", "copymode",
               "copystat", "copytree", "move", "rmtree", "chown", "disk_usage"},
    "tempfile": {"mkstemp", "mkdtemp", "TemporaryFile", "NamedTemporaryFile",
                 "SpooledTemporaryFile", "TemporaryDirectory"},
}
PATH_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir",
                "glob", "rglob", "exists", "is_dir", "is_file", "is_symlink", "is_mount",
                "is_fifo", "is_socket", "is_block_device", "is_char_device", "stat",
                "lstat", "readlink", "resolve", "samefile", "mkdir", "rmdir", "unlink",
                "touch", "chmod", "lchmod", "symlink_to", "hardlink_to"}
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
                dotted = f"{node.module}.{alias.name}"
                if alias.name in MODULE_CALLS.get(node.module, ()):
                    functions[alias.asname or alias.name] = dotted
                elif dotted in MODULE_CALLS or node.module.startswith("guardian.hostio"):
                    # `from os import path`; `from guardian.hostio import host` (its
                    # functions may share a name with a Path method: host.exists)
                    modules[alias.asname or alias.name] = dotted
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
            module = _module_of(func.value, modules)
            if module is not None:
                if func.attr in MODULE_CALLS.get(module, ()):
                    call = f"{module}.{func.attr}"
            elif func.attr in PATH_METHODS:
                call = ast.unparse(func)
        if call is not None:
            found.append((node.lineno, call))
    return sorted(found)


def _module_of(node: ast.expr, modules: dict[str, str]) -> str | None:
    """The module an expression names (``os``, ``os.path`` from ``os.path``), or None."""
    if isinstance(node, ast.Name):
        return modules.get(node.id)
    if isinstance(node, ast.Attribute):
        parent = _module_of(node.value, modules)
        return None if parent is None else f"{parent}.{node.attr}"
    return None


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
    "(host.proc / 'stat').exists()",
    "if not (host.sys / 'class' / 'net').is_dir(): pass",
    "probe.mkdir()\nprobe.rmdir()",
    "nxt.readlink()",
    "Path(p).resolve()",
    "Path(p).touch()",
    "import os\nos.stat(proc / '1').st_uid",
    "import os\nos.statvfs(path).f_flag",
    "import os\nos.sync()",
    "import os\nos.access(found, os.X_OK)",
    "import os\nos.path.isfile(found)",
    "import os.path\nos.path.exists(p)",
    "from os import path\npath.isdir(d)",
    "import os.path as osp\nosp.realpath(p)",
    "from os.path import isdir\nisdir(d)",
    "from os import unlink as rm\nrm(p)",
    "import os\nos.replace(tmp, dst)",
    "import shutil\nshutil.which('systemctl')",
    "import tempfile\ntempfile.mkstemp()",
])
def test_the_scan_sees_direct_io(code: str) -> None:
    assert direct_io(ast.parse(code)), code


@pytest.mark.parametrize("code", [
    "import urllib.request\nurllib.request.urlopen(url)",
    "import socket\nsocket.socket().connect(addr)",
    "from guardian.hostio.records import read_json\nread_json(p)",
    "def open(x): return x\nopen(1)",
    "import os\nos.lseek(fd, 0, os.SEEK_END)",
    "import os, signal\nos.kill(pid, signal.SIGTERM)\nos.killpg(pid, signal.SIGKILL)",
    "import os\nos.pidfd_open(pid)\nos.getpid()",
    "import os\nos.path.join(d, 'x')",
    "name.replace('_', ' ')",
    "self.client.replace(lease)",
    "m.group(1)",
    "from guardian.hostio.host import exists\nexists(host.proc / 'stat')",
    "from guardian.hostio import host\nhost.exists(p)",
    "import guardian.hostio.procfs as procfs\nprocfs.stat(p)",
])
def test_the_scan_lets_other_calls_be(code: str) -> None:
    assert not direct_io(ast.parse(code)), code
