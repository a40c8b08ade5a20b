"""Load rule files: TOML, then the schema, then conditions and action parameters.

Every problem becomes a :class:`~guardian.core.diagnostics.Diagnostic` naming
``path:line:col``; all problems of all files are collected in one pass, and a ruleset is
returned only when there are none, so nothing is ever half-loaded.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from guardian.core.diagnostics import (
    Diagnostic,
    Reporter,
    RuleError,
    parse_toml,
    read_text,
    unknown_key,
)
from guardian.core.durations import format_duration
from guardian.core.positions import Pos, value_position
from guardian.core.snapshot import SignalSpec
from guardian.model.condition import Condition
from guardian.model.ruleset import BoundAction, CompiledRule, CompiledStep, Ruleset
from guardian.model.schema import SCHEMA_VERSION, ActionSpec, Recurs, Rule
from guardian.plugin.registry import Registry, default_registry
from guardian.policy.expr import ExprError, compile_condition

TEST_SUFFIX = ".test.toml"


def rule_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into their ``*.toml`` rule files (tests excluded), sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.glob("*.toml") if not f.name.endswith(TEST_SUFFIX)))
        else:
            out.append(p)
    return out


def load_rules(
    paths: Iterable[str | Path],
    registry: Registry | None = None,
    catalogue: Mapping[str, SignalSpec] | None = None,
) -> Ruleset:
    """Load and check rule files or directories. Raises :class:`RuleError`."""
    reg = registry or default_registry()
    cat = catalogue if catalogue is not None else reg.catalogue()
    files = rule_files(paths)
    diags: list[Diagnostic] = []
    ruleset = Ruleset(files=[str(f) for f in files])
    if not files:
        diags.append(Diagnostic("<rules>", 1, 1, "no rule files given or found"))
    seen: dict[str, tuple[str, int, int]] = {}
    for f in files:
        for rule in _load_file(f, reg, cat, diags):
            first = seen.get(rule.name)
            if first:
                diags.append(Diagnostic(rule.path, rule.line, 1,
                                        f"duplicate rule name {rule.name!r} (first defined at "
                                        f"{first[0]}:{first[1]}:{first[2]})"))
                continue
            seen[rule.name] = (rule.path, rule.line, 1)
            ruleset.rules.append(rule)
    diags.extend(check_causes(ruleset.rules))
    if diags:
        raise RuleError(diags)
    ruleset.signals = _used_signals(ruleset.rules, cat)
    return ruleset


def check_causes(rules: list[CompiledRule]) -> list[Diagnostic]:
    """`caused_by` must name rules of the set, and causes must not go round in a cycle."""
    names = {r.name: r for r in rules}
    out: list[Diagnostic] = []
    for r in rules:
        line, col = r.caused_by_at if r.caused_by_at[0] else (r.line, 1)
        for cause in r.spec.caused_by:
            if cause not in names:
                hint = difflib.get_close_matches(cause, list(names), n=1)
                more = f"; did you mean {hint[0]!r}?" if hint else ""
                out.append(Diagnostic(r.path, line, col,
                                      f"caused_by: no rule named {cause!r}{more}"))
            elif cause == r.name:
                out.append(Diagnostic(r.path, line, col, "caused_by: a rule cannot cause "
                                                         "itself"))
    seen: set[str] = set()
    for r in rules:
        cycle = _cycle(r.name, names, [], seen)
        if cycle and cycle[0] == r.name:
            line, col = r.caused_by_at if r.caused_by_at[0] else (r.line, 1)
            out.append(Diagnostic(r.path, line, col, "caused_by: causes go round in a "
                                                     "cycle: " + " → ".join(cycle)))
    return out


def _cycle(name: str, rules: dict[str, CompiledRule], path: list[str],
           done: set[str]) -> list[str]:
    """The first cycle reached from ``name`` through `caused_by`, as a closed path."""
    if name in path:
        return [*path[path.index(name):], name]
    if name in done or name not in rules:
        return []
    for cause in rules[name].spec.caused_by:
        if cause != name and (found := _cycle(cause, rules, [*path, name], done)):
            return found
    done.add(name)
    return []


def _used_signals(rules: list[CompiledRule], cat: Mapping[str, SignalSpec]
                  ) -> dict[str, SignalSpec]:
    return {ref.name: cat[ref.name] for r in rules
            for cond in (r.condition, r.validation) if cond is not None
            for ref in cond.refs if ref.name in cat}


def load_text(text: str, path: str = "<text>", registry: Registry | None = None,
              catalogue: Mapping[str, SignalSpec] | None = None) -> Ruleset:
    """Load rules from a TOML string (for embedding and tests)."""
    reg = registry or default_registry()
    diags: list[Diagnostic] = []
    cat = catalogue if catalogue is not None else reg.catalogue()
    rules = _load_source(text, path, reg, cat, diags)
    diags.extend(check_causes(rules))
    if diags:
        raise RuleError(diags)
    return Ruleset(rules=rules, files=[path], signals=_used_signals(rules, cat))


def _load_file(path: Path, reg: Registry, cat: Mapping[str, SignalSpec],
               diags: list[Diagnostic]) -> list[CompiledRule]:
    try:
        text = read_text(path, "rule file")
    except RuleError as exc:
        diags.extend(exc.diagnostics)
        return []
    return _load_source(text, str(path), reg, cat, diags)


def _load_source(text: str, path: str, reg: Registry, cat: Mapping[str, SignalSpec],
                 diags: list[Diagnostic]) -> list[CompiledRule]:
    try:
        data = parse_toml(path, text)
    except RuleError as exc:
        diags.extend(exc.diagnostics)
        return []
    report = Reporter(path, text, diags)
    version = data.get("version")
    if version is None:
        report((), f"missing `version = {SCHEMA_VERSION}` at the top of the file")
    elif version != SCHEMA_VERSION:
        report(("version",), f"unsupported schema version {version!r}; this guardian reads "
                             f"version {SCHEMA_VERSION}", value=True)
    for key in data:
        if key not in ("version", "rule"):
            report((key,), unknown_key(key, ["version", "rule"]))
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list):
        report(("rule",), "`rule` must be an array of tables: write each as [[rule]]")
        return []
    out: list[CompiledRule] = []
    for i, raw in enumerate(raw_rules):
        loc: tuple[str | int, ...] = ("rule", i)
        spec: Rule | None = None
        try:
            spec = Rule.model_validate(raw)
        except ValidationError as exc:
            report.validation(exc, loc, Rule, words=_rule_words)
        # Check the condition and the actions even when other keys are wrong, so one run
        # reports every mistake.
        raw_dict = raw if isinstance(raw, dict) else {}
        when = spec.when if spec else raw_dict.get("when")
        condition = None
        if isinstance(when, str) and when:
            condition = _compile_when(when, cat, report.at((*loc, "when")), text, path, diags)
        validate = spec.validate_ if spec else raw_dict.get("validate")
        validation = None
        if isinstance(validate, str) and validate:
            validation = _compile_when(validate, cat, report.at((*loc, "validate")), text,
                                       path, diags, "validate")
        actions = _bind_actions(spec.action if spec else _action_specs(raw_dict), loc, reg,
                                report)
        escalate = _bind_actions(spec.escalate if spec else _action_specs(raw_dict,
                                                                          "escalate"),
                                 loc, reg, report, "escalate")
        steps = _bind_steps(spec, raw_dict, loc, reg, report)
        if spec is not None and actions is not None and escalate is not None \
                and steps is not None:
            _check_fleet(spec, [*actions, *escalate, *(a for s in steps for a in s.actions)],
                         loc, report)
            _check_ladder(spec, loc, report)
            _check_approve(spec, actions, steps, loc, report)
        if spec is not None and condition is not None and actions is not None \
                and escalate is not None and steps is not None \
                and (validation is not None or spec.validate_ is None):
            cause_at = report.at((*loc, "caused_by"))
            out.append(CompiledRule(spec, path, report.at(loc).line, condition, actions,
                                   (cause_at.value_line, cause_at.value_col), escalate,
                                   steps, validation))
    return out


def _bind_steps(spec: Rule | None, raw: dict[str, Any], loc: tuple[str | int, ...],
                reg: Registry, report: Reporter) -> list[CompiledStep] | None:
    """A ladder's steps with their actions bound (None when some are broken)."""
    if spec is not None:
        found: list[tuple[float, Recurs | None, list[ActionSpec | None]]] = [
            (s.verify, s.recurs, list(s.action)) for s in spec.step]
    else:
        raw_steps = raw.get("step")
        found = [(0.0, None, _action_specs(s) if isinstance(s, dict) else [])
                 for s in (raw_steps if isinstance(raw_steps, list) else [])]
    out: list[CompiledStep] = []
    ok = True
    for i, (verify, recurs, specs) in enumerate(found):
        bound = _bind_actions(specs, (*loc, "step", i), reg, report)
        if bound is None:
            ok = False
        else:
            out.append(CompiledStep(bound, verify, recurs))
    return out if ok else None


