"""`mask` never forces, over the bus or through systemctl: a unit file in
/etc/systemd/system is refused, never replaced by a symlink to /dev/null (which `unmask`
would remove, leaving the unit not found) (issue 42)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from guardian.hostio.systemdclient import SystemdClient, SystemdSettings


@pytest.mark.parametrize("transport", ["dbus", "systemctl"])
def test_mask_does_not_force(transport: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client = SystemdClient(SystemdSettings(transport=transport))
    said: list[tuple[Any, ...]] = []

    def call(_address: Any, member: str, signature: str = "",
             body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        said.append((member, signature, body))
        return ()

    def systemctl(*args: str) -> Any:
        said.append(args)
        return SimpleNamespace(returncode=0, stderr="")
    monkeypatch.setattr(client, "_call", call)
    monkeypatch.setattr(client, "_systemctl", systemctl)
    assert client.verb("mask", "crashy.service") is None
    assert said == ([("MaskUnitFiles", "asbb", (["crashy.service"], False, False)),
                     ("Reload", "", ())] if transport == "dbus"
                    else [("mask", "--", "crashy.service")])
