"""A name -> object table filled by a decorator, the package scan that fills it, and the recipes' table.

Recipes (like the losses and models) are chosen by a name given on the command line. Each recipe module
registers its ``build`` with :func:`register_recipe`, and ``data_recipes/__init__.py`` imports every module
of the package with :func:`import_submodules`, so adding a recipe means adding one module: there is no second
list of names to keep in step. The decorator lives here, not in ``__init__``, so that a recipe module never
imports the package that is importing it. Only the standard library and ``data_recipes.manifest`` (for a
type) are imported, so ``data_recipes`` stays free of torch and of ``pipeline``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from data_recipes.manifest import RecipeResult

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, each with optional tags (e.g. ``caption_groups=True``) that select subsets by name."""

    def __init__(self, kind: str) -> None:
        #: what an entry is, for error messages ("unknown dataset recipe 'x'")
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._tags: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **tags: Any) -> Callable[[T], T]:
        """Decorator: make the decorated object selectable by ``name``; ``tags`` are looked up by
        :meth:`names`. Registering a second object under a taken name is an error (two modules would
        otherwise silently shadow each other depending on import order); registering the same object again
        only replaces its tags."""

        def decorate(entry: T) -> T:
            if name in self._entries and self._entries[name] is not entry:
                raise ValueError(f"{self.kind} name {name!r} is registered twice")
            self._entries[name] = entry
            self._tags[name] = dict(tags)
            return entry

        return decorate

    def get(self, name: str) -> T:
        """The entry registered as ``name``; a ``KeyError`` that lists the available names otherwise."""
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} {name!r}; available: {list(self.names())}")
        return self._entries[name]

    def names(self, **tags: Any) -> tuple[str, ...]:
        """Sorted names of the entries whose tags equal every given one (all entries when none are given)."""
        return tuple(
            sorted(
                name
                for name, entry_tags in self._tags.items()
                if all(entry_tags.get(key) == value for key, value in tags.items())
            )
        )

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)


def import_submodules(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
    """Import every module and subpackage directly under ``package`` (its ``__path__`` is ``path``), so that
    their registration decorators run; names starting with ``_`` and those in ``skip`` are left alone."""
    skipped = set(skip)
    for module in pkgutil.iter_modules(path):
        if not module.name.startswith("_") and module.name not in skipped:
            importlib.import_module(f"{package}.{module.name}")


RecipeBuilder = Callable[..., RecipeResult]

#: every dataset recipe's ``build`` by name (filled when ``data_recipes`` is imported)
RECIPE_BUILDERS: Registry[RecipeBuilder] = Registry("dataset recipe")


def register_recipe(name: str, *, caption_groups: bool = False) -> Callable[[RecipeBuilder], RecipeBuilder]:
    """Decorator for a recipe module's ``build``: select it as ``--dataset name``.

    ``caption_groups`` marks recipes whose images carry several captions (one ``group_id`` per image); the
    report then adds Table 2 and the 5-caption evaluation (``data_recipes.CAPTION_GROUP_RECIPES``).
    """
    return RECIPE_BUILDERS.register(name, caption_groups=caption_groups)
