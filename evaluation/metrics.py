"""Retrieval and embedding-space metrics, as pure NumPy functions.

Conventions shared by every function here:

* Embeddings are ``[n, d]`` float arrays (one embedding per item) or ``[n, K, d]`` (K embeddings per
  item, as PVSE gives). Every score between two items comes from :func:`cross_modal_scores`: the dot
  product for ``[n, d]``, and for ``[n, K, d]`` PVSE's multiple-instance similarity, the maximum dot
  product over the K x K' pairs of the two items' embeddings (Song & Soleymani 2019; ``mil_similarity``
  in ``models/losses/pvse_mil.py``). An ``[n, 1, d]`` array is treated as the ``[n, d]`` array it holds,
  so K = 1 gives exactly the single-embedding numbers. Cross-modal functions expect L2-normalised
  embeddings (each of the K, for ``[n, K, d]``) and refuse any whose norm is not 1; within-modality
  neighbour functions use cosine similarity (for ``[n, K, d]``: the same maximum over the K x K pairs of
  cosines) and normalise themselves (a Doc2Vec reference space is not normalised).
* Row ``i`` of ``image`` is paired with row ``i`` of ``text`` unless a function takes ``text_to_image``.
* ``group_ids`` (any hashable labels, one per row) mark rows that hold the same item, e.g. the pairs of one
  COCO image; rows of one group are never used as each other's negatives.
* Similarities are computed in float64 and, except for the global PR curve (which must sort all
  n_images * n_texts scores), in row chunks, so memory stays bounded for thousands of queries.
* Every random draw takes an explicit seed; the same arguments give the same numbers.
* Ties: a paired item must score *strictly* higher than a negative to beat it (ties count against the
  model); nearest-neighbour sets break ties by the lower row index.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

# Rows per similarity chunk are chosen so one chunk holds about this many float64 entries (~64 MB).
_CHUNK_ENTRIES = 8_000_000
_UNIT_NORM_TOLERANCE = 1e-3


# --------------------------------------------------------------------------------------------------
# Input guards and small helpers
# --------------------------------------------------------------------------------------------------


def _as_embeddings(x: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(x, dtype=np.float64)
    if array.ndim == 3 and array.shape[1] == 1:
        # one embedding per item: the single-embedding case, so K = 1 runs the very same [n, d] code
        array = array[:, 0, :]
    if array.ndim not in (2, 3) or 0 in array.shape:
        raise ValueError(
            f"{name} must be a non-empty [n, d] array of embeddings, or [n, K, d] with K embeddings per item "
            f"(PVSE), got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or inf; check the encoder output before evaluating")
    return array


def _as_unit_embeddings(x: np.ndarray, name: str) -> np.ndarray:
    array = _as_embeddings(x, name)
    norms = np.linalg.norm(array, axis=-1)
    worst = np.unravel_index(int(np.argmax(np.abs(norms - 1.0))), norms.shape)
    if abs(norms[worst] - 1.0) > _UNIT_NORM_TOLERANCE:
        where = f"row {worst[0]}" + (f" embedding {worst[1]}" if len(worst) == 2 else "")
        raise ValueError(
            f"{name} {where} has L2 norm {norms[worst]:.4f}; similarity here is the dot product, so "
            f"L2-normalise the embeddings first (x / np.linalg.norm(x, axis=-1, keepdims=True))"
        )
    return array


def _l2_normalise(x: np.ndarray, name: str) -> np.ndarray:
    array = _as_embeddings(x, name)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    zero_rows = np.flatnonzero((norms == 0).reshape(array.shape[0], -1).any(axis=1))
    if zero_rows.size:
        raise ValueError(
            f"{name} rows {zero_rows[:5].tolist()} have zero norm, so cosine similarity is undefined; "
            f"drop those samples before evaluating"
        )
    return array / norms


def _check_same_rows(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{name_a} has {a.shape[0]} rows but {name_b} has {b.shape[0]}; row i of both must describe "
            f"the same pair/sample"
        )


def _check_same_width(image: np.ndarray, text: np.ndarray) -> None:
    if image.shape[-1] != text.shape[-1]:
        raise ValueError(
            f"image embeddings are {image.shape[-1]}-d but text embeddings are {text.shape[-1]}-d; both "
            f"modalities must be projected into the same joint space"
        )


def _embedding_sets(x: np.ndarray) -> np.ndarray:
    """``[n, K, d]`` view of embeddings; an ``[n, d]`` array is the K = 1 case."""
    return x if x.ndim == 3 else x[:, None, :]


def cross_modal_scores(query: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """``[n_query, n_gallery]`` float64 similarity of every query item to every gallery item.

    For ``[n, d]`` inputs this is the dot product ``query @ gallery.T``. For ``[n, K, d]`` inputs (K
    embeddings per item) it is PVSE's multiple-instance similarity (Song & Soleymani 2019, Sec. 3.2;
    the score its ranking loss and retrieval use): ``s(q, g) = max_{k, l} <query[q, k], gallery[g, l]>``,
    the best-matching pair of the two items' embeddings. An ``[n, d]`` side counts as K = 1, and an
    ``[n, 1, d]`` side is reduced to ``[n, d]``, so K = 1 reproduces the dot product bit for bit. The same
    rule serves within one modality (query and gallery both images, or both texts).

    The caller bounds the ``[n_query, n_gallery]`` result (every function here passes row chunks); the
    K x K' pair scores behind it are computed in query-row chunks of about ``_CHUNK_ENTRIES`` entries.
    """
    query = _as_embeddings(query, "query")
    gallery = _as_embeddings(gallery, "gallery")
    _check_same_width(query, gallery)
    if query.ndim == 2 and gallery.ndim == 2:
        return query @ gallery.T
    query_sets, gallery_sets = _embedding_sets(query), _embedding_sets(gallery)
    n_query, query_k, width = query_sets.shape
    n_gallery, gallery_k = gallery_sets.shape[:2]
    flat_gallery = gallery_sets.reshape(n_gallery * gallery_k, width)
    scores = np.empty((n_query, n_gallery), dtype=np.float64)
    for rows in _chunk_rows(n_query, query_k * n_gallery * gallery_k):
        pair_scores = query_sets[rows].reshape(-1, width) @ flat_gallery.T
        scores[rows] = pair_scores.reshape(-1, query_k, n_gallery, gallery_k).max(axis=(1, 3))
    return scores


def _group_codes(group_ids: Sequence | np.ndarray | None, n: int) -> np.ndarray:
    """Integer codes for ``group_ids`` (any labels); ``None`` makes every row its own group."""
    if group_ids is None:
        return np.arange(n)
    labels = np.asarray(group_ids)
    if labels.shape != (n,):
        raise ValueError(f"group_ids must have one label per row ({n}), got shape {labels.shape}")
    _, codes = np.unique(labels, return_inverse=True)
    return codes.reshape(n)


def _chunk_rows(n_rows: int, row_width: int) -> Iterator[slice]:
    step = max(1, _CHUNK_ENTRIES // max(1, row_width))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _check_seed(seed: int) -> None:
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def mean_std(values: Sequence[float] | np.ndarray) -> dict:
    """Mean and sample standard deviation (ddof=1) of a metric across seeds / redraws.

    A single value has no spread to estimate; its ``std`` is reported as 0.0 (``n`` says it was one).
    """
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise ValueError("mean_std needs at least one value")
    std = float(np.std(array, ddof=1)) if array.size > 1 else 0.0
    return {"mean": float(np.mean(array)), "std": std, "n": int(array.size)}


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
    for rows in _chunk_rows(n, n):
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
    image = _as_unit_embeddings(image, "image")
    text = _as_unit_embeddings(text, "text")
    _check_same_rows(image, text, "image", "text")
    _check_same_width(image, text)
    if not isinstance(n_way, (int, np.integer)) or n_way < 2:
        raise ValueError(
            f"n_way must be an integer >= 2 (the pair plus at least one distractor), got {n_way}"
        )
    if not isinstance(redraws, (int, np.integer)) or redraws < 1:
        raise ValueError(f"redraws must be a positive integer, got {redraws}")
    _check_seed(seed)
    n = image.shape[0]
    groups = _group_codes(group_ids, n)
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
# Neighbour preservation (Thomas & Kovashka 2020, Sec. 4.3, Table 3)
# --------------------------------------------------------------------------------------------------


def _top_k_membership(similarity: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of each row's ``k`` highest entries; among equal values the lower column wins.

    Exact and O(n) per row: everything strictly above the k-th largest value is in, and the remaining
    places go to the entries equal to it in column order.
    """
    n = similarity.shape[1]
    kth_largest = np.partition(similarity, n - k, axis=1)[:, n - k]
    above = similarity > kth_largest[:, None]
    tied = similarity == kth_largest[:, None]
    places_left = k - above.sum(axis=1)
    return above | (tied & (np.cumsum(tied, axis=1) <= places_left[:, None]))


