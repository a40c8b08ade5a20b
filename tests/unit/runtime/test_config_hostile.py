"""Hostile configs: numbers that are not durations and empty windows are located errors
(tests/data/hostile/config/)."""

from __future__ import annotations

import pytest

from guardian.core.diagnostics import RuleError
from guardian.plugin.registry import default_registry
from guardian.runtime.config import load_config
from tests.support.hostile import Case, cases


@pytest.mark.parametrize("case", cases("config", "toml"))
def test_each_bad_config_is_a_located_error(case: Case) -> None:
    with pytest.raises(RuleError) as info:
        load_config(case.path, default_registry())
    said = "\n".join(str(d) for d in info.value.diagnostics)
    for line in case.expected:
        assert f"{case.path.name}:{line}" in said, said