def _check_ladder(spec: Rule, loc: tuple[str | int, ...], report: Reporter) -> None:
    """A ladder's fire actions are its steps'; its clean-up is the rule's; it can climb
    to its top within its limit; `validate_for` needs a `validate`."""
    if spec.validate_ is None and spec.validate_for:
        report((*loc, "validate_for"), "`validate_for` without `validate`: name the "
                                        "condition that must hold for it")
    if not spec.step:
        return
    for j, a in enumerate(spec.action):
        if a.on != "resolve":
            report((*loc, "action", j), f"rule {spec.name!r} climbs steps: its fire actions "
                   f"go in a [[rule.step]]; [[rule.action]] holds only clean-up "
                   f"(on = \"resolve\"), and this {a.use!r} runs on {a.on!r}")
    for i, s in enumerate(spec.step):
        for j, a in enumerate(s.action):
            if a.on != "fire":
                report((*loc, "step", i, "action", j, "on"), f"a step's actions run when the "
                       f"step is climbed: on = {a.on!r} cannot be; put clean-up in the "
                       f"rule's [[rule.action]] with on = \"resolve\"", value=True)
    if spec.step[0].recurs is not None:
        report((*loc, "step", 0, "recurs"), f"rule {spec.name!r}: its first step runs in "
               f"the first boot it fires in; `recurs` goes on a later step (the one a climb "
               f"starts at once the rule recurred)")
    boots = [(i, s.recurs.boots) for i, s in enumerate(spec.step) if s.recurs is not None]
    for (i, low), (j, b) in itertools.pairwise(boots):
        if b <= low:
            report((*loc, "step", j, "recurs", "boots"), f"step {j + 1} recurs at {b} "
                   f"boots, step {i + 1} at {low}: `recurs` boots must increase along the "
                   f"ladder (a climb starts at the highest step whose boots are met, so "
                   f"step {i + 1} would never run)", value=True)
    if spec.limit.runs < len(spec.step):
        if "limit" in spec.model_fields_set:
            report((*loc, "limit"), f"rule {spec.name!r} has {len(spec.step)} steps and a "
                   f"limit of {spec.limit.runs} runs: its top would never run; give `limit "
                   f"= {{ runs = {len(spec.step)}, within = ... }}` or more")
        else:
            report(loc, f"rule {spec.name!r} has {len(spec.step)} steps and no `limit`: "
                   f"the default, {spec.limit.runs} runs within "
                   f"{format_duration(spec.limit.within)}, would never let its top run; add "
                   f"`limit = {{ runs = {len(spec.step)}, within = \"1h\" }}` (or more) to "
                   f"the rule")
    if spec.validate_ is not None and spec.validate_for > spec.validate_within:
        report((*loc, "validate_for"), f"`validate_for` "
               f"({format_duration(spec.validate_for)}) is longer than `validate_within` "
               f"({format_duration(spec.validate_within)}): the validation could never hold "
               f"long enough before it needs a human; make `validate_within` longer",
               value=True)


