"""The fixed protocol of a test-split evaluation: the seed every random draw uses, the settings of the
full-ranking and calibration metrics, and how the test pairs map to distinct images and texts.

Why fixed here rather than per call: every variant and training seed must be scored on the same task (the
same distractors, the same folds, the same sampled PR pairs), so rows of one table compare like with like;
``pipeline.tasks.evaluation.Evaluate`` hashes these settings into its output path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from evaluation.retrieval import coco_folds, full_ranking_metrics

#: distractors are drawn with this seed for every variant and training seed, so rows compare the same task
EVAL_SEED = 0

#: the layout of ``metrics.json`` (hashed into Evaluate's output path, so a run root never mixes layouts):
#: 2 spells every key ``neighbor`` (``neighbor_preservation``, ``neighbor_preservation_at_k``); 3 tells the
#: pairs of one image by its path (COCO's and Flickr30k's captions: ``captions_per_image``, where 2 ranked
#: every pair's copy of the image as a separate item)
METRICS_SCHEMA = 3

#: settings of the full-ranking and calibration metrics (hashed into Evaluate's output path)
FULL_EVAL = {
    "map_k": 5,
    "recall_ks": [1, 5, 10],
    # the 1K protocol (folds of 1000 images, averaged) applies from this many distinct test images (COCO 5K)
    "fold_images": 1000,
    "min_images_for_folds": 5000,
    # the PR curve sorts n^2 scores: above this many test pairs it uses a fixed-seed sample of them
    "pr_max_pairs": 5000,
    "pr_curve_points": 500,
    "score_queries": 1000,
    "score_bins": 50,
}


@dataclass
class RetrievalLayout:
    """How the test pairs map to distinct images and texts for full-gallery retrieval.

    ``protocol`` is ``"pairs"`` (every pair its own image and text), ``"captions_per_image"`` (groups
    share one image: COCO / Flickr30k captions) or ``"images_per_text"`` (groups share one text: the
    images of one GoodNews article). ``image_positions`` / ``text_positions`` are the test positions of
    the distinct items; ``image_index`` / ``text_index`` give, per test position, its item's index in
    them.
    """

    protocol: str
    image_positions: np.ndarray
    text_positions: np.ndarray
    image_index: np.ndarray
    text_index: np.ndarray


def retrieval_layout(group_ids: np.ndarray, image_ids: np.ndarray, texts: np.ndarray) -> RetrievalLayout:
    """Detect the retrieval protocol from the test pairs' groups, images and texts. ``image_ids`` name each
    pair's image (pairs showing the same image share one: the image path, not a cache row, which every
    pair gets its own of).

    Groups whose pairs share neither one image nor one text (a mix) fall back to ``"pairs"``: then the
    other pairs of a group count as negatives in the full ranking (n-way R@1 still excludes them).
    """
    groups = np.asarray(group_ids)
    n = len(groups)
    own = np.arange(n)
    codes = pd.factorize(pd.Series(groups))[0]
    if codes.max(initial=-1) + 1 == n:
        return RetrievalLayout("pairs", own, own, own, own)
    # codes number groups in order of first appearance, so first[c] is the first row of group c
    first = np.unique(codes, return_index=True)[1]
    frame = pd.DataFrame({"group": codes, "image": np.asarray(image_ids), "text": np.asarray(texts)})
    per_group = frame.groupby("group").nunique()
    if (per_group["image"] == 1).all():
        return RetrievalLayout("captions_per_image", first, own, codes, own)
    if (per_group["text"] == 1).all():
        return RetrievalLayout("images_per_text", own, first, own, codes)
    return RetrievalLayout("pairs", own, own, own, own)


def _swap_directions(metrics: dict[str, Any]) -> dict[str, Any]:
    """Rename i2t <-> t2i (and image <-> text counts) of a result computed with the modalities swapped."""
    renamed = {}
    for key, value in metrics.items():
        for a, b in (("i2t", "t2i"), ("t2i", "i2t"), ("n_images", "n_texts"), ("n_texts", "n_images")):
            if key.startswith(a):
                key = b + key[len(a) :]
                break
        renamed[key] = value
    return renamed


def full_ranking(
    image: np.ndarray, text: np.ndarray, layout: RetrievalLayout, return_ranks: bool = False
) -> dict[str, Any]:
    """Full-gallery Recall@K, medR, meanR, mAP@k over the distinct test items (VSE++ protocol, Bleeker §3).

    ``image`` / ``text`` are the row-aligned test embeddings. With several captions per image, an image
    query is right when any of its captions ranks high; with several images per text, the roles are
    swapped (the function ranks one side with several positives). From ``min_images_for_folds`` distinct
    gallery images on the several-positives side, the first ``fold_images * n_folds`` of them are also
    evaluated in folds of ``fold_images`` (the COCO 1K protocol) and averaged. ``return_ranks`` adds each
    direction's per-query ranks to ``"all"`` (``i2t_ranks`` / ``t2i_ranks``).
    """
    settings = FULL_EVAL
    swap = layout.protocol == "images_per_text"
    if swap:
        owners, members, owner_of = text[layout.text_positions], image, layout.text_index
    else:
        owners, members = image[layout.image_positions], text[layout.text_positions]
        owner_of = layout.image_index[layout.text_positions] if layout.protocol != "pairs" else None
    options = {"ks": settings["recall_ks"], "map_k": settings["map_k"]}
    result: dict[str, Any] = {"protocol": layout.protocol}
    every = full_ranking_metrics(owners, members, owner_of, return_ranks=return_ranks, **options)
    result["all"] = _swap_directions(every) if swap else every
    n_owners = len(owners)
    if n_owners >= settings["min_images_for_folds"]:
        n_folds = n_owners // settings["fold_images"]
        kept = n_folds * settings["fold_images"]
        owner_ids = np.arange(len(members)) if owner_of is None else np.asarray(owner_of)
        in_folds = owner_ids < kept
        folds = coco_folds(owners[:kept], members[in_folds], owner_ids[in_folds], n_folds, **options)
        mean = _swap_directions(folds["mean"]) if swap else folds["mean"]
        result["folds_1k"] = {"n_folds": n_folds, "fold_images": folds["fold_images"], "mean": mean}
    return result
