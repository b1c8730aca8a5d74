"""One table for everything chosen by a name given on the command line or in a variant: losses, models,
dataset recipes and search backends.

Each of them used to keep its own dict and its own "unknown name" message; one :class:`Registry` gives them
the same rules (a name taken twice is an error, an unknown name says what is close and what exists, a renamed
entry keeps its old spelling working with a warning) and the same mapping-like reads (``name in r``,
``r[name]``, ``sorted(r)``) that older code uses. The spirit is timm's ``register_model`` / ``list_models`` and
its deprecation map. Only the standard library is imported, so every package may use it (``common`` is the
bottom layer).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "UnknownNameError", "import_submodules"]


class UnknownNameError(KeyError):
    """A name no registry entry has. A ``KeyError`` (callers already catch that), but printed as the plain
    message: ``str(KeyError("a"))`` would show the repr-quoted ``"'a'"``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _describe(entry: object) -> str:
    """How an entry is named in an error: a class or function by its qualified name, anything else by repr."""
    return getattr(entry, "__qualname__", None) or repr(entry)


class Registry(Generic[T]):
    """Entries by name, each with optional tags (e.g. ``caption_groups=True``) that select subsets by name.

    ``modules`` are imported on the first lookup (not at construction), for entries whose modules are costly
    or would import the registry's own module back; registering never triggers that import.
    """

    def __init__(self, kind: str, *, modules: Iterable[str] = ()) -> None:
        #: what an entry is, for error messages ("unknown dataset 'x'")
        self.kind = kind
        self.modules = tuple(modules)
        self._loaded = not self.modules
        self._entries: dict[str, T] = {}
        self._tags: dict[str, dict[str, Any]] = {}
        #: old spelling -> canonical name
        self._deprecated: dict[str, str] = {}

    # --- filling -------------------------------------------------------------------------------------------

    def register(self, name: str, **tags: Any) -> Callable[[T], T]:
        """Decorator: make the decorated object selectable by ``name``; ``tags`` are looked up by
        :meth:`names`. Registering a second object under a taken name is an error (two modules would
        otherwise silently shadow each other depending on import order); registering the same object again
        only replaces its tags."""

        def decorate(entry: T) -> T:
            self.add(name, entry, **tags)
            return entry

        return decorate

    def add(self, name: str, entry: T, **tags: Any) -> T:
        """:meth:`register` for an entry that is not a decorated definition (a value, a class made elsewhere)."""
        if name in self._deprecated:
            raise ValueError(
                f"{self.kind} name {name!r} is a deprecated spelling of {self._deprecated[name]!r}"
            )
        if name in self._entries and self._entries[name] is not entry:
            taken = _describe(self._entries[name])
            raise ValueError(f"{self.kind} name {name!r} is registered twice ({taken}, {_describe(entry)})")
        self._entries[name] = entry
        self._tags[name] = dict(tags)
        return entry

    @contextmanager
    def temporarily(self, name: str, entry: T | None) -> Iterator[None]:
        """Within the block, ``name`` is ``entry`` (or, with None, not registered at all); afterwards what it was.
        For tests and studies that try another entry under a known name (a profile with another budget)."""
        self._load()
        before = (self._entries.get(name), self._tags.get(name))
        self._entries.pop(name, None)
        self._tags.pop(name, None)
        if entry is not None:
            self._entries[name], self._tags[name] = entry, dict(before[1] or {})
        try:
            yield
        finally:
            self._entries.pop(name, None)
            self._tags.pop(name, None)
            if before[0] is not None:
                self._entries[name], self._tags[name] = before[0], before[1] or {}

    def deprecate(self, old_name: str, new_name: str) -> None:
        """Keep ``old_name`` working as a spelling of ``new_name`` (a renamed entry): lookups warn and
        :meth:`resolve` gives ``new_name``, so anything hashed by name stays the same under either spelling.
        ``new_name`` may be registered later (by a lazily imported module); it is checked at lookup."""
        if old_name in self._entries:
            raise ValueError(f"{self.kind} name {old_name!r} is registered: it cannot also be deprecated")
        if new_name in self._deprecated:
            raise ValueError(f"{self.kind} name {new_name!r} is itself deprecated: point at its new name")
        self._deprecated[old_name] = new_name

    # --- lookups -------------------------------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """The canonical name of ``name`` (itself, or the new name of a deprecated spelling, with a
        ``DeprecationWarning``); :class:`UnknownNameError` for a name that is neither."""
        return self._resolve(name, stacklevel=3)

    def get(self, name: str) -> T:
        """The entry registered as ``name`` (or as the new name of a deprecated ``name``)."""
        return self._entries[self._resolve(name, stacklevel=3)]

    def __getitem__(self, name: str) -> T:
        """``registry[name]``, as :meth:`get`: code written against the plain dicts this replaced still reads."""
        return self._entries[self._resolve(name, stacklevel=3)]

    def names(self, **tags: Any) -> tuple[str, ...]:
        """Sorted names of the entries whose tags equal every given one (all entries when none are given);
        deprecated spellings are not listed."""
        self._load()
        return tuple(
            sorted(
                name
                for name, entry_tags in self._tags.items()
                if all(entry_tags.get(key) == value for key, value in tags.items())
            )
        )

    def tags(self, name: str) -> dict[str, Any]:
        """The tags ``name`` was registered with (a copy)."""
        return dict(self._tags[self._resolve(name, stacklevel=3)])

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, sorted by name."""
        return [(name, self._entries[name]) for name in self.names()]

    def keys(self) -> tuple[str, ...]:
        return self.names()

    def values(self) -> list[T]:
        """The entries, in the order of their sorted names."""
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self._load()
        return name in self._entries or self._deprecated.get(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"

    # --- internals -----------------------------------------------------------------------------------------

    def _load(self) -> None:
        """Import ``modules`` once; marked done first so that a module looking names up while it registers
        does not import itself again, and undone if an import fails so the next lookup raises the same
        error instead of answering from a half-filled table."""
        if self._loaded:
            return
        self._loaded = True
        try:
            for module in self.modules:
                importlib.import_module(module)
        except BaseException:
            self._loaded = False
            raise

    def _resolve(self, name: str, stacklevel: int) -> str:
        self._load()
        if name in self._entries:
            return name
        new_name = self._deprecated.get(name)
        if new_name is None or new_name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        warnings.warn(f"{self.kind} {name!r} is deprecated: use {new_name!r}", DeprecationWarning, stacklevel)
        return new_name

    def close_match(self, name: str) -> str | None:
        """The registered name most like ``name`` (a typo's likely intent), or None when none is close."""
        return close_match(name, self.names())

    def unknown_message(self, name: str) -> str:
        """``unknown <kind> 'x'; did you mean 'y'? available: a, b, c`` — the one message for a name that is
        not there (also for callers that raise another error type, e.g. a ``ValueError`` for a CLI flag)."""
        available = self.names()
        close = self.close_match(name)
        hint = f" did you mean {close!r}?" if close else ""
        return f"unknown {self.kind} {name!r};{hint} available: {', '.join(available) or '(none)'}"


def close_match(name: object, names: Iterable[str]) -> str | None:
    """The one of ``names`` most like ``name`` (a typo's likely intent), or None when none is close."""
    close = difflib.get_close_matches(str(name), list(names), n=1)
    return close[0] if close else None


def import_submodules(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
    """Import every module and subpackage directly under ``package`` (its ``__path__`` is ``path``), so that
    their registration decorators run; names starting with ``_`` and those in ``skip`` are left alone. A
    package that fills a registry this way needs no second list of its entries to keep in step."""
    skipped = set(skip)
    for module in pkgutil.iter_modules(path):
        if not module.name.startswith("_") and module.name not in skipped:
            importlib.import_module(f"{package}.{module.name}")
