"""The validation score checkpoints are selected by (``TrainSettings.selection = "val_rsum"``): the
full-ranking rsum of the validation split, computed by the same code as the test split's
(:func:`evaluation.protocol.full_ranking`), on at most ``max_pairs`` validation pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evaluation.protocol import EVAL_SEED, full_ranking, retrieval_layout


def sample_whole_groups(group_ids: np.ndarray, max_pairs: int, seed: int = EVAL_SEED) -> np.ndarray:
    """Row indices, in their order, of a fixed-seed sample of whole groups holding at most ``max_pairs``
    rows (every row when there are no more; a group's several captions stay together)."""
    group_ids = np.asarray(group_ids)
    if len(group_ids) <= max_pairs:
        return np.arange(len(group_ids))
    groups, sizes = np.unique(group_ids, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(groups))
    kept = order[np.cumsum(sizes[order]) <= max_pairs]
    return np.flatnonzero(np.isin(group_ids, groups[kept]))


def validation_rsum(
    group_ids: np.ndarray, image_ids: np.ndarray, texts: np.ndarray, max_pairs: int
) -> tuple[Callable[[np.ndarray, np.ndarray], dict[str, float]], dict[str, Any]]:
    """The scorer of validation embeddings (row-aligned with ``group_ids`` etc., the validation positions in
    the trainer's order) and what it ranks, for the run's metadata."""
    rows = sample_whole_groups(group_ids, max_pairs)
    layout = retrieval_layout(np.asarray(group_ids)[rows], np.asarray(image_ids)[rows], np.asarray(texts)[rows])

    def score(image: np.ndarray, text: np.ndarray) -> dict[str, float]:
        ranked = full_ranking(image[rows], text[rows], layout)["all"]
        return {
            "val_rsum": ranked["rsum"],
            **{f"val_{direction}_r@{k}": ranked[f"{direction}_r@{k}"] for direction in ("i2t", "t2i") for k in (1, 5, 10)},
        }

    described = {
        "metric": "val_rsum",
        "protocol": layout.protocol,
        "pairs_ranked": int(len(rows)),
        "validation_pairs": int(len(group_ids)),
        "sampled": bool(len(rows) < len(group_ids)),
        "sample_seed": EVAL_SEED,
    }
    return score, described
