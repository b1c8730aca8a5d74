"""Dataset recipes: one module per dataset, each exposing ``build(raw_dir, work_dir, **options)``
that returns a :class:`data_recipes.manifest.RecipeResult`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from data_recipes.manifest import RecipeResult

RECIPES = ("embedded", "politics", "goodnews", "coco", "conceptual_captions", "flickr30k", "pairs")
#: recipes whose images carry several captions (one ``group_id`` per image): Table 2 and 5-caption evaluation
CAPTION_GROUP_RECIPES = ("coco", "flickr30k")


def build_recipe(name: str, raw_dir: str | Path | None, work_dir: str | Path, **options: Any) -> RecipeResult:
    """Run recipe ``name`` on ``raw_dir`` (unused by ``embedded``), writing any files under ``work_dir``."""
    if name not in RECIPES:
        raise KeyError(f"unknown dataset recipe {name!r}; available: {list(RECIPES)}")
    module = importlib.import_module(f"data_recipes.{name}")
    return module.build(Path(raw_dir) if raw_dir else None, Path(work_dir), **options)
