"""Parameters shared by every task that depends on the dataset (passed down with ``Task.clone``)."""

from __future__ import annotations

from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze


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
        options.update(recursively_unfreeze(self.dataset_options))
        if self.dataset == "embedded":
            options.setdefault("seed", self.data_seed)
        return options
