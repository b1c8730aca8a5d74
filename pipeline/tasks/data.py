"""Dataset preparation: recipe -> validated manifest + image cache per shard of raw data, shards stacked,
near-duplicate removal (incremental over shards), splits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import luigi
import numpy as np
import pandas as pd

from common.run_folder import META_FILE
from data_recipes import build_recipe
from data_recipes.image_cache import (
    DEFAULT_PLACEHOLDER_MIN_PATHS,
    ShardedImageCache,
    build_image_cache,
    load_image_cache,
    load_image_shards,
)
from data_recipes.manifest import (
    ManifestError,
    check_manifest_columns,
    integer_group_ids,
    resolve_image_paths,
)
from data_recipes.validate import (
    RejectBudgetExceeded,
    check_reject_budget,
    reject_counts,
    validate_records,
)
from pipeline.config.plan import RunPlan
from pipeline.engine.outputs import read_json, save_frame, write_json
from pipeline.engine.task import HashedTask
from pipeline.steps.dedup import deduplicate_reusing
from pipeline.steps.dedup_quality import dedup_precision_recall
from pipeline.steps.lsh_store import load_dedup_index, save_dedup_index
from pipeline.steps.splits import SPLIT_SALT, assign_splits
from pipeline.steps.stacking import CONTENT_HASH, stack_shards
from pipeline.tasks.base import PipelineTask

#: what every dataset task writes: the manifest of the pairs it keeps (``cache_row`` into the image cache)
MANIFEST_OUTPUT = {"manifest": "manifest.parquet"}
#: the recipe's evaluation-only columns (topic, duplicate clusters, ...), when the dataset has them
PREPARED_OUTPUTS = {
    **MANIFEST_OUTPUT,
    "ground_truth": "ground_truth.parquet",
    "rejects": "rejects.csv",
    "report": "dataset_report.json",
}


class ManifestTask:
    """Reader of the manifest every dataset task writes (mixed into the tasks that write it)."""

    def manifest(self) -> pd.DataFrame:
        return self.load("manifest")


class PreparedTask(ManifestTask):
    """Readers of what the preparation tasks write besides the manifest."""

    def ground_truth(self) -> pd.DataFrame | None:
        """The recipe's evaluation-only columns (topic, duplicate clusters, ...); None when it has none."""
        return self.load("ground_truth", missing_ok=True)


