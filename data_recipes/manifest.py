"""The one manifest format every recipe produces.

A manifest is a pandas DataFrame (stored as parquet) with one row per image-text pair:

=============  ========  =====================================================================
column         required  meaning
=============  ========  =====================================================================
pair_id        yes       unique string id of the pair (stable across rebuilds)
image_path     yes       absolute path of the image file, or relative to ``RecipeResult.image_root``
text           yes       the text paired with the image (UTF-8, non-empty)
group_id       no        pairs sharing an image / a caption set (e.g. COCO's 5 captions): same id
split          no        a split given by the dataset (e.g. Karpathy); else decided by hash
source         no        which raw file / shard the pair came from
=============  ========  =====================================================================

Ground truth used only for evaluation (topics, injected duplicate clusters) is *not* in the manifest:
a recipe returns it separately in ``RecipeResult.ground_truth`` (indexed by pair_id) so training never
sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("pair_id", "image_path", "text")
OPTIONAL_COLUMNS = ("group_id", "split", "source")
VALID_SPLITS = ("train", "val", "test")


class ManifestError(ValueError):
    """A manifest does not follow the format; the message says what to fix."""


@dataclass
class RecipeResult:
    """What a recipe returns: the manifest, where relative image paths start, optional ground truth."""

    manifest: pd.DataFrame
    image_root: Path | None = None
    ground_truth: pd.DataFrame | None = None
    notes: dict = field(default_factory=dict)


def check_manifest_columns(manifest: pd.DataFrame) -> pd.DataFrame:
    """Check the columns and their types; returns the manifest with string-typed id/path/text columns.

    Row-level problems (empty text, duplicate ids, bad images) are not errors here: validation counts
    and rejects them (``data_recipes.validate``).
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in manifest.columns]
    if missing:
        raise ManifestError(
            f"manifest lacks required column(s) {missing}; a manifest needs {list(REQUIRED_COLUMNS)} "
            f"and may have {list(OPTIONAL_COLUMNS)}"
        )
    out = manifest.copy()
    for column in ("pair_id", "image_path"):
        out[column] = out[column].astype(str)
    if "split" in out.columns:
        bad = set(out["split"].dropna().unique()) - set(VALID_SPLITS)
        if bad:
            raise ManifestError(
                f"split column holds {sorted(bad)}; allowed values are {VALID_SPLITS} or empty"
            )
    return out


def resolve_image_paths(manifest: pd.DataFrame, image_root: Path | None) -> pd.DataFrame:
    """Make every ``image_path`` absolute (relative ones are taken from ``image_root``)."""
    if image_root is None:
        return manifest
    out = manifest.copy()
    root = Path(image_root)
    out["image_path"] = [p if Path(p).is_absolute() else str(root / p) for p in out["image_path"]]
    return out


def require_raw_dir(raw_dir: str | Path | None, recipe: str, holding: str) -> Path:
    """``raw_dir`` as a Path, or a ``FileNotFoundError`` saying what the folder must hold: every recipe that
    reads downloaded files starts with this check, so a missing ``--raw-dir`` fails with the same message."""
    if raw_dir is None or not Path(raw_dir).is_dir():
        raise FileNotFoundError(f"{recipe} needs raw_dir, {holding}; got {raw_dir}")
    return Path(raw_dir)


def image_ids(manifest: pd.DataFrame) -> np.ndarray:
    """One integer per distinct image (pairs showing the same image share it; every pair has a cache row of
    its own, so cache rows do not tell)."""
    return pd.factorize(manifest["image_path"].astype(str))[0]


def integer_group_ids(manifest: pd.DataFrame) -> pd.Series:
    """One integer per group (rows sharing ``group_id``), or per pair when the dataset has no groups."""
    keys = manifest["pair_id"]
    if "group_id" in manifest.columns:
        keys = manifest["group_id"].astype("string").fillna(manifest["pair_id"])
    return pd.Series(pd.factorize(keys)[0], index=manifest.index, dtype="int64")
