"""Registries with test plugins added."""

from __future__ import annotations

from typing import Any

from guardian.plugin.contract import Action
from guardian.plugin.registry import Registry, default_registry


def registry_with(*actions: type[Action[Any]]) -> Registry:
    """A copy of the default registry with ``actions`` added."""
    reg = default_registry().copy()
    for a in actions:
        reg.add_action(a)
    return reg
