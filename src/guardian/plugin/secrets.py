"""Parameters that hold secrets, found by type or mark, and their redaction."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr


def secret_fields(model: type[BaseModel]) -> frozenset[str]:
    """The parameter names of ``model`` that hold secrets: typed ``SecretStr`` or
    ``SecretBytes`` (also inside a list or dict), or marked ``json_schema_extra=
    {"secret": True}``. By field name and by alias."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if extra.get("secret") or _holds_secret(f.annotation):
            out.add(name)
            if f.alias:
                out.add(f.alias)
    return frozenset(out)


def _holds_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_holds_secret(a) for a in typing.get_args(annotation))


REDACTED = "<redacted>"


def redact(model: type[BaseModel], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the values of secret fields replaced (a table keeps its keys)."""
    secret = secret_fields(model)
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k in secret:
            v = dict.fromkeys(v, REDACTED) if isinstance(v, dict) else REDACTED
        out[k] = v
    return out
