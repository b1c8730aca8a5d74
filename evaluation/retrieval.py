"""Cross-modal retrieval metrics: n-way Recall@1 (Thomas & Kovashka 2020, Sec. 4.3, Table 1) and
full-gallery Recall@K, median / mean rank and mAP@k with the COCO 1K folds (Bleeker & de Rijke 2022, Sec. 3).

Why both: n-way R@1 is the paper's measure on non-literal data, where a full gallery holds many plausible
matches; the full ranking is the standard image-caption protocol the other papers compare on. Both score
through :func:`evaluation.embeddings.cross_modal_scores`; see :mod:`evaluation.embeddings` for the
shared conventions (shapes, groups, chunking, ties).
"""

from __future__ import annotations

from collections.abc import Sequence

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
from evaluation.statistics import mean_std

# --------------------------------------------------------------------------------------------------
# n-way Recall@1 (Thomas & Kovashka 2020, Sec. 4.3, Table 1)
# --------------------------------------------------------------------------------------------------


def _draw_distractors(
    groups: np.ndarray, rows: slice, n_distractors: int, rng: np.random.Generator
) -> np.ndarray:
    """For each row in ``rows``, ``n_distractors`` distinct items of another group, uniformly at random.

    Each candidate gets an iid uniform key and items of the query's own group get key +inf; the
    ``n_distractors`` smallest keys are then a uniform draw without replacement from the eligible items.
    """
    query_groups = groups[rows]
    keys = rng.random((query_groups.shape[0], groups.shape[0]))
    keys[query_groups[:, None] == groups[None, :]] = np.inf
    return np.argpartition(keys, n_distractors - 1, axis=1)[:, :n_distractors]


def _n_way_hits(
    query: np.ndarray, gallery: np.ndarray, groups: np.ndarray, n_distractors: int, rng: np.random.Generator
) -> np.ndarray:
    n = query.shape[0]
    hits = np.empty(n, dtype=bool)
    for rows in chunk_rows(n, n):
        distractors = _draw_distractors(groups, rows, n_distractors, rng)
        scores = cross_modal_scores(query[rows], gallery)
        local = np.arange(rows.stop - rows.start)
        paired = scores[local, local + rows.start]
        best_distractor = np.take_along_axis(scores, distractors, axis=1).max(axis=1)
        hits[rows] = paired > best_distractor
    return hits


def n_way_recall_at_1(
    image: np.ndarray,
    text: np.ndarray,
    n_way: int = 5,
    seed: int = 0,
    redraws: int = 1,
    group_ids: Sequence | np.ndarray | None = None,
    return_hits: bool = False,
) -> dict:
    """n-way Recall@1 of Thomas & Kovashka (ECCV 2020), Sec. 4.3 / Table 1.

    Every test image (I→T) and every test text (T→I) is a query. Its candidates are its paired item plus
    ``n_way - 1`` distractors drawn uniformly without replacement from the *non-paired* test items of the
    other modality (items sharing the query's ``group_ids`` label are excluded too). A query is a hit when
    the paired item's score (:func:`cross_modal_scores`: dot product, or for ``[n, K, d]`` embeddings the
    PVSE max over the K x K pairs) is strictly higher than every distractor's; a tie is a miss.

    The draw is repeated ``redraws`` times (independent draws per redraw and direction, all derived from
    ``seed``). Returns ``i2t`` / ``t2i`` (mean over redraws), ``*_per_draw``, ``*_std`` (sample std over
    redraws, 0.0 for one redraw), ``n_way``, ``redraws``, ``n_queries``; with ``return_hits=True`` also
    ``i2t_hits`` / ``t2i_hits``: uint8 arrays ``[redraws, n_queries]`` of per-query 0/1 outcomes.
    """
    image = as_unit_embeddings(image, "image")
    text = as_unit_embeddings(text, "text")
    check_same_rows(image, text, "image", "text")
    check_same_width(image, text)
    if not isinstance(n_way, (int, np.integer)) or n_way < 2:
        raise ValueError(
            f"n_way must be an integer >= 2 (the pair plus at least one distractor), got {n_way}"
        )
    if not isinstance(redraws, (int, np.integer)) or redraws < 1:
        raise ValueError(f"redraws must be a positive integer, got {redraws}")
    check_seed(seed)
    n = image.shape[0]
    groups = group_codes(group_ids, n)
    eligible = n - np.bincount(groups)[groups]
    if eligible.min() < n_way - 1:
        raise ValueError(
            f"an {n_way}-way task needs {n_way - 1} non-paired distractors per query, but some query has "
            f"only {int(eligible.min())} items outside its group among {n} test pairs; lower n_way or "
            f"evaluate on a larger test split"
        )

    hits = {"i2t": np.empty((redraws, n), dtype=np.uint8), "t2i": np.empty((redraws, n), dtype=np.uint8)}
    for redraw in range(redraws):
        for direction_index, (direction, query, gallery) in enumerate(
            (("i2t", image, text), ("t2i", text, image))
        ):
            rng = np.random.default_rng([int(seed), redraw, direction_index])
            hits[direction][redraw] = _n_way_hits(query, gallery, groups, n_way - 1, rng)

    result: dict = {"n_way": int(n_way), "redraws": int(redraws), "n_queries": int(n)}
    for direction, outcome in hits.items():
        per_draw = outcome.mean(axis=1)
        summary = mean_std(per_draw)
        result[direction] = summary["mean"]
        result[f"{direction}_per_draw"] = [float(v) for v in per_draw]
        result[f"{direction}_std"] = summary["std"]
        if return_hits:
            result[f"{direction}_hits"] = outcome
    return result


