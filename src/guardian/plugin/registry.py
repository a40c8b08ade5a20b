"""The registry of sources and actions: entry points (``guardian.sources``,
``guardian.actions``) and in-process registration; a name is taken once."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from guardian.core.errors import GuardianError
from guardian.core.snapshot import SignalSpec
from guardian.plugin.contract import Action, Source


class RegistryError(GuardianError):
    """Two plugins claim one name, or a plugin's entry point and class disagree. Nothing
    is replaced silently: guardian refuses to start until one of them is removed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class Actions(MutableMapping[str, "type[Action[Any]]"]):
    """Action classes by name. An entry point's class is imported when the action is
    first looked up (a rule or a command uses it), not when guardian starts: listing,
    ``in`` and ``len`` import nothing. A class that fails to import, or whose ``name``
    disagrees with its entry point, is left out; :attr:`failed` says why."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Action[Any]]] = {}
        self._deferred: dict[str, tuple[EntryPoint, Who]] = {}  # name -> (entry point, who)
        self.failed: dict[str, str] = {}

    def defer(self, name: str, ep: EntryPoint, who: Who) -> None:
        self._deferred[name] = (ep, who)

    def deferred(self, name: str) -> EntryPoint | None:
        got = self._deferred.get(name)
        return got[0] if got else None

    def __getitem__(self, name: str) -> type[Action[Any]]:
        cls = self._classes.get(name)
        if cls is not None:
            return cls
        ep, who = self._deferred.pop(name)  # KeyError: no such action
        try:
            loaded = ep.load()
        except Exception as exc:  # a broken plugin must not take guardian down
            self.failed[name] = f"{who} failed to import: {exc}"
            raise KeyError(name) from None
        declared = getattr(loaded, "name", None)
        if declared != name:
            self.failed[name] = _misnamed(who, "guardian.actions", name, declared)
            raise KeyError(name)
        self._classes[name] = loaded
        return cast("type[Action[Any]]", loaded)

    def __setitem__(self, name: str, cls: type[Action[Any]]) -> None:
        self._deferred.pop(name, None)
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        if self._classes.pop(name, None) is None:
            del self._deferred[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes or name in self._deferred

    def __iter__(self) -> Iterator[str]:
        return iter([*self._classes, *self._deferred])

    def __len__(self) -> int:
        return len(self._classes) + len(self._deferred)

    def copy(self) -> Actions:
        out = Actions()
        out._classes, out._deferred = dict(self._classes), dict(self._deferred)
        out.failed = dict(self.failed)
        return out


class Registry:
    """Sources and actions by name, filled from entry points and in-process calls.

    A name is taken once: an action, a source or a signal that a second plugin also claims
    is a :class:`RegistryError` naming both providers (third-party plugins prefix their
    names with their own, e.g. ``acme.drain``)."""

    def __init__(self) -> None:
        self.sources: dict[str, type[Source[Any]]] = {}
        self.actions: MutableMapping[str, type[Action[Any]]] = Actions()
        self.load_errors: list[str] = []
        self.providers: dict[tuple[str, str], Who] = {}  # (kind, name) -> who provides it

    @classmethod
    def from_entry_points(cls) -> Registry:
        """Every installed plugin: sources imported (their signals make the catalogue),
        actions listed and imported on first use. Raises :class:`RegistryError` when two
        distributions claim one name."""
        reg = cls()
        problems: list[str] = []
        for ep in entry_points(group="guardian.sources"):
            who = _Provider(ep)
            try:
                loaded = ep.load()
            except Exception as exc:  # a broken plugin must not take guardian down
                reg.load_errors.append(f"guardian.sources entry point {ep.name!r}: {exc}")
                continue
            declared = getattr(loaded, "name", None)
            if declared != ep.name:
                problems.append(_misnamed(who, "guardian.sources", ep.name, declared))
                continue
            try:
                reg.add_source(loaded, who)
            except RegistryError as exc:
                problems.extend(exc.problems)
        actions = Actions()
        for ep in entry_points(group="guardian.actions"):
            who = _Provider(ep)
            first = actions.deferred(ep.name)
            if first is not None and first.value == ep.value:
                continue  # one distribution seen twice on the path
            try:
                reg._claim("action", ep.name, who, False)
            except RegistryError as exc:
                problems.extend(exc.problems)
                continue
            actions.defer(ep.name, ep, who)
        reg.actions = actions
        if problems:
            raise RegistryError(problems)
        if not reg.actions and not reg.load_errors:
            reg.load_errors.append(
                "no actions registered: guardian's package metadata is missing "
                "(install it with pip rather than running from the source tree)"
            )
        return reg

    def _claim(self, kind: str, name: str, who: Who, same: bool) -> None:
        first = self.providers.get((kind, name))
        if first is not None and not same:
            raise RegistryError([f"{kind} {name!r} is provided twice: by {first} and by {who}"])
        self.providers[(kind, name)] = first or who

    def add_source(self, source: type[Source[Any]], provider: Who = "") -> None:
        """Register a source class. Raises :class:`RegistryError` when its name or one of
        its signals is already provided by another class."""
        who = provider or _class_path(source)
        problems = []
        same = self.sources.get(source.name) is source
        try:
            self._claim("source", source.name, who, same)
        except RegistryError as exc:
            problems.extend(exc.problems)
        for spec in source.specs:
            try:
                self._claim("signal", spec.name, _with(who, f" (source {source.name!r})"), same)
            except RegistryError as exc:
                problems.extend(exc.problems)
        if problems:
            raise RegistryError(problems)
        self.sources[source.name] = source

    def add_action(self, action: type[Action[Any]], provider: Who = "") -> None:
        """Register an action class. Raises :class:`RegistryError` when its name is already
        provided by another class."""
        who = provider or _class_path(action)
        same = action.name in self.actions and self.actions.get(action.name) is action
        self._claim("action", action.name, who, same)
        self.actions[action.name] = action

    def action_failure(self, name: str) -> str | None:
        """Why a listed action could not be loaded, if it could not."""
        return self.actions.failed.get(name) if isinstance(self.actions, Actions) else None

    def copy(self) -> Registry:
        """An independent registry with the same plugins (to add test plugins to)."""
        reg = Registry()
        reg.sources = dict(self.sources)
        reg.actions = self.actions.copy() if isinstance(self.actions, Actions) \
            else dict(self.actions)
        reg.providers, reg.load_errors = dict(self.providers), list(self.load_errors)
        return reg

    def catalogue(self) -> dict[str, SignalSpec]:
        """Every signal some registered source provides, by name."""
        out: dict[str, SignalSpec] = {}
        for src in self.sources.values():
            for spec in src.specs:
                out[spec.name] = spec
        return out


def _misnamed(who: Who, group: str, name: str, declared: object) -> str:
    return (f"{who}: entry point {name!r} in {group} loads a class named {declared!r}; "
            "the two must agree")


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class _Provider:
    """Who provides a plugin, named when a message needs it: naming a distribution
    parses its metadata, a cost every command would otherwise pay per entry point."""

    def __init__(self, ep: EntryPoint, suffix: str = "") -> None:
        self.ep, self.suffix = ep, suffix

    def __str__(self) -> str:
        return _provider(self.ep) + self.suffix


Who = str | _Provider


def _with(who: Who, suffix: str) -> Who:
    return _Provider(who.ep, who.suffix + suffix) if isinstance(who, _Provider) \
        else who + suffix


def _provider(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = f"distribution {dist.name!r}" if dist is not None else "an unknown distribution"
    return f"{name} ({ep.value})"


_default: Registry | None = None


def default_registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _default
    if _default is None:
        _default = Registry.from_entry_points()
    return _default


def register_source(source: type[Source[Any]]) -> type[Source[Any]]:
    """Add a source class to the default registry (usable as a decorator)."""
    default_registry().add_source(source)
    return source


def register_action(action: type[Action[Any]]) -> type[Action[Any]]:
    """Add an action class to the default registry (usable as a decorator)."""
    default_registry().add_action(action)
    return action
