"""`guardian test` reads the config the service reads: the default config file when
--config is not given, with its drop-ins, so kernel-log samples can name the patterns an
import added (issue 41)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.cli import common, main
from tests.support.checkout import write

SAMPLE = '''[[kmsg]]
line = "acme: device 3 wedged"
matches = ["npd_acme_wedged"]
'''


def test_guardian_test_knows_the_patterns_of_the_default_configs_dropins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, "etc/guardian.toml", "[sources.kmsg]\npatterns = {}\n")
    write(tmp_path, "etc/guardian.toml.d/50-npd-acme.toml",
          '[sources.kmsg.patterns]\nnpd_acme_wedged = "^acme: device \\\\d+ wedged"\n')
    monkeypatch.setattr(common, "DEFAULT_CONFIG", config)
    test = write(tmp_path, "acme.test.toml", SAMPLE)
    assert main(["test", str(test)]) == 0, capsys.readouterr()
    # the same config named: the same answer; without the drop-in the pattern is unknown
    assert main(["test", "--config", str(config), str(test)]) == 0
    (tmp_path / "etc/guardian.toml.d/50-npd-acme.toml").unlink()
    capsys.readouterr()
    assert main(["test", str(test)]) == 1
    assert "npd_acme_wedged" in capsys.readouterr().out
