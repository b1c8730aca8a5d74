"""Global calibration (Veit & Wilber, Sec. 4.3 and 4.5): the precision-recall curve and PR-AUC over all
test image-text scores ranked together, and per-query score distributions.

Why global rather than per query: retrieval metrics only compare the scores of one query, so a model whose
scores mean different things for different queries can still rank well; one threshold for all scores only
works when the scores are calibrated across queries, which the PR curve and the distributions show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evaluation.embeddings import (
    as_unit_embeddings,
    check_same_rows,
    check_same_width,
    check_seed,
    chunk_rows,
    cross_modal_scores,
    group_codes,
)
from evaluation.protocol import EVAL_SEED, FULL_EVAL, RetrievalLayout

# --------------------------------------------------------------------------------------------------
# Global calibration: PR curve, PR-AUC, score distributions (Veit & Wilber, Sec. 4.3 and 4.5)
# --------------------------------------------------------------------------------------------------


def _thin_curve(length: int, max_points: int | None) -> np.ndarray:
    if max_points is None or length <= max_points:
        return np.arange(length)
    return np.unique(np.linspace(0, length - 1, max_points).round().astype(np.int64))


def precision_recall(
    image: np.ndarray,
    text: np.ndarray,
    group_ids: Sequence | np.ndarray | None = None,
    max_curve_points: int | None = 2000,
) -> dict:
    """Global precision-recall over all test image-text scores, and PR-AUC (Veit & Wilber, Sec. 4.3).

    Every (image row, text row) score of :func:`cross_modal_scores` (dot product, or the PVSE max over
    K x K pairs for ``[n, K, d]`` embeddings) is one scored retrieval; positives are the pairs (i == j), or
    all rows sharing a ``group_ids`` label. Retrieving every score >= t gives precision P(t) and recall
    R(t); thresholds are swept from high to low with tied scores entering together. PR-AUC is the
    step-wise *average precision* AP = sum_n (R_n - R_{n-1}) P_n (no interpolation; the definition of
    ``sklearn.metrics.average_precision_score``), whose terms are non-zero only at the thresholds where
    recall grows, i.e. at the distinct scores of positives.

    Returns ``pr_auc``; the curve ``precision``, ``recall``, ``thresholds`` at those recall-raising
    thresholds in decreasing order (thinned evenly to at most ``max_curve_points`` for plotting;
    ``pr_auc`` always uses all of them); ``n_positives`` and ``n_scores``. Cost: one sort of the
    n_images * n_texts scores (memory about twice that many float64).
    """
    image = as_unit_embeddings(image, "image")
    text = as_unit_embeddings(text, "text")
    check_same_rows(image, text, "image", "text")
    check_same_width(image, text)
    if max_curve_points is not None and max_curve_points < 2:
        raise ValueError(f"max_curve_points must be >= 2 or None, got {max_curve_points}")
    groups = group_codes(group_ids, image.shape[0])

    scores = cross_modal_scores(image, text)
    positive_scores = np.sort(scores[groups[:, None] == groups[None, :]])
    all_scores = np.sort(scores, axis=None)
    thresholds = np.unique(positive_scores)[::-1]
    # counts of scores >= t, from the ascending sorted arrays
    true_positives = positive_scores.size - np.searchsorted(positive_scores, thresholds, side="left")
    retrieved = all_scores.size - np.searchsorted(all_scores, thresholds, side="left")
    precision = true_positives / retrieved
    recall = true_positives / positive_scores.size
    pr_auc = float(np.sum(np.diff(np.r_[0.0, recall]) * precision))

    keep = _thin_curve(precision.size, max_curve_points)
    return {
        "pr_auc": pr_auc,
        "precision": precision[keep],
        "recall": recall[keep],
        "thresholds": thresholds[keep],
        "n_positives": int(positive_scores.size),
        "n_scores": int(all_scores.size),
    }


def score_distribution(
    image: np.ndarray,
    text: np.ndarray,
    n_queries: int = 1000,
    seed: int = 0,
    bins: int | Sequence[float] | np.ndarray = 50,
    direction: str = "t2i",
) -> dict:
    """Per-query histograms of gallery similarities, Fig. 4 (right) of Veit & Wilber (Sec. 4.5).

    ``n_queries`` queries (texts for ``t2i``, images for ``i2t``; capped at the number available) are
    sampled without replacement with ``seed``; for each, the number of gallery items falling in each
    similarity bin is counted. ``bins`` is a bin count over [-1, 1] or explicit increasing edges; scores
    outside the edges are clipped into the end bins (cosine can overshoot +-1 by rounding).
    ``p5`` / ``p95`` are, per bin, the 5th / 95th percentile of the counts over queries (the orange lines
    bounding 90% of queries). Returns ``bin_edges``, ``bin_centres``, ``counts`` ``[n_queries, n_bins]``,
    ``query_indices``, ``p5``, ``p95``.
    """
    image = as_unit_embeddings(image, "image")
    text = as_unit_embeddings(text, "text")
    check_same_width(image, text)
    check_seed(seed)
    if direction not in ("t2i", "i2t"):
        raise ValueError(
            f"direction must be 't2i' (text queries) or 'i2t' (image queries), got {direction!r}"
        )
    if not isinstance(n_queries, (int, np.integer)) or n_queries < 1:
        raise ValueError(f"n_queries must be a positive integer, got {n_queries!r}")
    query, gallery = (text, image) if direction == "t2i" else (image, text)
    if np.ndim(bins) == 0:
        if int(bins) < 1:
            raise ValueError(f"bins must be a positive count or an array of edges, got {bins!r}")
        edges = np.linspace(-1.0, 1.0, int(bins) + 1)
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError("bin edges must be a 1-D strictly increasing array of at least 2 values")
    n_bins = edges.size - 1

    rng = np.random.default_rng(int(seed))
    chosen = np.sort(rng.choice(query.shape[0], size=min(n_queries, query.shape[0]), replace=False))
    counts = np.zeros((chosen.size, n_bins), dtype=np.int64)
    for rows in chunk_rows(chosen.size, gallery.shape[0]):
        scores = np.clip(cross_modal_scores(query[chosen[rows]], gallery), edges[0], edges[-1])
        # the right edge belongs to the last bin, as in np.histogram
        bin_index = np.minimum(np.searchsorted(edges, scores, side="right") - 1, n_bins - 1)
        offsets = np.arange(bin_index.shape[0])[:, None] * n_bins
        flat = np.bincount((bin_index + offsets).reshape(-1), minlength=bin_index.shape[0] * n_bins)
        counts[rows] = flat.reshape(-1, n_bins)
    return {
        "bin_edges": edges,
        "bin_centres": (edges[:-1] + edges[1:]) / 2,
        "counts": counts,
        "query_indices": chosen,
        "p5": np.percentile(counts, 5, axis=0),
        "p95": np.percentile(counts, 95, axis=0),
    }


# --------------------------------------------------------------------------------------------------
# The calibration of one test split, with Evaluate's fixed settings
# --------------------------------------------------------------------------------------------------


def calibration(
    image: np.ndarray, text: np.ndarray, group_ids: np.ndarray, layout: RetrievalLayout
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Global PR curve and PR-AUC (Veit & Wilber §4.3) and text-query score distributions (§4.5, Fig. 4).

    The PR curve scores every (image row, text row) of the test pairs (positives: same group); above
    ``pr_max_pairs`` pairs a fixed-seed sample of pairs is used so the n^2 sort stays bounded. Score
    distributions take ``score_queries`` distinct test texts as queries against the distinct test
    images. Returns the JSON summary and the arrays for ``curves.npz``.
    """
    settings = FULL_EVAL
    n = len(image)
    rows = np.arange(n)
    if n > settings["pr_max_pairs"]:
        rng = np.random.default_rng(EVAL_SEED)
        rows = np.sort(rng.choice(n, size=settings["pr_max_pairs"], replace=False))
    pr = precision_recall(image[rows], text[rows], group_ids[rows], settings["pr_curve_points"])
    distribution = score_distribution(
        image[layout.image_positions],
        text[layout.text_positions],
        n_queries=settings["score_queries"],
        seed=EVAL_SEED,
        bins=settings["score_bins"],
        direction="t2i",
    )
    summary = {
        "pr": {
            "pr_auc": pr["pr_auc"],
            "n_positives": pr["n_positives"],
            "n_scores": pr["n_scores"],
            "n_pairs": int(len(rows)),
        },
        "score_distribution": {
            "direction": "t2i",
            "n_queries": int(len(distribution["query_indices"])),
            "n_bins": int(len(distribution["bin_centres"])),
            "gallery_size": int(len(layout.image_positions)),
        },
    }
    arrays = {
        "pr_precision": pr["precision"],
        "pr_recall": pr["recall"],
        "pr_thresholds": pr["thresholds"],
        **{f"score_{key}": np.asarray(value) for key, value in distribution.items()},
    }
    return summary, arrays
