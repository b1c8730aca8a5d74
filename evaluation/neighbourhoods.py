"""Neighbour preservation at several k with its chance level, and within-modality topic precision.

Why this exists next to :func:`evaluation.metrics.neighbour_preservation`: Table 3 of Thomas & Kovashka
(ECCV 2020, Sec. 4.3) reports one k, 200, on test splits of 24.6k-46k items, where 200 neighbours are
0.4-0.8% of the other items. On a smaller test split the same k is a far larger share of it (200 of 400
items is half of them, and any embedding keeps about half of its neighbours by chance), so a preservation
number only reads next to its chance level ``k / (n - 1)``, and the k that compares with the paper's is the
one whose share ``k / (n - 1)`` is closest to theirs (:func:`headline_preservation_k`).

Preservation at every k comes from one ranking of each space: a sample's top-k set for k <= K is the first
k entries of its nearest-first top-K list, so the K-list is computed once per space and every k is read off
it (:func:`preservation_from_rankings`). Similarity and tie rules are those of
:func:`evaluation.metrics.nearest_neighbour_mask` (cosine; for ``[n, K, d]`` embeddings the largest cosine
over the K x K pairs; equal similarities ranked by the lower sample index), so at each k the result equals
``neighbour_preservation`` exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from evaluation.metrics import (
    _check_same_rows,
    _chunk_rows,
    _l2_normalise,
    _neighbour_mask_of_unit,
    _top_k_membership,
    cross_modal_scores,
)


def _check_k(k: int, n: int, what: str = "k") -> int:
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n - 1:
        raise ValueError(f"{what} must be an integer between 1 and n - 1 = {n - 1} other samples, got {k!r}")
    return int(k)


def chance_preservation(k: int, n: int) -> float:
    """Expected preservation of a random embedding: ``k / (n - 1)``.

    A learned top-k set drawn uniformly among the ``n - 1`` other samples holds each of the ``k`` reference
    neighbours with probability ``k / (n - 1)``, so it overlaps the reference set by ``k^2 / (n - 1)`` items
    on average, a share ``k / (n - 1)`` of them.
    """
    if n < 2:
        raise ValueError(f"chance level needs at least 2 samples, got n = {n}")
    return _check_k(k, n) / (n - 1)


def headline_preservation_k(ks: Iterable[int], n: int, paper_ratio: float) -> int:
    """The k of ``ks`` (those with k <= n - 1) whose share ``k / (n - 1)`` is closest to ``paper_ratio``.

    The paper's k = 200 is about 0.6% of its test items; the headline k keeps that share, not the count,
    so it measures the same "closest few percent" neighbourhood on a split of any size. Ties go to the
    smaller k. When no k of ``ks`` fits below n, the k in 1..n-1 closest to ``paper_ratio * (n - 1)`` is used.
    """
    if n < 2:
        raise ValueError(f"neighbour preservation needs at least 2 samples, got n = {n}")
    if not paper_ratio > 0:
        raise ValueError(f"paper_ratio must be a positive share of the test items, got {paper_ratio!r}")
    candidates = sorted({int(k) for k in ks if 1 <= int(k) <= n - 1})
    if not candidates:
        return int(min(max(round(paper_ratio * (n - 1)), 1), n - 1))
    return min(candidates, key=lambda k: (abs(k / (n - 1) - paper_ratio), k))


def nearest_neighbour_ranking(embeddings: np.ndarray, k: int) -> np.ndarray:
    """``[n, k]`` int64: each sample's ``k`` nearest *other* samples, nearest first.

    Ordered by descending cosine similarity (PVSE max over the K x K pairs for ``[n, K, d]``), equal
    similarities by the lower sample index, so the first j columns are exactly
    ``nearest_neighbour_mask(embeddings, j)`` for every j <= k.
    """
    unit = _l2_normalise(embeddings, "embeddings")
    return _ranking_of_unit(unit, _check_k(k, unit.shape[0]))


def _ranking_of_unit(unit: np.ndarray, k: int) -> np.ndarray:
    """:func:`nearest_neighbour_ranking` of already normalised embeddings (normalising twice would change
    the last bits of the similarities, and with them how exact ties are broken)."""
    n = unit.shape[0]
    ranking = np.empty((n, k), dtype=np.int64)
    # the same row chunks as neighbour_preservation, so both see bit-identical similarities
    for rows in _chunk_rows(n, 2 * n):
        similarity = cross_modal_scores(unit[rows], unit)
        local = np.arange(similarity.shape[0])
        similarity[local, local + rows.start] = -np.inf  # a sample is not its own neighbour
        # exactly k members per row, listed in ascending column order
        columns = np.nonzero(_top_k_membership(similarity, k))[1].reshape(-1, k)
        scores = np.take_along_axis(similarity, columns, axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")  # stable: ties keep the lower index first
        ranking[rows] = np.take_along_axis(columns, order, axis=1)
    return ranking


def preservation_from_rankings(
    learned_ranking: np.ndarray, reference_ranking: np.ndarray, ks: Sequence[int]
) -> dict[int, np.ndarray]:
    """Per k, per sample ``|top-k learned ∩ top-k reference| / k`` from two nearest-first rankings.

    A neighbour common to both lists counts from k = 1 + max(its rank in either list) on, so one sort of
    the two lists per sample gives the overlap at every k. Rankings must be at least ``max(ks)`` wide; the
    result maps each k to a float array ``[n]``.
    """
    learned = np.asarray(learned_ranking)
    reference = np.asarray(reference_ranking)
    if learned.ndim != 2 or reference.ndim != 2 or learned.shape[0] != reference.shape[0]:
        raise ValueError(
            f"rankings must be [n, width] arrays over the same samples, got {learned.shape} and {reference.shape}"
        )
    ks = [int(k) for k in ks]
    width = min(learned.shape[1], reference.shape[1])
    if not ks or min(ks) < 1 or max(ks) > width:
        raise ValueError(f"every k must be between 1 and the ranking width {width}, got {ks}")
    top = max(ks)
    learned, reference = learned[:, :top], reference[:, :top]
    ranks = np.concatenate([np.arange(top), np.arange(top)])
    n = learned.shape[0]
    result = {k: np.empty(n, dtype=np.float64) for k in ks}
    for rows in _chunk_rows(n, 8 * top):
        ids = np.concatenate([learned[rows], reference[rows]], axis=1)
        order = np.argsort(ids, axis=1, kind="stable")
        sorted_ids = np.take_along_axis(ids, order, axis=1)
        sorted_ranks = ranks[order]
        # each list names a sample at most once, so equal neighbours in sorted order are the common ones
        common = sorted_ids[:, 1:] == sorted_ids[:, :-1]
        depth = np.where(common, np.maximum(sorted_ranks[:, 1:], sorted_ranks[:, :-1]), top)
        for k in ks:
            result[k][rows] = (depth < k).sum(axis=1) / k
    return result


def neighbour_preservation_at_ks(
    learned: np.ndarray,
    reference: np.ndarray | None,
    ks: Sequence[int],
    reference_ranking: np.ndarray | None = None,
) -> dict[int, dict]:
    """Neighbour preservation (Thomas & Kovashka Sec. 4.3) at every k of ``ks`` from one ranking per space.

    Per k (each between 1 and n - 1): ``per_sample`` (float ``[n]``, equal to
    ``neighbour_preservation(learned, reference, k)["per_sample"]``), its ``mean``, the ``chance`` level
    ``k / (n - 1)`` and ``lift = mean / chance``. ``reference_ranking`` (a
    :func:`nearest_neighbour_ranking` of ``reference`` at least ``max(ks)`` wide; ``reference`` may then be
    ``None``) lets the image and text modalities share one ranking of the reference space.
    """
    learned_unit = _l2_normalise(learned, "learned")
    n = learned_unit.shape[0]
    if n < 2:
        raise ValueError(
            "neighbour preservation needs at least 2 samples (a sample is not its own neighbour)"
        )
    if not ks:
        raise ValueError("ks must name at least one k")
    ks = sorted({_check_k(k, n) for k in ks})
    top = ks[-1]
    if reference_ranking is None:
        if reference is None:
            raise ValueError("pass the reference embeddings or their reference_ranking")
        reference_unit = _l2_normalise(reference, "reference")
        _check_same_rows(learned_unit, reference_unit, "learned", "reference")
        reference_ranking = _ranking_of_unit(reference_unit, top)
    elif reference_ranking.shape[0] != n or reference_ranking.shape[1] < top:
        raise ValueError(
            f"reference_ranking must be [n = {n}, >= {top}], got {reference_ranking.shape}; rank the "
            f"reference space with nearest_neighbour_ranking(reference, max(ks))"
        )
    per_sample = preservation_from_rankings(_ranking_of_unit(learned_unit, top), reference_ranking, ks)
    result = {}
    for k in ks:
        mean = float(per_sample[k].mean())
        chance = chance_preservation(k, n)
        result[k] = {"mean": mean, "chance": chance, "lift": mean / chance, "per_sample": per_sample[k]}
    return result


def within_modality_topic_precision(embeddings: np.ndarray, topics: Sequence | np.ndarray, k: int) -> float:
    """Mean over samples of the share of its ``k`` nearest *other* same-modality samples with its topic.

    The within-modality counterpart of :func:`evaluation.metrics.topic_precision_at_k` (image→image,
    text→text): the within-modality losses are meant to keep semantically related items together inside
    each modality, which cross-modal precision does not see. Neighbours follow
    :func:`evaluation.metrics.nearest_neighbour_mask` (cosine, ties by the lower index; the query is never
    its own neighbour).
    """
    unit = _l2_normalise(embeddings, "embeddings")
    n = unit.shape[0]
    k = _check_k(k, n)
    labels = np.asarray(topics)
    if labels.shape != (n,):
        raise ValueError(f"need one topic per sample ({n}), got shape {labels.shape}")
    codes = np.unique(labels, return_inverse=True)[1].reshape(n)
    share = np.empty(n, dtype=np.float64)
    for rows in _chunk_rows(n, 2 * n):
        neighbours = _neighbour_mask_of_unit(unit, k, rows)
        share[rows] = (neighbours & (codes[rows, None] == codes[None, :])).sum(axis=1) / k
    return float(share.mean())
