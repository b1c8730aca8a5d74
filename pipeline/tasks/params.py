"""Parameters shared by tasks (passed down with ``Task.clone``): the dataset's, by every task that depends on
the dataset, and the grid's (variants, seeds, overrides), by the Report and FullRun."""

from __future__ import annotations

from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from data_recipes import CAPTION_GROUP_RECIPES
from pipeline.profiles import TrainSettings
from pipeline.run_settings import resolved_variant
from pipeline.variant_spec import Variant
from pipeline.variants import VARIANTS, paper_grid


class DatasetParams:
    dataset = luigi.Parameter(default="embedded", description="recipe name (data_recipes/)")
    raw_dir = luigi.Parameter(
        default="", description="folder with the raw dataset files (unused by embedded)"
    )
    shards = luigi.ListParameter(
        default=[],
        description="raw folders added later (a new dump, a new month), in arrival order: each is read, "
        "validated and cached once and deduplicated against everything before it",
    )
    dataset_options = luigi.DictParameter(default={}, description='recipe options, e.g. {"n_pairs": 2000}')
    data_seed = luigi.IntParameter(default=0, description="seed of data generation, Doc2Vec, Annoy, features")
    reject_budget = luigi.OptionalFloatParameter(
        default=None, description="largest share of input pairs that may be rejected (default: the profile's)"
    )

    def shard_dirs(self) -> list[str]:
        """Every raw folder of the dataset, first ``raw_dir`` then ``shards`` in arrival order."""
        if self.shards and self.dataset == "embedded":
            raise ValueError(
                "shards need a recipe that reads raw files; the embedded dataset is generated (change its "
                "dataset_options instead)"
            )
        return [self.raw_dir, *self.shards]

    def effective_reject_budget(self) -> float:
        return self.settings.reject_budget if self.reject_budget is None else float(self.reject_budget)

    def recipe_options(self) -> dict[str, Any]:
        options = dict(self.settings.dataset_options) if self.dataset == "embedded" else {}
        options.update(self.settings.recipe_option_changes)
        options.update(recursively_unfreeze(self.dataset_options))
        if self.dataset == "embedded":
            options.setdefault("seed", self.data_seed)
        return options


class VariantChoice:
    """A method variant with the user's changes to it (a Train, Evaluate, Tune ... of that variant)."""

    variant = luigi.Parameter(default="ours", description="method variant (pipeline/variants.py)")
    variant_overrides = luigi.DictParameter(
        default={}, description='loss parameter changes, e.g. {"within_modality": {"alpha": 0.5}}'
    )

    def variant_spec(self) -> Variant:
        """The variant with the run's changes to it (``--set variants...``) and this task's own on top."""
        return resolved_variant(self.settings, self.variant, recursively_unfreeze(self.variant_overrides))

    def train_settings(self) -> TrainSettings:
        """The profile's training settings with this variant's ``train`` overrides applied."""
        return self.variant_spec().train_settings(self.settings.train)


class GridParams:
    variants = luigi.ListParameter(
        default=[],
        description="variants to train and compare (default: the paper's grid for the dataset, see "
        "pipeline.variants.paper_grid)",
    )
    seeds = luigi.ListParameter(
        default=[],
        description="training seeds of every variant (default: the profile's, which gives the headline's "
        "baseline and method several seeds)",
    )
    variant_overrides = luigi.DictParameter(
        default={}, description='per-variant loss changes: {"ours": {"within_modality": {"alpha": 0.5}}}'
    )
    protocol = luigi.Parameter(
        default="",
        description="shared (every variant at the profile's settings), tuned (each variant with a search space "
        "at the settings it chose on validation, the same trial budget for all) or both; default: the profile's",
    )

    def protocols(self) -> tuple[str, ...]:
        chosen = self.protocol or self.settings.tuning.protocol
        return ("shared", "tuned") if chosen == "both" else (chosen,)

    def tuned_variants(self) -> list[str]:
        """The variants with a search space, when the tuned protocol runs."""
        if "tuned" not in self.protocols():
            return []
        return [name for name in self.variant_names() if VARIANTS[name].search_space is not None]

    def shared_variants(self) -> list[str]:
        """Every variant when the shared protocol runs, else the ones not tuned (they have one setting)."""
        if "shared" in self.protocols():
            return self.variant_names()
        return [name for name in self.variant_names() if name not in self.tuned_variants()]

    def seeds_for(self, variant: str) -> list[int]:
        """``--seeds`` when given, else the profile's seeds for ``variant``."""
        return [int(s) for s in self.seeds] or list(self.settings.seeds_for(variant))

    def seed_plan(self) -> dict[str, list[int]]:
        return {variant: self.seeds_for(variant) for variant in self.variant_names()}

    def overrides_for(self, variant: str) -> dict[str, Any]:
        return recursively_unfreeze(self.variant_overrides).get(variant, {})

    def variant_names(self) -> list[str]:
        """``variants``, or Tables 1 and 4 (plus Table 2 for a dataset with several captions per image)."""
        return list(self.variants) or list(paper_grid(self.dataset in CAPTION_GROUP_RECIPES))
