"""The stand-in libnvidia-ml.so.1 (tests/support/nvml_standin.c, NVML's entry points with
nvml.h's signatures and struct layouts) built for a test, and a recording of
tests/fixtures/nvml written in the line format it reads. Loaded by pynvml through
LD_LIBRARY_PATH in a process of its own: no GPU and no driver in this session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pynvml

SOURCE = Path(__file__).resolve().parent / "nvml_standin.c"
ENV = "GUARDIAN_NVML_STANDIN"  # the line file the library reads
#: the file the library writes its count of open sessions to (nvmlInit not yet matched by
#: nvmlShutdown), at each change
SESSIONS_ENV = "GUARDIAN_NVML_STANDIN_SESSIONS"


def build(directory: Path) -> Path:
    """Compile the library as ``directory``/libnvidia-ml.so.1 (the name pynvml loads) and
    return ``directory``. Raises RuntimeError without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build the NVML stand-in")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o",
                    str(directory / "libnvidia-ml.so.1"), str(SOURCE)], check=True,
                   timeout=60)
    return directory


def _code(name: str) -> int:
    return int(getattr(pynvml, f"NVML_ERROR_{name}"))


def _line(phase: int, gpu: int, key: str, value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"error"}:
        return f"{phase} {gpu} {key} ! {_code(value['error'])}"
    if isinstance(value, str):
        return f"{phase} {gpu} {key} s {value}"
    values = value if isinstance(value, list) else [value]
    return f"{phase} {gpu} {key} = {' '.join(str(int(v)) for v in values)}".rstrip()


def _gpu(phase: int, gpu: int, answers: dict[str, Any]) -> list[str]:
    out = []
    for key, value in answers.items():
        if key == "handle" and value is None:
            continue
        if key == "nvlinks" and isinstance(value, list):
            out.append(_line(phase, gpu, "nvlinks", len(value)))
            for i, link in enumerate(value):
                if set(link) == {"error"}:
                    out.append(_line(phase, gpu, f"nvlink.{i}", link))
                    continue
                out += [_line(phase, gpu, f"nvlink.{i}.{name}", v) for name, v in link.items()]
            continue
        out.append(_line(phase, gpu, key, value))
    return out


def lines(recording: dict[str, Any]) -> str:
    """A recording (tests/support/nvml_recorded.py's format) as the library's lines."""
    out = []
    if recording.get("init"):
        out.append(_line(0, -1, "init", {"error": recording["init"]}))
    out.append(_line(0, -1, "driver_version", recording["driver_version"]))
    out.append(_line(0, -1, "count", recording["count"]))
    out.append(_line(0, -1, "events", [x for pair in recording.get("events", [])
                                       for x in pair]))
    for gpu, answers in enumerate(recording["gpus"]):
        out += _gpu(0, gpu, answers)
    for gpu, answers in recording.get("later", {}).items():
        out += _gpu(1, int(gpu), answers)
    return "".join(f"{line}\n" for line in out)
