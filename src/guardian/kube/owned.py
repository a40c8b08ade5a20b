"""What guardian made on a node, and by which rule: the cordons, taints and labels it set
are claimed in one annotation, so that clean-up removes only guardian's own (a node a
person cordoned stays cordoned when a rule resolves; draino #17, kured #63).

The annotation ``guardian.io/owned`` holds JSON: ``{"cordon": {"<rule>": "<time>"},
"taint:<key>:<effect>": {...}, "label:<key>": {...}}``. A thing stays while any rule
claims it. Every change is one patch that carries the node's ``resourceVersion`` as a
precondition (the API server answers 409 when the node changed since it was read; the
patch is then recomputed from a fresh read), so a claim never races a person's edit.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node

from guardian.core.errors import GuardianError

OWNED = "guardian.io/owned"
PREFIX = "guardian.io/"
CONFLICT_RETRIES = 5

Claims = dict[str, dict[str, str]]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def claims(node: Node) -> Claims:
    """The claims on a node; a hand-edited annotation that does not parse claims nothing
    (guardian then removes nothing)."""
    raw = ((node.metadata and node.metadata.annotations) or {}).get(OWNED)
    try:
        got = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(got, dict):
        return {}
    return {k: {r: str(t) for r, t in v.items()} for k, v in got.items()
            if isinstance(v, dict)}


def annotation_patch(before: Claims, after: Claims) -> dict[str, Any]:
    """The metadata patch that turns ``before`` into ``after`` (None deletes the key)."""
    if before == after:
        return {}
    kept = {k: v for k, v in after.items() if v}
    return {"annotations": {OWNED: json.dumps(kept, sort_keys=True) if kept else None}}


def claim(c: Claims, thing: str, rule: str) -> Claims:
    out = {k: dict(v) for k, v in c.items()}
    out.setdefault(thing, {}).setdefault(rule, now())
    return out


def release(c: Claims, thing: str, rule: str | None) -> Claims:
    """``rule``'s claim on ``thing`` dropped (None: every rule's, the operator's call)."""
    out = {k: dict(v) for k, v in c.items()}
    held = out.get(thing, {})
    if rule is None:
        held.clear()
    else:
        held.pop(rule, None)
    return {k: v for k, v in out.items() if v}


def patch_node(client: Client, name: str,
               change: Callable[[Node], dict[str, Any] | None]) -> tuple[Node, Node]:
    """Read the node, ask ``change`` for a patch (None: nothing to do), send it with the
    read's resourceVersion as a precondition; on 409 read again and retry. Returns the node
    before and after (the same object when nothing changed)."""
    for attempt in range(CONFLICT_RETRIES):
        before = client.get(Node, name=name)
        patch = change(before)
        if not patch:
            return before, before
        rv = before.metadata.resourceVersion if before.metadata else None
        patch.setdefault("metadata", {})["resourceVersion"] = rv
        try:
            after = client.patch(Node, name, patch)
        except ApiError as exc:
            if exc.status.code == 409 and attempt + 1 < CONFLICT_RETRIES:
                continue
            raise
        return before, after
    raise AssertionError("unreachable")


class Thing:
    """One thing guardian may set on a node (a cordon, a taint, a label)."""

    key: str  # its claim's key in the annotation
    what: str  # how a plan names it

    def present(self, node: Node) -> bool:
        raise NotImplementedError

    def conflict(self, node: Node) -> str:
        """Why it cannot be set: the key is there with another value ("" if none)."""
        return ""

    def add(self, node: Node) -> dict[str, Any]:
        raise NotImplementedError

    def remove(self, node: Node) -> dict[str, Any]:
        raise NotImplementedError


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


class Refused(GuardianError, ValueError):
    """The change must not be made (someone else's value is in the way)."""


def change(node: Node, thing: Thing, rule: str | None, want: bool, c: Claims
           ) -> tuple[dict[str, Any] | None, str, Claims]:
    """The patch (annotation left out) that sets (``want``) or releases ``thing`` for
    ``rule`` (None: every guardian rule, the operator's release), what it does in words,
    and the claims after it. The patch is None when nothing is to be changed but claims;
    raises :class:`Refused` when it must not be made."""
    held = c.get(thing.key, {})
    present = thing.present(node)
    others = sorted(r for r in held if r != rule)
    if want:
        assert rule is not None
        if thing.conflict(node):
            raise Refused(thing.conflict(node))
        if not present:
            # claims left from a thing someone else removed meanwhile are stale
            return (thing.add(node), f"set {thing.what} (claimed by rule {rule})",
                    claim(release(c, thing.key, None), thing.key, rule))
        if not held:
            return None, (f"{thing.what} is already there and not guardian's: left as it "
                          f"is, and never removed by guardian"), c
        if rule in held:
            return None, f"{thing.what} is already there, claimed by rule {rule}", c
        return (None, f"{thing.what} is already guardian's (rule {', '.join(others)}): "
                      f"rule {rule} claims it too", claim(c, thing.key, rule))
    if not held:
        if present:
            return None, (f"{thing.what} is not guardian's (no claim in {OWNED}): left "
                          f"as it is"), c
        return None, f"no {thing.what}: nothing to do", c
    if rule is not None and rule not in held:
        return None, (f"rule {rule} holds no claim on {thing.what} (rule "
                      f"{', '.join(others)} does): left as it is"), c
    after = release(c, thing.key, rule)
    if after.get(thing.key):
        return None, (f"drop rule {rule}'s claim; {thing.what} stays for rule "
                      f"{', '.join(others)}"), after
    if not present:
        return None, f"{thing.what} is already gone: drop guardian's stale claim", after
    return thing.remove(node), f"remove {thing.what} (guardian's, rule " \
                               f"{', '.join(sorted(held))})", after


def changes(node: Node, things: list[Thing], rule: str | None, want: bool
            ) -> tuple[dict[str, Any] | None, list[tuple[str, bool]]]:
    """One patch for all ``things`` (their changes and the claims annotation), None when
    nothing changes; with each thing's words and whether it changes anything."""
    before = c = claims(node)
    patch: dict[str, Any] = {}
    said = []
    for thing in things:
        p, what, after = change(node, thing, rule, want, c)
        said.append((what, p is not None or after != c))
        patch, c = _merge(patch, p or {}), after
    meta = annotation_patch(before, c)
    if meta:
        patch = _merge(patch, {"metadata": meta})
    return patch or None, said