def nearest_neighbour_mask(embeddings: np.ndarray, k: int, rows: slice | None = None) -> np.ndarray:
    """``[len(rows), n]`` mask of each sample's ``k`` nearest *other* samples by cosine similarity.

    For ``[n, K, d]`` embeddings the similarity of two samples is the largest cosine over the K x K pairs
    of their embeddings (the PVSE rule of :func:`cross_modal_scores`, applied within one modality). Ties
    are broken by the lower sample index. ``rows`` selects the query rows (default: all).
    """
    unit = _l2_normalise(embeddings, "embeddings")
    n = unit.shape[0]
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be between 1 and n - 1 = {n - 1} other samples, got {k}")
    rows = rows if rows is not None else slice(0, n)
    return _neighbour_mask_of_unit(unit, k, rows)


def _neighbour_mask_of_unit(unit: np.ndarray, k: int, rows: slice) -> np.ndarray:
    similarity = cross_modal_scores(unit[rows], unit)
    local = np.arange(similarity.shape[0])
    similarity[local, local + rows.start] = -np.inf  # a sample is not its own neighbour
    return _top_k_membership(similarity, k)


def neighbour_preservation(learned: np.ndarray, reference: np.ndarray, k: int) -> dict:
    """Share of each sample's reference-space neighbours that stay its neighbours in the learned space.

    Thomas & Kovashka (ECCV 2020), Sec. 4.3 / Table 3: for each sample ``s_i`` of one modality,
    ``|Psi_M(s_i) ∩ Psi_Omega(s_i)| / |Psi_Omega(s_i)|`` where ``Psi`` is the set of the ``k`` nearest
    *other* samples by cosine similarity, computed within the given set (the test split) in the learned
    space M (``learned``) and the reference space Omega (``reference``, e.g. Doc2Vec). For ``[n, K, d]``
    learned embeddings (PVSE) the within-modality similarity is the largest cosine over the K x K pairs of
    two samples' embeddings, the rule PVSE retrieves by. Ties are broken by the lower sample index. The paper uses k = 200; ``k`` is capped at ``n - 1`` and both values are
    reported. Returns ``mean``, ``k_used``, ``k_requested``, ``per_sample`` (float array ``[n]``).
    """
    learned_unit = _l2_normalise(learned, "learned")
    reference_unit = _l2_normalise(reference, "reference")
    _check_same_rows(learned_unit, reference_unit, "learned", "reference")
    n = learned_unit.shape[0]
    if n < 2:
        raise ValueError(
            "neighbour_preservation needs at least 2 samples (a sample is not its own neighbour)"
        )
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer number of neighbours, got {k!r}")
    k_used = int(min(k, n - 1))

    per_sample = np.empty(n, dtype=np.float64)
    for rows in _chunk_rows(n, 2 * n):
        in_learned = _neighbour_mask_of_unit(learned_unit, k_used, rows)
        in_reference = _neighbour_mask_of_unit(reference_unit, k_used, rows)
        per_sample[rows] = (in_learned & in_reference).sum(axis=1) / k_used
    return {
        "mean": float(per_sample.mean()),
        "k_used": k_used,
        "k_requested": int(k),
        "per_sample": per_sample,
    }


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
    for rows in _chunk_rows(n_query, n_gallery * (width + 1)):
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
    image = _as_unit_embeddings(image, "image")
    text = _as_unit_embeddings(text, "text")
    _check_same_width(image, text)
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
    image = _as_unit_embeddings(image, "image")
    text = _as_unit_embeddings(text, "text")
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
    image = _as_unit_embeddings(image, "image")
    text = _as_unit_embeddings(text, "text")
    _check_same_rows(image, text, "image", "text")
    _check_same_width(image, text)
    if max_curve_points is not None and max_curve_points < 2:
        raise ValueError(f"max_curve_points must be >= 2 or None, got {max_curve_points}")
    groups = _group_codes(group_ids, image.shape[0])

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
    image = _as_unit_embeddings(image, "image")
    text = _as_unit_embeddings(text, "text")
    _check_same_width(image, text)
    _check_seed(seed)
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
    for rows in _chunk_rows(chosen.size, gallery.shape[0]):
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
# Topic precision, proximity ratios (Thomas & Kovashka 2020, Sec. 4.4 / Fig. 5)
# --------------------------------------------------------------------------------------------------