# --------------------------------------------------------------------------------------------------
# Full-gallery ranking: Recall@K, median / mean rank, mAP@k (Bleeker & de Rijke 2022, Sec. 3)
# --------------------------------------------------------------------------------------------------


def _positive_table(owner: np.ndarray, n_owners: int) -> np.ndarray:
    """``[n_owners, max_count]`` indices of the items each owner has (ascending), padded with -1."""
    counts = np.bincount(owner, minlength=n_owners)
    order = np.argsort(owner, kind="stable")
    table = np.full((n_owners, max(1, int(counts.max()))), -1, dtype=np.int64)
    slot = np.arange(owner.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    table[owner[order], slot] = order
    return table


def _rank_statistics(
    query: np.ndarray, gallery: np.ndarray, positives: np.ndarray, map_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the 1-based rank of its best positive, and AP@map_k over its positives.

    Ranking is by :func:`cross_modal_scores`, descending; a negative that ties a positive is ranked above it. The j-th
    best positive (j = 1, 2, ...) therefore sits at position ``j + #{negatives scoring >= it}``.
    AP@k = sum over positives within the top k of (j / position_j), divided by min(#positives, k).
    """
    n_query, n_gallery = query.shape[0], gallery.shape[0]
    width = positives.shape[1]
    best_rank = np.empty(n_query, dtype=np.int64)
    average_precision = np.empty(n_query, dtype=np.float64)
    for rows in chunk_rows(n_query, n_gallery * (width + 1)):
        scores = cross_modal_scores(query[rows], gallery)
        table = positives[rows]
        valid = table >= 0
        positive_scores = np.take_along_axis(scores, np.where(valid, table, 0), axis=1)
        order = np.argsort(np.where(valid, -positive_scores, np.inf), axis=1, kind="stable")
        sorted_scores = np.take_along_axis(positive_scores, order, axis=1)
        sorted_valid = np.take_along_axis(valid, order, axis=1)
        is_positive = np.zeros(scores.shape, dtype=bool)
        local = np.repeat(np.arange(table.shape[0]), width)[valid.reshape(-1)]
        is_positive[local, table[valid]] = True
        negatives_above = ((scores[:, None, :] >= sorted_scores[:, :, None]) & ~is_positive[:, None, :]).sum(
            axis=2
        )
        ordinal = np.arange(1, width + 1)[None, :]
        position = ordinal + negatives_above
        best_rank[rows] = position[:, 0]
        counted = sorted_valid & (position <= map_k)
        precision_sum = np.where(counted, ordinal / position, 0.0).sum(axis=1)
        average_precision[rows] = precision_sum / np.minimum(sorted_valid.sum(axis=1), map_k)
    return best_rank, average_precision


def _text_owners(text_to_image: Sequence[int] | np.ndarray | None, n_image: int, n_text: int) -> np.ndarray:
    if text_to_image is None:
        if n_image != n_text:
            raise ValueError(
                f"{n_image} images but {n_text} texts: pass text_to_image (the image row of every text) "
                f"when images have several captions"
            )
        return np.arange(n_text)
    owner = np.asarray(text_to_image)
    if owner.shape != (n_text,) or not np.issubdtype(owner.dtype, np.integer):
        raise ValueError(f"text_to_image must be an integer array with one image row per text ({n_text})")
    if owner.min() < 0 or owner.max() >= n_image:
        raise ValueError(
            f"text_to_image values must be image rows in [0, {n_image}), got {owner.min()}..{owner.max()}"
        )
    captionless = np.flatnonzero(np.bincount(owner, minlength=n_image) == 0)
    if captionless.size:
        raise ValueError(
            f"images {captionless[:5].tolist()} have no caption, so image→text recall is undefined for "
            f"them; drop those image rows (and renumber text_to_image)"
        )
    return owner.astype(np.int64)


def full_ranking_metrics(
    image: np.ndarray,
    text: np.ndarray,
    text_to_image: Sequence[int] | np.ndarray | None = None,
    ks: Sequence[int] = (1, 5, 10),
    map_k: int = 5,
    return_ranks: bool = False,
) -> dict:
    """Recall@K, median / mean rank and mAP@k against the whole test gallery, both directions.

    The standard image-caption protocol (VSE++, used by Bleeker & de Rijke 2022, Sec. 3 / Table 1):
    ``text_to_image[t]`` is the image row of caption ``t`` (default: row-aligned pairs). I→T: an image's
    rank is the best rank among its captions; T→I: a caption's rank is that of its image. Ranks are
    1-based and a negative tying a positive is ranked above it. R@K = share of queries with rank <= K
    (a fraction, not a percentage); mAP@k averages AP@k = sum_{j: pos_j <= k} (j / pos_j) / min(P, k)
    over queries, for a query with P positives whose j-th best sits at position pos_j. ``rsum`` is the
    conventional sum of all R@K in percent. ``return_ranks`` adds the per-query ranks. Scores are those
    of :func:`cross_modal_scores` (dot product; PVSE max over K x K pairs for ``[n, K, d]`` embeddings).
    """
    image = as_unit_embeddings(image, "image")
    text = as_unit_embeddings(text, "text")
    check_same_width(image, text)
    if not ks or any((not isinstance(k, (int, np.integer))) or k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks!r}")
    if not isinstance(map_k, (int, np.integer)) or map_k < 1:
        raise ValueError(f"map_k must be a positive integer, got {map_k!r}")
    owner = _text_owners(text_to_image, image.shape[0], text.shape[0])

    i2t_rank, i2t_ap = _rank_statistics(image, text, _positive_table(owner, image.shape[0]), map_k)
    t2i_rank, t2i_ap = _rank_statistics(text, image, owner[:, None], map_k)

    result: dict = {"n_images": int(image.shape[0]), "n_texts": int(text.shape[0])}
    rsum = 0.0
    for direction, ranks, ap in (("i2t", i2t_rank, i2t_ap), ("t2i", t2i_rank, t2i_ap)):
        for k in ks:
            recall = float(np.mean(ranks <= k))
            result[f"{direction}_r@{k}"] = recall
            rsum += 100.0 * recall
        result[f"{direction}_medr"] = float(np.median(ranks))
        result[f"{direction}_meanr"] = float(np.mean(ranks))
        result[f"{direction}_map@{map_k}"] = float(np.mean(ap))
        if return_ranks:
            result[f"{direction}_ranks"] = ranks
    result["rsum"] = rsum
    return result


def coco_folds(
    image: np.ndarray,
    text: np.ndarray,
    text_to_image: Sequence[int] | np.ndarray | None = None,
    n_folds: int = 5,
    ks: Sequence[int] = (1, 5, 10),
    map_k: int = 5,
) -> dict:
    """COCO "1K" protocol: :func:`full_ranking_metrics` on ``n_folds`` consecutive image folds, averaged.

    Fold f holds image rows ``[f * m, (f + 1) * m)`` with ``m = n_images / n_folds`` (5 x 1000 for the
    5K Karpathy test split) and exactly their captions. Returns ``mean`` (every metric averaged over
    folds, as VSE++ reports it), ``per_fold`` and ``fold_images``.
    """
    image = as_unit_embeddings(image, "image")
    text = as_unit_embeddings(text, "text")
    owner = _text_owners(text_to_image, image.shape[0], text.shape[0])
    if not isinstance(n_folds, (int, np.integer)) or n_folds < 1 or image.shape[0] % n_folds:
        raise ValueError(
            f"{image.shape[0]} images cannot be split into {n_folds} equal folds; use a fold count that "
            f"divides the number of test images (COCO 5K: n_folds=5)"
        )
    fold_images = image.shape[0] // n_folds
    per_fold = []
    for fold in range(n_folds):
        start = fold * fold_images
        in_fold = (owner >= start) & (owner < start + fold_images)
        per_fold.append(
            full_ranking_metrics(
                image[start : start + fold_images],
                text[in_fold],
                owner[in_fold] - start,
                ks=ks,
                map_k=map_k,
            )
        )
    mean = {key: float(np.mean([fold[key] for fold in per_fold])) for key in per_fold[0]}
    return {"mean": mean, "per_fold": per_fold, "fold_images": int(fold_images)}
