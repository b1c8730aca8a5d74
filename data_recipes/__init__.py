"""Dataset recipes: one module (or package) per dataset, each exposing ``build(raw_dir, work_dir, **options)``
that returns a :class:`data_recipes.manifest.RecipeResult`.

A recipe makes itself selectable by name with ``@register_recipe("name")`` on its ``build``
(:mod:`data_recipes.registry`); importing this package imports every module in it, so a new recipe needs no
edit here. This is the pattern of the loss library (``models/losses``), without importing torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.registry import import_submodules
from data_recipes.manifest import RecipeResult
from data_recipes.registry import RECIPE_BUILDERS, register_recipe

import_submodules(__name__, __path__)

#: names of all registered recipes (sorted)
RECIPES: tuple[str, ...] = RECIPE_BUILDERS.names()
#: recipes whose images carry several captions (one ``group_id`` per image): Table 2 and 5-caption evaluation
CAPTION_GROUP_RECIPES: tuple[str, ...] = RECIPE_BUILDERS.names(caption_groups=True)


def build_recipe(name: str, raw_dir: str | Path | None, work_dir: str | Path, **options: Any) -> RecipeResult:
    """Run recipe ``name`` on ``raw_dir`` (unused by ``embedded``), writing any files under ``work_dir``."""
    build = RECIPE_BUILDERS.get(name)
    return build(Path(raw_dir) if raw_dir else None, Path(work_dir), **options)


__all__ = [
    "CAPTION_GROUP_RECIPES",
    "RECIPES",
    "RECIPE_BUILDERS",
    "RecipeResult",
    "build_recipe",
    "register_recipe",
]