def _check_approve(spec: Rule, actions: list[BoundAction], steps: list[CompiledStep],
                   loc: tuple[str | int, ...], report: Reporter) -> None:
    """An approval gate holds only disruptive actions: one on a rule or step that has
    none would wait for nothing (a mistake, said where it is written)."""
    gates: list[tuple[tuple[str | int, ...], list[BoundAction]]] = []
    if spec.approve is not None:
        gates.append(((*loc, "approve"), [a for s in steps for a in s.actions] if steps
                      else [a for a in actions if a.spec.on != "resolve"]))
    gates += [((*loc, "step", i, "approve"), s.actions)
              for i, (s, raw) in enumerate(zip(steps, spec.step, strict=False))
              if raw.approve is not None]
    for where, acts in gates:
        if not any(a.disruptive for a in acts):
            uses = ", ".join(a.use for a in acts) or "no action"
            report(where, f"rule {spec.name!r}: `approve` holds only disruptive actions "
                   f"for a human's approval, and these have none ({uses}): nothing would "
                   f"wait; remove it")


def _rule_words(loc: tuple[str | int, ...], kind: str) -> str | None:
    """A rule's ladder and learning mistakes in plain words (steps counted from 1)."""
    match loc, kind:
        case ("step", int(i), "verify"), "missing":
            return (f"step {i + 1} has no `verify`: how long the rule has to resolve after "
                    f"this step before the next (e.g. verify = \"10m\")")
        case ("step", int(i), "action"), "missing":
            return f"step {i + 1} has no actions: give it a [[rule.step.action]]"
        case ("step", int(i), "recurs", "boots"), _:
            return (f"step {i + 1}: recurs.boots is how many boots the rule must have fired "
                    f"in (this one counted) for the step to apply: a whole number from 2 to "
                    f"8")
        case ("demote", "below"), _:
            return "demote.below is a percentage such as \"20%\""
    return None


