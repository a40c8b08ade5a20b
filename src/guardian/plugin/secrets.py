"""Parameters that hold secrets, found by type or mark, and their redaction."""

from __future__ import annotations

import typing
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

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


def secret_strings(params: BaseModel) -> list[str]:
    """The secret values of a validated ``params`` model as text (a table's values, a
    list's items), for :func:`scrub`."""
    out: list[str] = []

    def add(v: Any) -> None:
        if isinstance(v, (SecretStr, SecretBytes)):
            v = v.get_secret_value()
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, str):
            if v:
                out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                add(x)
        elif isinstance(v, (list, tuple, set, frozenset)):
            for x in v:
                add(x)

    for name in secret_fields(type(params)) & set(type(params).model_fields):
        add(getattr(params, name, None))
    return out


_MIN_PART = 4  # a URL's part shorter than this (a path "/a") is not redacted on its own


def _forms(secret: str) -> set[str]:
    """The ways a secret may appear in text made from it: as is, percent-encoded, escaped
    as ``repr`` escapes it (an exception's ``!r``), and for a URL (a chat webhook's is its
    credential) its path, query, each query value and its user information, which
    http.client's and urllib's errors quote without the rest."""
    forms = {secret, quote(secret, safe=""), quote(secret), repr(secret)[1:-1],
             repr(secret.encode("utf-8", "replace"))[2:-1]}
    parts = urlsplit(secret) if "://" in secret else None
    if parts is not None and parts.scheme:
        forms |= {parts.path, parts.query, parts.fragment, parts.netloc.rpartition("@")[0],
                  parts.path + ("?" + parts.query if parts.query else ""),
                  unquote(parts.path), unquote(parts.query)}
        forms |= {v for _, v in parse_qsl(parts.query, keep_blank_values=True)}
        if parts.password:
            forms.add(parts.password)
    forms |= {repr(f)[1:-1] for f in list(forms)}
    return {f for f in forms if len(f) >= _MIN_PART}


def scrub(text: str, secrets: typing.Iterable[str]) -> str:
    """``text`` with every form of each secret (see :func:`_forms`) replaced by
    ``<redacted>``: what an action logs or audits that came from an exception or a
    receiver passes through here."""
    forms: set[str] = set()
    for s in secrets:
        forms |= _forms(s)
    for f in sorted(forms, key=len, reverse=True):
        text = text.replace(f, REDACTED)
    return text


def scrub_for(params: BaseModel | None, text: str) -> str:
    """:func:`scrub` with the secrets of an action's ``params``."""
    if params is None or not text or not isinstance(params, BaseModel):
        return text
    return scrub(text, secret_strings(params))


def control_character(value: str) -> str | None:
    """The first control character in ``value`` (CR, LF, NUL, DEL ...) as ``repr`` shows
    it, or None: a secret with one would be split into another header or request line."""
    for c in value:
        if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0:
            return repr(c)
    return None
