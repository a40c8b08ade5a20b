"""NVIDIA's Xid catalog, shipped as data (``guardian/data/xid.toml``): the action NVIDIA
answers each Xid code with (restart the application, reset the GPU, reboot, the NVLink
workflow, nothing), read once."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from guardian.core.tomlread import loads

#: The actions, in the order the catalog file lists them, and "unknown" for any other code.
ACTION_NAMES = ("restart_app", "reset_gpu", "reboot", "nvlink", "ignore", "unknown")


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


@cache
def catalog() -> dict[int, str]:
    """The shipped catalog: Xid code -> action."""
    return parse(files("guardian").joinpath("data/xid.toml").read_text(encoding="utf-8"))


def action_of(code: int) -> str:
    """NVIDIA's immediate action for an Xid code ("unknown" when not in the catalog)."""
    return catalog().get(code, "unknown")