def _check_fleet(spec: Rule, actions: list[BoundAction], loc: tuple[str | int, ...],
                 report: Reporter) -> None:
    """A disruptive Kubernetes action without a `fleet` setting could disrupt every node
    of the fleet at once: the rule must say which it means."""
    if spec.fleet is not None:
        return
    kube = sorted({a.use for a in actions if a.disruptive and (
        a.use.startswith("kube.") or a.use == "node.reboot")})
    if kube:
        report(loc, f"rule {spec.name!r}: {', '.join(kube)} can disrupt every node at once: "
                    f"say `fleet = true` to take a slot of the fleet budget ([fleet] in "
                    f"guardian.toml), or `fleet = false` to mean it")


def _action_specs(raw: dict[str, Any], key: str = "action") -> list[ActionSpec | None]:
    """Best-effort action specs of a rule that failed validation (None where broken;
    the schema error for those is already reported)."""
    items = raw.get(key)
    if not isinstance(items, list):
        return []
    out: list[ActionSpec | None] = []
    for item in items:
        try:
            out.append(ActionSpec.model_validate(item))
        except ValidationError:
            out.append(None)
    return out


def _compile_when(when: str, cat: Mapping[str, SignalSpec], pos: Pos, text: str,
                  path: str, diags: list[Diagnostic], key: str = "when") -> Condition | None:
    try:
        return compile_condition(when, cat)
    except ExprError as exc:
        line, col = _expr_position(pos, text, exc)
        diags.append(Diagnostic(path, line, col, f"in `{key}`: {exc.message}"))
        return None


def _expr_position(pos: Pos, text: str, exc: ExprError) -> tuple[int, int]:
    """Map a position inside the `when` string back to the rule file (through the
    string's escapes: the error's column counts the decoded string)."""
    return value_position(text, pos.value_line, pos.value_col, exc.line, exc.col)


def _bind_actions(specs: Sequence[ActionSpec | None], loc: tuple[str | int, ...],
                  reg: Registry, report: Reporter, key: str = "action"
                  ) -> list[BoundAction] | None:
    bound: list[BoundAction] = []
    ok = True
    for j, aspec in enumerate(specs):
        aloc = (*loc, key, j)
        if aspec is None:
            ok = False
            continue
        cls = reg.actions.get(aspec.use)
        if cls is None and (why := reg.action_failure(aspec.use)) is not None:
            report((*aloc, "use"), f"action {aspec.use!r} could not be loaded: {why}",
                   value=True)
            ok = False
            continue
        if cls is None:
            hint = difflib.get_close_matches(aspec.use, list(reg.actions), n=3)
            more = f"; did you mean {', '.join(hint)}?" if hint else ""
            known = ", ".join(sorted(reg.actions)) or "none"
            report((*aloc, "use"), f"unknown action {aspec.use!r}{more} (known: {known})",
                   value=True)
            ok = False
            continue
        try:
            params = cls.Params.model_validate(aspec.params)
        except ValidationError as exc:
            report.validation(exc, aloc, cls.Params, prefix=f"action {aspec.use!r}: ")
            ok = False
            continue
        bound.append(BoundAction(aspec, cls(params)))
    return bound if ok else None