def topic_precision_at_k(
    query: np.ndarray,
    gallery: np.ndarray,
    query_topics: Sequence | np.ndarray,
    gallery_topics: Sequence | np.ndarray,
    k: int,
) -> float:
    """Mean over queries of the share of its top-``k`` gallery items (by :func:`cross_modal_scores`) with its topic.

    For cross-modal use pass images as queries and texts as gallery, or the reverse. Ties for the last
    places in the top k are broken by the lower gallery index.
    """
    query = _as_unit_embeddings(query, "query")
    gallery = _as_unit_embeddings(gallery, "gallery")
    _check_same_width(query, gallery)
    query_topics = np.asarray(query_topics)
    gallery_topics = np.asarray(gallery_topics)
    if query_topics.shape != (query.shape[0],) or gallery_topics.shape != (gallery.shape[0],):
        raise ValueError(
            f"need one topic per query ({query.shape[0]}) and per gallery item ({gallery.shape[0]}), got "
            f"shapes {query_topics.shape} and {gallery_topics.shape}"
        )
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= gallery.shape[0]:
        raise ValueError(f"k must be between 1 and the gallery size {gallery.shape[0]}, got {k!r}")
    _, codes = np.unique(np.concatenate([query_topics, gallery_topics]), return_inverse=True)
    query_codes, gallery_codes = codes[: query.shape[0]], codes[query.shape[0] :]

    same_topic_share = np.empty(query.shape[0], dtype=np.float64)
    for rows in _chunk_rows(query.shape[0], gallery.shape[0]):
        top_k = _top_k_membership(cross_modal_scores(query[rows], gallery), int(k))
        same_topic = query_codes[rows, None] == gallery_codes[None, :]
        same_topic_share[rows] = (top_k & same_topic).sum(axis=1) / k
    return float(same_topic_share.mean())


