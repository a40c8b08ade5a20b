"""The service refuses configuration others can change: the drop-ins too (issue 41), as
they can name programs guardian runs, like the config file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardian.runtime.config import Config
from guardian.service.daemon import Daemon, ServiceOptions
from tests.support.checkout import write


def test_a_dropin_others_can_change_refuses_the_load(tmp_path: Path) -> None:
    rules = write(tmp_path / "rules", "r.toml", "version = 1\n").parent
    main = write(tmp_path / "etc", "guardian.toml", "")
    dropin = write(tmp_path / "etc" / "guardian.toml.d", "50-site.toml", "")
    os.chmod(dropin, 0o666)
    d = Daemon(ServiceOptions(rules=[str(rules)], metrics_port=None),
               Config(path=str(main), dropins=[str(dropin)]))
    with pytest.raises(PermissionError) as exc:
        d.load()
    assert f"{dropin}: " in str(exc.value), exc.value
