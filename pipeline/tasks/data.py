"""Dataset preparation: recipe -> validated manifest + image cache, near-duplicate removal, splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from data_recipes import build_recipe
from data_recipes.manifest import check_manifest_columns, resolve_image_paths
from data_recipes.validate import enforce_reject_budget, reject_counts, validate_records
from pipeline.base import HashedTask
from pipeline.io import save_frame, write_json
from pipeline.steps.dedup import dedup_precision_recall, deduplicate
from pipeline.steps.image_cache import build_image_cache
from pipeline.steps.splits import DEFAULT_FRACTIONS, assign_splits
from pipeline.tasks.params import DatasetParams

MANIFEST = "manifest.parquet"
GROUND_TRUTH = "ground_truth.parquet"
IMAGE_CACHE = "images.npy"
REJECTS = "rejects.csv"


def read_manifest(task_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(Path(task_dir) / MANIFEST)


def read_ground_truth(task_dir: Path) -> pd.DataFrame | None:
    path = Path(task_dir) / GROUND_TRUTH
    return pd.read_parquet(path) if path.exists() else None


def integer_group_ids(manifest: pd.DataFrame) -> pd.Series:
    """One integer per group (rows sharing ``group_id``), or per pair when the dataset has no groups."""
    keys = manifest["pair_id"]
    if "group_id" in manifest.columns:
        keys = manifest["group_id"].astype("string").fillna(manifest["pair_id"])
    return pd.Series(pd.factorize(keys)[0], index=manifest.index, dtype="int64")


class PrepareDataset(DatasetParams, HashedTask):
    """Recipe -> manifest (pair_id, image_path, text, optional group_id/split, cache_row) + image cache.

    Bad rows are rejected with a reason into ``rejects.csv`` (nothing disappears silently); the run stops
    with a clear message when rejects exceed ``reject_budget`` of the input.
    """

    def config(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "raw_dir": str(Path(self.raw_dir).resolve()) if self.raw_dir else "",
            "options": self.recipe_options(),
            "image_cache_size": self.settings.image_cache_size,
            "reject_budget": self.effective_reject_budget(),
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        recipe = build_recipe(
            self.dataset, self.raw_dir or None, work_dir / "recipe", **self.recipe_options()
        )
        manifest = resolve_image_paths(check_manifest_columns(recipe.manifest), recipe.image_root)
        n_input = len(manifest)
        kept, record_rejects = validate_records(manifest)
        cache = build_image_cache(kept, self.settings.image_cache_size, work_dir / IMAGE_CACHE)
        rejects = pd.concat([record_rejects, cache.rejects], ignore_index=True)
        rejects.to_csv(work_dir / REJECTS, index=False)
        enforce_reject_budget(n_input, rejects, self.effective_reject_budget())
        rows = {pair_id: row for row, pair_id in enumerate(cache.pair_ids)}
        kept = kept[kept["pair_id"].isin(rows)].copy()
        kept["cache_row"] = kept["pair_id"].map(rows).astype("int64")
        # files the recipe wrote inside the work folder keep their place once it is renamed into place
        kept["image_path"] = kept["image_path"].str.replace(
            str(work_dir), str(self.output_dir()), regex=False
        )
        save_frame(work_dir / MANIFEST, kept.reset_index(drop=True))
        if recipe.ground_truth is not None:
            save_frame(work_dir / GROUND_TRUTH, recipe.ground_truth.reset_index(drop=True))
        summary = {
            "n_input": n_input,
            "n_kept": len(kept),
            "n_rejected": len(rejects),
            "rejects_by_reason": reject_counts(rejects),
            "reject_budget": self.effective_reject_budget(),
            "image_cache": cache.stats,
            "recipe_notes": recipe.notes,
        }
        write_json(work_dir / "dataset_report.json", summary)
        return summary


class Deduplicate(DatasetParams, HashedTask):
    """MinHash LSH over word shingles of the text; keeps one pair per duplicate cluster."""

    def requires(self) -> PrepareDataset:
        return self.clone(PrepareDataset)

    def config(self) -> dict[str, Any]:
        s = self.settings
        return {
            "threshold": s.dedup_threshold,
            "num_perm": s.dedup_num_perm,
            "shingle_size": s.dedup_shingle_size,
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        prepared = self.input_dir(self.requires())
        manifest = read_manifest(prepared)
        result = deduplicate(manifest, **self.config())
        save_frame(work_dir / MANIFEST, result.kept.reset_index(drop=True))
        report = dict(result.report)
        ground_truth = read_ground_truth(prepared)
        if ground_truth is not None and "dup_cluster" in ground_truth.columns:
            present = ground_truth[ground_truth["pair_id"].isin(manifest["pair_id"])]
            report["against_injected"] = dedup_precision_recall(result.clusters, present)
        write_json(work_dir / "clusters.json", result.clusters)
        write_json(work_dir / "dedup_report.json", report)
        return report


class Split(DatasetParams, HashedTask):
    """80/10/10 train/val/test by a hash of pair_id (or group_id), stable when data is added."""

    def requires(self) -> Deduplicate:
        return self.clone(Deduplicate)

    def config(self) -> dict[str, Any]:
        return {"fractions": DEFAULT_FRACTIONS, "salt": "split"}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = assign_splits(read_manifest(self.input_dir(self.requires())), DEFAULT_FRACTIONS)
        manifest = manifest.sort_values("pair_id", kind="stable").reset_index(drop=True)
        save_frame(work_dir / MANIFEST, manifest)
        counts = manifest["split"].value_counts().to_dict()
        for split in DEFAULT_FRACTIONS:
            if counts.get(split, 0) < 2:
                raise ValueError(
                    f"split {split!r} has {counts.get(split, 0)} pairs after dedup; the dataset is too small "
                    "for an 80/10/10 split (use more pairs)"
                )
        return {"counts": counts}