class PrepareShard(PreparedTask, PipelineTask):
    """One raw folder -> validated manifest (``cache_row`` into this shard's cache) + its image cache.

    Bad rows are rejected with a reason into ``rejects.csv`` (nothing disappears silently). The output
    depends only on this folder and the decoding settings, so a shard added later never makes an earlier one
    decode its images again. What needs every shard (placeholders, a pair_id repeated across shards) and
    the reject budget (a gate, not part of what is decoded) are decided by PrepareDataset: see
    :mod:`pipeline.steps.stacking`.
    """

    tokenizes = True
    shard_dir = luigi.Parameter(default="", description="raw folder of this shard (one of the plan's data.raw_dir, data.shards)")
    outputs = {**PREPARED_OUTPUTS, "images": "images.npy"}

    def config(self) -> dict[str, Any]:
        return {
            "dataset": self.run_plan.recipe,
            "raw_dir": str(Path(self.shard_dir).resolve()) if self.shard_dir else "",
            "options": self.run_plan.recipe_options(),
            "image_cache_size": self.settings.data.image_cache_size,
            # placeholders are left in the cache and decided over all shards (content_hash column)
            "placeholders": "decided_by_stacking",
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        recipe = build_recipe(
            self.run_plan.recipe, self.shard_dir or None, work_dir / "recipe", **self.run_plan.recipe_options()
        )
        manifest = resolve_image_paths(check_manifest_columns(recipe.manifest), recipe.image_root)
        n_input = len(manifest)
        kept, record_rejects = validate_records(manifest)
        cache = build_image_cache(
            kept,
            self.settings.data.image_cache_size,
            self.work_path(work_dir, "images"),
            placeholder_min_paths=None,
        )
        rejects = pd.concat([record_rejects, cache.rejects], ignore_index=True)
        rejects.to_csv(self.work_path(work_dir, "rejects"), index=False)
        rows = {pair_id: row for row, pair_id in enumerate(cache.pair_ids)}
        kept = kept[kept["pair_id"].isin(rows)].copy()
        kept["cache_row"] = kept["pair_id"].map(rows).astype("int64")
        kept[CONTENT_HASH] = kept["pair_id"].map(dict(zip(cache.pair_ids, cache.content_hashes, strict=True)))
        # files the recipe wrote inside the work folder keep their place once it is renamed into place
        kept["image_path"] = kept["image_path"].str.replace(
            str(work_dir), str(self.output_dir()), regex=False
        )
        save_frame(self.work_path(work_dir, "manifest"), kept.reset_index(drop=True))
        if recipe.ground_truth is not None:
            save_frame(self.work_path(work_dir, "ground_truth"), recipe.ground_truth.reset_index(drop=True))
        summary = {
            "raw_dir": self.config()["raw_dir"],
            "n_input": n_input,
            "n_kept": len(kept),
            "n_rejected": len(rejects),
            "rejects_by_reason": reject_counts(rejects),
            "image_cache": cache.stats,
            "recipe_notes": recipe.notes,
        }
        write_json(self.work_path(work_dir, "report"), summary)
        return summary


class ShardCount:
    """How many of the plan's raw folders a dataset task stacks: all of them, or the first few (the dataset as
    it was before the last folder arrived, which incremental deduplication builds on)."""

    shard_count = luigi.IntParameter(default=-1, description="the first N raw folders of the plan (-1: all)")

    def shard_dirs(self) -> list[str]:
        folders = self.run_plan.shard_dirs()
        return folders if self.shard_count < 0 else folders[: self.shard_count]


class PrepareDataset(PreparedTask, ShardCount, PipelineTask):
    """Every shard's manifest stacked in arrival order (``cache_row`` global over the shard caches listed in
    ``image_shards.json``). A pair_id already used by an earlier shard is rejected as ``duplicate_pair_id``.
    """

    outputs = {**PREPARED_OUTPUTS, "image_shards": "image_shards.json"}

    def images(self) -> np.ndarray | ShardedImageCache:
        """The image cache, indexed by the manifest's ``cache_row`` (the shards' caches, read as one)."""
        return load_prepared_images(self.output_dir())

    def requires(self) -> list[PrepareShard]:
        return [self.clone(PrepareShard, shard_dir=folder) for folder in self.shard_dirs()]

    def config(self) -> dict[str, Any]:
        # the upstream signatures are hashed as a set; the order of shards matters (first id wins). The
        # reject budget is a gate, not part of the output: see complete()
        return {
            "shards": [shard.signature() for shard in self.requires()],
            "placeholder_min_paths": DEFAULT_PLACEHOLDER_MIN_PATHS,
        }

    def complete(self) -> bool:
        # a dataset built under a larger budget is checked again (from its report, no work) when the
        # budget is lowered: over it, the task is not complete and its rebuild stops with the message
        if not super().complete():
            return False
        try:
            self._enforce_budgets(self.load("report"))
        except RejectBudgetExceeded:
            return False
        return True

    def run(self) -> None:
        if (self.output_dir() / META_FILE).exists():
            # built before under a larger budget: its report says why it stops now, and building it again
            # would only leave a failed partial folder beside it
            self._enforce_budgets(self.load("report"))
        super().run()

    def _enforce_budgets(self, report: dict[str, Any]) -> None:
        budget = self.settings.data.reject_budget
        # each shard on its own too: a broken new dump should not hide behind a large clean history
        for shard in report["shards"] if report["n_shards"] > 1 else []:
            try:
                check_reject_budget(shard["n_input"], shard["rejects_by_reason"], budget)
            except RejectBudgetExceeded as error:
                raise RejectBudgetExceeded(f"shard {shard['raw_dir']}: {error}") from None
        check_reject_budget(report["n_input"], report["rejects_by_reason"], budget)

    def produce(self, work_dir: Path) -> dict[str, Any]:
        shards = self.requires()
        stacked = stack_shards(
            [shard.manifest() for shard in shards],
            [len(load_image_cache(shard.output_path("images"))) for shard in shards],
            [shard.load("rejects") for shard in shards],
            DEFAULT_PLACEHOLDER_MIN_PATHS,
        )
        stacked.rejects.to_csv(self.work_path(work_dir, "rejects"), index=False)
        shard_reports = [
            {
                **report,
                # the shard's rejects once stacked (its placeholders and repeated ids included), and what it
                # keeps after them: every shard's kept and rejected add up to what it read
                "n_kept": report["n_input"] - len(rejects),
                "n_rejected": len(rejects),
                "rejects_by_reason": reject_counts(rejects),
            }
            for report, rejects in zip((shard.load("report") for shard in shards), stacked.by_shard, strict=True)
        ]
        n_input = sum(report["n_input"] for report in shard_reports)
        summary = {
            "n_input": n_input,
            "n_kept": len(stacked.manifest),
            "n_rejected": len(stacked.rejects),
            "rejects_by_reason": reject_counts(stacked.rejects),
            "reject_budget": self.settings.data.reject_budget,
            "n_shards": len(shards),
            "shards": shard_reports,
            "placeholders": stacked.stats,
            # single-shard keys the report reads (the first shard's recipe notes and cache stats)
            "image_cache": shard_reports[0]["image_cache"],
            "recipe_notes": shard_reports[0]["recipe_notes"],
        }
        # after the rejects are written: a stopped build leaves them in the .partial folder to look at
        self._enforce_budgets(summary)
        save_frame(self.work_path(work_dir, "manifest"), stacked.manifest)
        write_json(
            self.work_path(work_dir, "image_shards"),
            [os.path.relpath(shard.output_path("images"), self.output_dir()) for shard in shards],
        )
        truths = [shard.ground_truth() for shard in shards]
        if any(truth is not None for truth in truths):
            save_frame(
                self.work_path(work_dir, "ground_truth"),
                pd.concat([t for t in truths if t is not None], ignore_index=True),
            )
        write_json(self.work_path(work_dir, "report"), summary)
        return {key: value for key, value in summary.items() if key != "shards"}


def load_prepared_images(prepared_dir: Path) -> np.ndarray | ShardedImageCache:
    """The image cache a PrepareDataset output points to, indexed by its manifest's ``cache_row``."""
    prepared_dir = Path(prepared_dir)
    relative = read_json(prepared_dir / PrepareDataset.outputs["image_shards"])
    return load_image_shards([(prepared_dir / path).resolve() for path in relative])


class Deduplicate(ManifestTask, ShardCount, PipelineTask):
    """MinHash LSH over word shingles of the text; keeps one pair per duplicate cluster.

    With shards, this builds on the previous shards' Deduplicate: it loads their persisted LSH index and
    hashes only the new pairs, and keeps what deduplicating the grown dataset at once keeps (the smallest
    pair_id of each cluster, so a later pair may displace an earlier one: see
    :func:`pipeline.steps.dedup.deduplicate_reusing`).
    """

    outputs = {
        **MANIFEST_OUTPUT,
        "index": "dedup_index.npz",
        "clusters": "clusters.json",
        "report": "dedup_report.json",
    }

    def requires(self) -> dict[str, HashedTask]:
        required: dict[str, HashedTask] = {"prepared": self.clone(PrepareDataset)}
        folders = len(self.shard_dirs())
        if folders > 1:
            required["previous"] = self.clone(Deduplicate, shard_count=folders - 1)
        return required

    def config(self) -> dict[str, Any]:
        return self.settings.section("dedup")

    def produce(self, work_dir: Path) -> dict[str, Any]:
        settings = self.config()
        prepared = self.requires()["prepared"]
        manifest = prepared.manifest()
        previous = self.requires().get("previous")
        stored = None if previous is None else load_dedup_index(previous.output_path("index"))
        result, index = deduplicate_reusing(
            stored, manifest, settings["threshold"], settings["num_perm"], settings["shingle_size"]
        )
        kept = result.kept.reset_index(drop=True)
        save_frame(self.work_path(work_dir, "manifest"), kept)
        save_dedup_index(index, self.work_path(work_dir, "index"))
        clusters = index.clusters()
        report = {
            **result.report,
            "n_input": len(manifest),
            "n_kept": len(kept),
            "n_removed": len(manifest) - len(kept),
            "n_clusters": len(clusters),
            "n_new": result.report["n_signatures_computed"],
        }
        if previous is not None:
            # pairs the previous build kept that the grown dataset drops: a later pair with a smaller id in
            # their cluster (rows now rejected upstream, e.g. as placeholders, are not counted)
            before = set(previous.manifest()["pair_id"]) & set(manifest["pair_id"])
            report["n_displaced"] = len(before - set(kept["pair_id"]))
        ground_truth = prepared.ground_truth()
        if ground_truth is not None and "dup_cluster" in ground_truth.columns:
            present = ground_truth[ground_truth["pair_id"].isin(manifest["pair_id"])]
            report["against_injected"] = dedup_precision_recall(clusters, present)
        write_json(self.work_path(work_dir, "clusters"), clusters)
        write_json(self.work_path(work_dir, "report"), report)
        return {key: value for key, value in report.items() if key != "example_clusters"}


class Split(ManifestTask, PipelineTask):
    """Train/val/test by a hash of pair_id (or group_id), stable when data is added; the profile's fractions
    (80/10/10 unless it says otherwise)."""

    outputs = MANIFEST_OUTPUT

    def requires(self) -> Deduplicate:
        return self.clone(Deduplicate)

    def config(self) -> dict[str, Any]:
        return {"fractions": self.settings.split.fractions(), "salt": SPLIT_SALT}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        config = self.config()
        manifest = assign_splits(self.requires().manifest(), **config)
        manifest = manifest.sort_values("pair_id", kind="stable").reset_index(drop=True)
        check_split_sizes(manifest, self.run_plan, config["fractions"])  # before anything is written
        save_frame(self.work_path(work_dir, "manifest"), manifest)
        return {"counts": manifest["split"].value_counts().to_dict()}


def check_split_fits(split: Split) -> None:
    """:func:`check_split_sizes` of a finished Split under its run's plan: a setting changed since it was made
    (the n of an n-way task, ``neighbors.k``, in no Split's hash) is checked before the work that needs it."""
    check_split_sizes(split.manifest(), split.run_plan, split.settings.split.fractions())


def split_needs(plan: RunPlan) -> dict[str, int]:
    """The n of the n-way task each split is scored by: checkpoint selection on val (the largest any variant
    of the run selects by), the report's on test; 2 (a pair and one other item) where none is."""
    selecting = [t for t in (plan.train_settings(name) for name in plan.variants) if t.selection_metric.n_way]
    return {"train": 2, "val": max([t.selection_n_way for t in selecting], default=2), "test": plan.settings.eval.n_way}


def check_split_sizes(manifest: pd.DataFrame, plan: RunPlan, fractions: dict[str, float]) -> None:
    """Every split can be scored as the run scores it, once the data's counts are known and before any
    training: each query of an n-way task needs n - 1 items outside its own group (several captions of one
    image are one group), and the k-NN tables need more train pairs than k. One line otherwise."""
    groups = integer_group_ids(manifest).to_numpy()
    needs = split_needs(plan)
    for split in fractions:
        rows = (manifest["split"] == split).to_numpy()
        n, n_way = int(rows.sum()), needs.get(split, 2)
        largest = int(np.bincount(groups[rows]).max()) if n else 0
        if n - largest < n_way - 1 or n < 2:
            raise ManifestError(
                f"split {split!r} has {n} pairs after dedup ({n - largest} outside its largest group), too few for "
                f"the {n_way}-way task it is scored by ({len(manifest)} pairs in all); the dataset is too small for "
                f"the split {fractions}: give more pairs (a few hundred at least), or lower the n of that task"
            )
    k, n_train = plan.settings.neighbors.k, int((manifest["split"] == "train").sum())
    if n_train <= k:
        raise ManifestError(
            f"the train split has {n_train} pairs, not more than neighbors.k = {k} nearest neighbors per pair: give "
            f"more pairs or lower neighbors.k (--set neighbors.k={max(1, n_train // 4)})"
        )
