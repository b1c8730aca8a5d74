"""The dataset recipes' table: recipes (like the losses and models) are chosen by a name given on the command
line.

Each recipe module registers its ``build`` with :func:`register_recipe`, and ``data_recipes/__init__.py``
imports every module of the package with :func:`import_submodules`, so adding a recipe means adding one
module: there is no second list of names to keep in step. The decorator lives here, not in ``__init__``, so
that a recipe module never imports the package that is importing it. The table itself is the project's one
:class:`common.registry.Registry`, so
``data_recipes`` stays free of torch and of ``pipeline``.
"""

from __future__ import annotations

from collections.abc import Callable

from common.registry import Registry
from data_recipes.manifest import RecipeResult

__all__ = ["RECIPE_BUILDERS", "RecipeBuilder", "register_recipe"]

RecipeBuilder = Callable[..., RecipeResult]

#: every dataset recipe's ``build`` by name (filled when ``data_recipes`` is imported)
RECIPE_BUILDERS: Registry[RecipeBuilder] = Registry("dataset")


def register_recipe(
    name: str, *, caption_groups: bool = False, generated: bool = False
) -> Callable[[RecipeBuilder], RecipeBuilder]:
    """Decorator for a recipe module's ``build``: select it as ``--dataset name``.

    ``caption_groups`` marks recipes whose images carry several captions (one ``group_id`` per image); the
    report then adds Table 2 and the 5-caption evaluation (``data_recipes.CAPTION_GROUP_RECIPES``).
    ``generated`` marks a recipe that makes its pairs instead of reading raw files (no raw folder, no shards;
    the profiles size it with their ``dataset_options``).
    """
    return RECIPE_BUILDERS.register(name, caption_groups=caption_groups, generated=generated)
