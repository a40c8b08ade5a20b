"""NVIDIA's Xid catalog, shipped as data (``guardian/data/xid.toml``): the action NVIDIA
answers each Xid code with (restart the application, reset the GPU, reboot, the NVLink
workflow, drain peer-to-peer traffic, nothing), read once. Two codes' lines say more:
154 names the GPU's new recovery action, 45 may name the Xid that caused it."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Any

from guardian.core.tomlread import loads

#: The actions, in the order the catalog file lists them, and "unknown" for any other code.
ACTION_NAMES = ("restart_app", "reset_gpu", "reboot", "nvlink", "drain_p2p", "ignore",
                "unknown")
#: GPU_RECOVERY_ACTION_CHANGED (nverror.h): its action is the one its line names.
RECOVERY_ACTION_CHANGED = 154
#: ROBUST_CHANNEL_PREEMPTIVE_REMOVAL: ignored where its line names the Xid that caused it.
PREEMPTIVE_REMOVAL = 45

# gpu.c _gpuRefreshRecoveryActionInLock: "GPU recovery action changed from 0x%x (%s) to
# 0x%x (%s)", the last thing on the line (kernel_rc.c prints the message last)
_RECOVERY = re.compile(r"GPU recovery action changed from 0x[0-9a-fA-F]{1,8} \([^()]{0,40}\) "
                       r"to 0x([0-9a-fA-F]{1,8}) \(([^()]{0,40})\)$")
# kernel_rc.c: " caused by previous Xid %d", appended to a 45's line
_CAUSED_BY = re.compile(r" caused by previous Xid \d+$")


def _actions(table: Any, where: str) -> dict[Any, str]:
    if not isinstance(table, dict):
        raise ValueError(f"[{where}] is not a table")
    for key, action in table.items():
        if action not in ACTION_NAMES[:-1]:
            raise ValueError(f"[{where}] {key}: unknown Xid action {action!r}")
    return table


def parse(text: str) -> dict[int, str]:
    """Code -> action of a catalog's text. Raises ValueError on an unknown action, a code
    that is not a positive integer, or a code listed under two actions."""
    table = loads(text).get("action", {})
    out: dict[int, str] = {}
    for action, codes in table.items():
        if action not in ACTION_NAMES[:-1]:
            raise ValueError(f"unknown Xid action {action!r}")
        for code in codes:
            if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
                raise ValueError(f"{action}: {code!r} is not an Xid code")
            if code in out:
                raise ValueError(f"Xid {code} is listed under {out[code]} and {action}")
            out[code] = action
    return out


def parse_recovery(text: str) -> tuple[dict[str, str], dict[int, str]]:
    """Xid 154's actions in a catalog's text: by the recovery action's name as the driver
    prints it, and by its value (nvml.h's nvmlDeviceGpuRecoveryAction_t). Raises
    ValueError on an unknown action or a value that is not a number."""
    doc = loads(text)
    names = _actions(doc.get("recovery_action", {}), "recovery_action")
    values: dict[int, str] = {}
    for key, action in _actions(doc.get("recovery_action_value", {}),
                                "recovery_action_value").items():
        if not key.isdigit():
            raise ValueError(f"[recovery_action_value] {key!r} is not a value")
        values[int(key)] = action
    return dict(names), values


def _text() -> str:
    return files("guardian").joinpath("data/xid.toml").read_text(encoding="utf-8")


@cache
def catalog() -> dict[int, str]:
    """The shipped catalog: Xid code -> action (154, whose action is on its line, is not
    in it)."""
    return parse(_text())


@cache
def recovery_actions() -> tuple[dict[str, str], dict[int, str]]:
    """The shipped catalog's Xid 154 actions, by name and by value."""
    return parse_recovery(_text())


def recovery_action_of(message: str) -> str:
    """The action of the recovery action an Xid 154's message names ("unknown" when it
    names none, or one the catalog does not know by name or value)."""
    found = _RECOVERY.search(message)
    if found is None:
        return "unknown"
    names, values = recovery_actions()
    if found[2] in names:
        return names[found[2]]
    return values.get(int(found[1], 16), "unknown")


def action_of(code: int, message: str | None = None) -> str:
    """NVIDIA's immediate action for an Xid code ("unknown" when not in the catalog).
    ``message`` is the rest of the driver's line after the code, where there is one:
    Xid 154's action is the recovery action it names (without a message, as from an NVML
    event, unknown); an Xid 45 that names the Xid that caused it is ignored (that Xid is
    counted by its own code)."""
    if code == RECOVERY_ACTION_CHANGED:
        return recovery_action_of(message) if message is not None else "unknown"
    if code == PREEMPTIVE_REMOVAL and message is not None and _CAUSED_BY.search(message):
        return "ignore"
    return catalog().get(code, "unknown")
