"""Shards stacked into one dataset that equals the one-shot build of their union.

A dataset that grows in shards (``--shards``) is prepared one shard at a time (``PrepareShard``: its rows
validated, its images decoded once into its own cache) and stacked in arrival order (``PrepareDataset``).
The grown dataset must keep exactly the pairs, rejects, duplicates and splits that preparing every row at
once keeps. Two checks look beyond one row, so a shard alone cannot decide them:

* ``duplicate_pair_id``: a row whose pair_id an earlier row used, *whatever that row's fate* (as
  :func:`data_recipes.validate.validate_records` does in one table). A later shard's row with an earlier
  shard's id is rejected as ``duplicate_pair_id`` here, even if its own shard had rejected it for another
  reason first (one-shot validation would not have looked at its image).
* ``placeholder_image``: the same decoded pixels behind at least ``placeholder_min_paths`` distinct paths.
  A placeholder whose paths straddle shards (118 in one, 10 in the next) is below the threshold in each.

Design: each shard records the content hash of every decodable image (``content_hash`` in its manifest)
and leaves placeholders in its cache; placeholders are decided here, over the stacked rows of *all*
shards, so a hash that reaches the threshold only once a later shard arrives rejects its rows in the
earlier shards too. Deciding at the merge keeps a shard's output a function of its own folder (adding a
shard never decodes an earlier one again), and the merge step is cheap (no decoding) and reruns whenever a
shard is added anyway. The alternative, passing each shard the hashes of the others, would make every
shard's output depend on every other shard and re-decode them all on each growth. What it costs: a
placeholder's pixels stay in its shard's cache, one row per pair (unreferenced by the manifest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from data_recipes.image_cache import DEFAULT_PLACEHOLDER_MIN_PATHS, find_placeholders
from data_recipes.validate import REJECT_COLUMNS, make_rejects

#: the manifest column a shard writes for the merge (dropped from the stacked manifest)
CONTENT_HASH = "content_hash"


@dataclass
class StackedShards:
    """The stacked manifest; the rejects decided by stacking, or with the shards' own rejects given, every
    reject (``by_shard``: the same rows per shard, for a per-shard reject budget)."""

    manifest: pd.DataFrame
    rejects: pd.DataFrame
    by_shard: list[pd.DataFrame] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def stack_shards(
    manifests: Sequence[pd.DataFrame],
    cache_lengths: Sequence[int],
    shard_rejects: Sequence[pd.DataFrame] | None = None,
    placeholder_min_paths: int | None = DEFAULT_PLACEHOLDER_MIN_PATHS,
) -> StackedShards:
    """Shard manifests in order, ``cache_row`` offset by the rows of earlier shard caches.

    A pair_id used by an earlier shard (kept or rejected there) rejects the row as ``duplicate_pair_id``;
    a rejected row of the shard's own (``shard_rejects``) with such an id is relabelled so. Then, when the
    manifests carry ``content_hash`` and ``placeholder_min_paths`` is set, placeholders are found over all
    stacked rows (see the module docstring).
    """
    if len(manifests) != len(cache_lengths):
        raise ValueError(f"{len(manifests)} shard manifests for {len(cache_lengths)} image caches")
    own = list(shard_rejects) if shard_rejects is not None else [make_rejects([]) for _ in manifests]
    if len(own) != len(manifests):
        raise ValueError(f"{len(own)} shard reject tables for {len(manifests)} shard manifests")
    offsets = np.concatenate(([0], np.cumsum(cache_lengths)[:-1])).astype(np.int64)
    seen: set[str] = set()
    parts, by_shard = [], []
    for index, (manifest, offset, rejects) in enumerate(zip(manifests, offsets, own, strict=True)):
        detail = f"shard {index} repeats a pair_id of an earlier shard"
        repeated = manifest["pair_id"].isin(seen)
        rejects = rejects.copy()
        relabel = rejects["pair_id"].isin(seen) & (rejects["pair_id"] != "")
        rejects.loc[relabel, "reason"] = "duplicate_pair_id"
        rejects.loc[relabel, "detail"] = detail
        new = make_rejects(
            (pair_id, "duplicate_pair_id", detail) for pair_id in manifest.loc[repeated, "pair_id"]
        )
        by_shard.append(pd.concat([rejects, new], ignore_index=True))
        # every id the shard held counts, whatever its fate (a later row repeating it is a duplicate)
        seen.update(manifest["pair_id"])
        seen.update(p for p in rejects["pair_id"] if p != "")
        part = manifest[~repeated].copy()
        part["cache_row"] = part["cache_row"].astype("int64") + offset
        part["_shard"] = index
        parts.append(part)
    stacked = pd.concat(parts, ignore_index=True)
    stats: dict = {}
    if placeholder_min_paths is not None and CONTENT_HASH in stacked.columns:
        placeholders = find_placeholders(
            stacked["image_path"].astype(str).tolist(),
            stacked[CONTENT_HASH].astype(str).tolist(),
            placeholder_min_paths,
        )
        hit = stacked["image_path"].isin(placeholders)
        for index in range(len(by_shard)):
            rows = stacked[hit & (stacked["_shard"] == index)]
            found = make_rejects(
                (p, "placeholder_image", placeholders[path])
                for p, path in zip(rows["pair_id"], rows["image_path"], strict=True)
            )
            by_shard[index] = pd.concat([by_shard[index], found], ignore_index=True)
        stats = {
            "n_placeholder_images": int(stacked.loc[hit, CONTENT_HASH].nunique()),
            "placeholder_paths": len(placeholders),
            "placeholder_pairs": int(hit.sum()),
        }
        stacked = stacked[~hit]
    manifest = stacked.drop(columns=["_shard", CONTENT_HASH], errors="ignore").reset_index(drop=True)
    all_rejects = pd.concat(by_shard, ignore_index=True)[list(REJECT_COLUMNS)]
    return StackedShards(manifest, all_rejects, by_shard, stats)
