"""A gallery to index, read from a folder of images and/or a table of the ``pairs`` recipe's format, decoded,
validated and counted exactly as the pipeline's ``PrepareShard`` does (``validate_records`` for ids and texts,
``build_image_cache`` for the images); what is rejected is skipped and listed with its reason.

Items: a folder gives image-only items (id = the path relative to the folder); a table gives one item per row
(id = ``pair_id``), image and text, or text only where ``image_path`` is empty.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from data_recipes import build_recipe
from data_recipes.image_cache import build_image_cache
from data_recipes.manifest import check_manifest_columns, resolve_image_paths
from data_recipes.validate import make_rejects, reject_counts, validate_records


@dataclass
class GalleryBatch:
    """Items to add: ``items`` (``item_id``, ``path``, ``text`` or None, ``has_image``), the thumbnails of the
    items with an image (uint8 ``[n, S, S, 3]``, in item order) and the rejected rows."""

    items: pd.DataFrame
    pixels: np.ndarray
    rejects: pd.DataFrame
    stats: dict = field(default_factory=dict)


def folder_manifest(folder: Path) -> pd.DataFrame:
    """Every file under ``folder`` (hidden ones left out) as an image-only row; a file that is not an image
    is rejected by the cache as in the pipeline."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"--images {folder} is not a folder")
    # a link that leads nowhere (dangling, or a loop) is listed too: the cache rejects it as missing_image,
    # so it is counted in rejects.csv instead of vanishing
    files = sorted(
        p
        for p in folder.rglob("*")
        if (p.is_file() or (p.is_symlink() and not p.exists()))
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    return pd.DataFrame(
        {
            "pair_id": [str(p.relative_to(folder)) for p in files],
            "image_path": [str(p.resolve()) if p.exists() else str(p.absolute()) for p in files],
            "text": [None] * len(files),
        },
        dtype=object,
    )


def table_manifest(table: Path, work_dir: Path) -> pd.DataFrame:
    """The table's rows through the ``pairs`` recipe (columns, ids, split aliases), image paths absolute;
    an empty ``image_path`` stays empty (a text-only item)."""
    recipe = build_recipe("pairs", Path(table).resolve(), work_dir)
    manifest = check_manifest_columns(recipe.manifest)
    blank = manifest["image_path"].str.strip() == ""
    resolved = resolve_image_paths(manifest, recipe.image_root)
    resolved.loc[blank, "image_path"] = ""
    return resolved[["pair_id", "image_path", "text"]].astype(object)


def read_gallery(manifest: pd.DataFrame, cache_size: int, existing_ids: Collection[str] = ()) -> GalleryBatch:
    """Validate ``manifest`` rows (``pair_id``, ``image_path`` or "", ``text`` or None) and decode their
    images to ``cache_size`` thumbnails; rows whose id is already in the index are rejected as duplicates."""
    n_input = len(manifest)
    already = manifest["pair_id"].astype(str).isin(set(existing_ids))
    rejects = [
        make_rejects(
            (pid, "duplicate_pair_id", "already in the index") for pid in manifest.loc[already, "pair_id"]
        )
    ]
    manifest = manifest.loc[~already].reset_index(drop=True)
    has_text = manifest["text"].notna()
    # texts go through the pipeline's record checks; image-only rows (no text column value) only need ids
    checked = manifest.assign(text=manifest["text"].where(has_text, "image only"))
    kept, record_rejects = validate_records(checked)
    kept.loc[~kept["pair_id"].isin(manifest.loc[has_text, "pair_id"]), "text"] = None
    rejects.append(record_rejects)
    with_image = kept[kept["image_path"].astype(str) != ""]
    pixels = np.zeros((0, cache_size, cache_size, 3), dtype=np.uint8)
    cache_stats: dict = {}
    if len(with_image):
        with tempfile.TemporaryDirectory(prefix="crossmodal-gallery-") as tmp:
            cache = build_image_cache(with_image, cache_size, Path(tmp) / "images.npy")
            pixels = np.load(Path(tmp) / "images.npy")
        rejects.append(cache.rejects)
        cache_stats = cache.stats
        kept = kept[~kept["pair_id"].isin(set(cache.rejects["pair_id"]))]
    kept = kept.reset_index(drop=True)
    items = pd.DataFrame(
        {
            "item_id": kept["pair_id"].astype(str),
            "path": kept["image_path"].astype(str),
            "text": kept["text"].astype(object).where(kept["text"].notna(), None),
            "has_image": kept["image_path"].astype(str) != "",
        }
    )
    all_rejects = pd.concat(rejects, ignore_index=True)
    stats = {
        "n_input": n_input,
        "n_kept": len(items),
        "n_images": int(items["has_image"].sum()),
        "n_texts": int(items["text"].notna().sum()),
        "n_rejected": len(all_rejects),
        "rejects_by_reason": reject_counts(all_rejects),
        "image_cache": cache_stats,
    }
    if len(pixels) != stats["n_images"]:
        raise RuntimeError(f"decoded {len(pixels)} images for {stats['n_images']} kept items with an image")
    return GalleryBatch(items=items, pixels=pixels, rejects=all_rejects, stats=stats)


def validated_batch(items: pd.DataFrame, pixels: np.ndarray) -> GalleryBatch:
    """Items already validated and decoded elsewhere (the pipeline's image cache): ``item_id``, ``path``,
    ``text``, ``has_image`` and the thumbnails of the items with an image."""
    n_images, n_texts = int(items["has_image"].sum()), int(items["text"].notna().sum())
    stats = {
        "n_input": len(items),
        "n_kept": len(items),
        "n_images": n_images,
        "n_texts": n_texts,
        "n_rejected": 0,
        "rejects_by_reason": {},
    }
    return GalleryBatch(
        items=items.reset_index(drop=True), pixels=pixels, rejects=make_rejects([]), stats=stats
    )
