"""NVIDIA's Xid catalog as shipped data (guardian/data/xid.toml): the codes and actions
the kernel-log source had as a Python table, read from the file; a malformed catalog is
refused, never read as "no action"."""

from __future__ import annotations

import pytest

from guardian.core.xid import ACTION_NAMES, action_of, catalog, parse
from guardian.sources.kernel_patterns import XID_ACTIONS


def test_the_shipped_catalog_is_the_table_it_replaced() -> None:
    # the table kernel_patterns.py held before the data moved out (commit 37e748d)
    before = {
        **dict.fromkeys((8, 13, 31, 32, 43, 45, 68, 69, 94), "restart_app"),
        **dict.fromkeys((46, 48, 62, 64, 95, 109, 110, 119, 120, 140, 143), "reset_gpu"),
        79: "reboot",
        **dict.fromkeys((74, 144, 145, 146, 147, 148, 149, 150), "nvlink"),
        **dict.fromkeys((38, 63, 92, 121, 137, 154), "ignore"),
    }
    assert catalog() == before == XID_ACTIONS
    assert action_of(79) == "reboot" and action_of(9999) == "unknown"
    assert set(catalog().values()) == set(ACTION_NAMES) - {"unknown"}


@pytest.mark.parametrize(("text", "error"), [
    ('[action]\nreplace_gpu = [1]', "unknown Xid action"),
    ('[action]\nreset_gpu = [0]', "is not an Xid code"),
    ('[action]\nreset_gpu = ["48"]', "is not an Xid code"),
    ('[action]\nreset_gpu = [48]\nreboot = [48]', "listed under reset_gpu and reboot"),
])
def test_a_malformed_catalog_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(text)
