"""Semantic proximity of Fig. 5 (Thomas & Kovashka 2020, Sec. 4.4): Doc2Vec-neighbor pairs, and how much
closer our model keeps each pair than the baseline does.

Why ratios of distances rather than distances: the two models' spaces are scaled differently, so only the
same pair's distance under both says which model keeps it closer. Distances follow the max-over-pairs rule
of :func:`evaluation.embeddings.cross_modal_scores` for ``[n, K, d]`` embeddings.
"""

from __future__ import annotations

import numpy as np

from evaluation.embeddings import check_same_rows, check_same_width, check_seed, embedding_sets, l2_normalise


def sample_neighbor_pairs(neighbor_table: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Draw ``n`` distinct unordered neighbor pairs from a reference-space neighbor table (Fig. 5).

    ``neighbor_table[i]`` lists the neighbor rows of sample ``i`` (negative entries are padding). Each
    pair ``{i, j}`` with ``i != j`` is counted once however often it is listed, and ``n`` of them are drawn
    uniformly without replacement with ``seed`` (fewer if fewer exist). Returns ``[n, 2]`` int rows
    ``(i, j)`` with ``i < j``.
    """
    table = np.asarray(neighbor_table)
    if table.ndim != 2 or not np.issubdtype(table.dtype, np.integer):
        raise ValueError(
            f"neighbor_table must be an integer [n_samples, n_neighbors] array, got {table.shape}"
        )
    if table.size and table.max() >= table.shape[0]:
        raise ValueError(f"neighbor_table refers to row {table.max()} but has only {table.shape[0]} rows")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of pairs, got {n!r}")
    check_seed(seed)
    anchor = np.repeat(np.arange(table.shape[0]), table.shape[1])
    other = table.reshape(-1)
    listed = (other >= 0) & (other != anchor)
    pairs = np.unique(np.sort(np.stack([anchor[listed], other[listed]], axis=1), axis=1), axis=0)
    if pairs.shape[0] == 0:
        raise ValueError("neighbor_table lists no pair of distinct samples")
    rng = np.random.default_rng(int(seed))
    chosen = rng.choice(pairs.shape[0], size=min(int(n), pairs.shape[0]), replace=False)
    return pairs[np.sort(chosen)]


def _paired_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Euclidean distance; for embedding sets, the smallest over the K x K' pairs of row p."""
    if a.ndim == 2 and b.ndim == 2:
        return np.linalg.norm(a - b, axis=1)
    a_sets, b_sets = embedding_sets(a), embedding_sets(b)
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
        l2_normalise(x, name)
        for x, name in ((ours_a, "ours_a"), (ours_b, "ours_b"), (base_a, "base_a"), (base_b, "base_b"))
    ]
    for array, name in zip(arrays[1:], ("ours_b", "base_a", "base_b"), strict=True):
        check_same_rows(arrays[0], array, "ours_a", name)
    check_same_width(arrays[0], arrays[1])
    check_same_width(arrays[2], arrays[3])
    ours = _paired_distance(arrays[0], arrays[1])
    base = _paired_distance(arrays[2], arrays[3])
    with np.errstate(divide="ignore", invalid="ignore"):
        return ours / base


def smallest_ratios_first(ratios: np.ndarray) -> np.ndarray:
    """Pair indices ordered by ascending proximity ratio (ties by index; ``nan`` last)."""
    return np.argsort(np.asarray(ratios, dtype=np.float64), kind="stable")