def sample_neighbour_pairs(neighbour_table: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Draw ``n`` distinct unordered neighbour pairs from a reference-space neighbour table (Fig. 5).

    ``neighbour_table[i]`` lists the neighbour rows of sample ``i`` (negative entries are padding). Each
    pair ``{i, j}`` with ``i != j`` is counted once however often it is listed, and ``n`` of them are drawn
    uniformly without replacement with ``seed`` (fewer if fewer exist). Returns ``[n, 2]`` int rows
    ``(i, j)`` with ``i < j``.
    """
    table = np.asarray(neighbour_table)
    if table.ndim != 2 or not np.issubdtype(table.dtype, np.integer):
        raise ValueError(
            f"neighbour_table must be an integer [n_samples, n_neighbours] array, got {table.shape}"
        )
    if table.size and table.max() >= table.shape[0]:
        raise ValueError(f"neighbour_table refers to row {table.max()} but has only {table.shape[0]} rows")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of pairs, got {n!r}")
    _check_seed(seed)
    anchor = np.repeat(np.arange(table.shape[0]), table.shape[1])
    other = table.reshape(-1)
    listed = (other >= 0) & (other != anchor)
    pairs = np.unique(np.sort(np.stack([anchor[listed], other[listed]], axis=1), axis=1), axis=0)
    if pairs.shape[0] == 0:
        raise ValueError("neighbour_table lists no pair of distinct samples")
    rng = np.random.default_rng(int(seed))
    chosen = rng.choice(pairs.shape[0], size=min(int(n), pairs.shape[0]), replace=False)
    return pairs[np.sort(chosen)]


def _paired_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Euclidean distance; for embedding sets, the smallest over the K x K' pairs of row p."""
    if a.ndim == 2 and b.ndim == 2:
        return np.linalg.norm(a - b, axis=1)
    a_sets, b_sets = _embedding_sets(a), _embedding_sets(b)
    pair_distances = np.linalg.norm(a_sets[:, :, None, :] - b_sets[:, None, :, :], axis=-1)
    return pair_distances.min(axis=(1, 2))


def proximity_ratios(
    ours_a: np.ndarray, ours_b: np.ndarray, base_a: np.ndarray, base_b: np.ndarray
) -> np.ndarray:
    """Per pair, distance in our space over distance in the baseline's space (Fig. 5 of Thomas & Kovashka).

    Row p of ``ours_a`` / ``ours_b`` are the two samples of pair p embedded by our model, row p of
    ``base_a`` / ``base_b`` the same samples embedded by the baseline; distance is Euclidean between the
    L2-normalised embeddings. For ``[n, K, d]`` embeddings (PVSE) the distance of two items follows the
    max-over-pairs rule of :func:`cross_modal_scores`: the smallest Euclidean distance over the K x K pairs
    of their L2-normalised embeddings (= sqrt(2 - 2 s) with s the best pair's cosine). Our model and the
    baseline may have different K. A ratio below 1 means our model keeps the pair closer than the baseline.
    The result is aligned with the pairs; :func:`smallest_ratios_first` orders them for the figure.
    A pair at distance 0 under the baseline gets ``inf`` (or ``nan`` when also 0 under ours).
    """
    arrays = [
        _l2_normalise(x, name)
        for x, name in ((ours_a, "ours_a"), (ours_b, "ours_b"), (base_a, "base_a"), (base_b, "base_b"))
    ]
    for array, name in zip(arrays[1:], ("ours_b", "base_a", "base_b"), strict=True):
        _check_same_rows(arrays[0], array, "ours_a", name)
    _check_same_width(arrays[0], arrays[1])
    _check_same_width(arrays[2], arrays[3])
    ours = _paired_distance(arrays[0], arrays[1])
    base = _paired_distance(arrays[2], arrays[3])
    with np.errstate(divide="ignore", invalid="ignore"):
        return ours / base


def smallest_ratios_first(ratios: np.ndarray) -> np.ndarray:
    """Pair indices ordered by ascending proximity ratio (ties by index; ``nan`` last)."""
    return np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")


# --------------------------------------------------------------------------------------------------
# Significance and summaries
# --------------------------------------------------------------------------------------------------


def paired_bootstrap(hits_a: np.ndarray, hits_b: np.ndarray, n_resamples: int = 10000, seed: int = 0) -> dict:
    """Paired bootstrap over queries for the difference of two methods' mean per-query outcome.

    ``hits_a[q]`` and ``hits_b[q]`` are the outcomes (0/1 hits or any score) of methods A and B on the
    same query q. Queries are resampled with replacement ``n_resamples`` times, keeping pairs together.
    Returns ``mean_difference`` (A - B), ``ci_low`` / ``ci_high`` (95% percentile interval),
    ``p_value`` (two-sided, from the bootstrap distribution shifted to the null of no difference:
    (1 + #{|d* - d| >= |d|}) / (1 + n_resamples)), ``n_queries`` and ``n_resamples``.
    """
    a = np.asarray(hits_a, dtype=np.float64)
    b = np.asarray(hits_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(
            f"hits_a and hits_b must be 1-D with one outcome per query, same length; got {a.shape} and "
            f"{b.shape} (for n-way hits [redraws, n_queries], average over axis 0 first)"
        )
    if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
        raise ValueError("hits contain NaN or inf")
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    _check_seed(seed)
    difference = a - b
    observed = float(difference.mean())
    rng = np.random.default_rng(int(seed))
    resampled = np.empty(n_resamples, dtype=np.float64)
    for block in _chunk_rows(n_resamples, difference.size):
        picks = rng.integers(0, difference.size, size=(block.stop - block.start, difference.size))
        resampled[block] = difference[picks].mean(axis=1)
    # a tolerance keeps floating-point noise in resampled means from deciding exact ties
    extreme = np.abs(resampled - observed) >= abs(observed) - 1e-12
    return {
        "mean_difference": observed,
        "ci_low": float(np.percentile(resampled, 2.5)),
        "ci_high": float(np.percentile(resampled, 97.5)),
        "p_value": float((1 + extreme.sum()) / (1 + n_resamples)),
        "n_queries": int(difference.size),
        "n_resamples": int(n_resamples),
    }


def cocos_summary(diagnostics: Sequence[Mapping[str, np.ndarray]]) -> dict:
    """Summarise per-batch COCOS diagnostics (Bleeker & de Rijke 2022, Sec. 4-5, Tables 2-4).

    ``diagnostics`` holds one dict per batch for one loss, mapping a name (e.g.
    ``"contributing_negatives"``: per-query counts C^q; ``"no_gradient"``: per-query 0/1) to a per-query
    array (tensors on CPU work too). For every key, each batch gives its per-query mean (for a 0/1 key,
    the share of queries) and its sum (C^B, or C^0 for ``no_gradient``); the result reports, per key,
    the mean and sample std of both over batches (``per_query_mean`` / ``per_query_std``,
    ``per_batch_sum_mean`` / ``per_batch_sum_std``) and ``n_batches``.
    """
    if len(diagnostics) == 0:
        raise ValueError("cocos_summary needs at least one batch of diagnostics")
    keys = set(diagnostics[0])
    for index, batch in enumerate(diagnostics):
        if set(batch) != keys:
            raise ValueError(
                f"batch {index} has keys {sorted(batch)} but batch 0 has {sorted(keys)}; every batch of one "
                f"loss must report the same diagnostics"
            )
    summary: dict = {}
    for key in sorted(keys):
        values = [np.asarray(batch[key], dtype=np.float64).reshape(-1) for batch in diagnostics]
        if any(v.size == 0 for v in values):
            raise ValueError(f"diagnostic {key!r} is empty in some batch")
        batch_means = mean_std([v.mean() for v in values])
        batch_sums = mean_std([v.sum() for v in values])
        summary[key] = {
            "per_query_mean": batch_means["mean"],
            "per_query_std": batch_means["std"],
            "per_batch_sum_mean": batch_sums["mean"],
            "per_batch_sum_std": batch_sums["std"],
            "n_batches": len(values),
        }
    return summary
