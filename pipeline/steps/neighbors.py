"""k-nearest-neighbor tables over train items with Annoy (the Ψ of Eq. 5), and their recall against exact
search.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from annoy import AnnoyIndex

from common.files import native_write
from common.settings import Limit, at_least, check_declared, setting


@dataclass(frozen=True)
class NeighborSettings:
    """Annoy tables of the k nearest train neighbors (paper: k = 200, Eq. 5)."""

    k: int = setting(200, "neighbors listed per train item (the paper's k of Eq. 5)", at_least(1))
    #: the authors' released code drops distance-0 entries, then takes ``[:10]``; the paper's text draws from all k
    sample_k: int | None = setting(
        10, "i' is drawn from the first sample_k non-duplicate neighbors (null: from all k)", at_least(1, or_null=True)
    )
    n_trees: int = setting(50, "Annoy trees (more: better recall, slower build)", at_least(1))
    search_k: int = setting(
        -1,
        "nodes Annoy inspects per query (-1: its default, n_trees * k)",
        Limit(lambda v: v == -1 or v >= 1, "-1 (Annoy's default) or >= 1"),
    )
    recall_queries: int = setting(500, "items whose neighbors are checked against exact search", at_least(0))

    def __post_init__(self) -> None:
        check_declared(self)


ANNOY_METRIC = "angular"  # cosine distance: Doc2Vec and CNN features are compared by direction


#: neighbors closer than this (Annoy's angular distance, sqrt(2 - 2 cos); cos > 0.9999995) are duplicates of
#: the anchor: float32 rounding puts an exact copy at up to ~4e-4, never at 0
DUPLICATE_DISTANCE = 1e-3
DISTANCE_BLOCK_BYTES = 64 * 2**20  # the gathered neighbor vectors of one block of rows


@dataclass
class NeighborTable:
    neighbors: np.ndarray  # int32 [N, k]: row i -> rows of its k nearest other rows, nearest first
    distances: np.ndarray  # float32 [N, k]: angular distance sqrt(2 - 2 cos) of each listed neighbor
    settings: dict


def build_annoy_index(vectors: np.ndarray, n_trees: int, seed: int) -> AnnoyIndex:
    index = AnnoyIndex(vectors.shape[1], ANNOY_METRIC)
    index.set_seed(seed)
    for row, vector in enumerate(vectors):
        index.add_item(row, vector)
    index.build(n_trees, n_jobs=1)
    return index


def annoy_neighbor_table(
    vectors: np.ndarray,
    k: int,
    n_trees: int,
    search_k: int = NeighborSettings.search_k,
    seed: int = 0,
    save_to: Path | None = None,
) -> NeighborTable:
    """For each row, its ``k`` nearest other rows (itself excluded), by Annoy.

    ``k`` is capped at N-1; rows Annoy returns fewer than k results for are completed by exact search, so
    the table is always full.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(vectors)
    if n < 2:
        raise ValueError(f"need at least 2 items to build a neighbor table, got {n}")
    k_used = min(k, n - 1)
    index = build_annoy_index(vectors, n_trees, seed)
    table = np.empty((n, k_used), dtype=np.int32)
    incomplete = 0
    for row in range(n):
        found = [j for j in index.get_nns_by_item(row, k_used + 1, search_k=search_k) if j != row][:k_used]
        if len(found) < k_used:
            incomplete += 1
            found = exact_neighbors(vectors, np.array([row]), k_used)[0].tolist()
        table[row] = found
    distances = angular_distances(vectors, table)
    if save_to is not None:
        with native_write(save_to):
            index.save(str(save_to))
    settings = {
        "dim": int(vectors.shape[1]),
        "metric": ANNOY_METRIC,
        "n_trees": n_trees,
        "search_k": search_k,
        "k_requested": k,
        "k": k_used,
        "n_items": n,
        "rows_completed_exactly": incomplete,
        "seed": seed,
    }
    return NeighborTable(table, distances, settings)


def angular_distances(vectors: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``[N, k]`` Annoy-style angular distance sqrt(2 - 2 cos) from each row to its listed neighbors."""
    vectors = np.asarray(vectors, dtype=np.float64)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    table = np.asarray(table)
    distances = np.empty(table.shape, dtype=np.float32)
    # gathering every row's neighbors at once is an [N, k, dim] float64 array (7,204 x 200 x 1,280 image
    # features: 14.8 GB); a block of rows keeps it near DISTANCE_BLOCK_BYTES and gives the same numbers
    rows_per_block = max(1, DISTANCE_BLOCK_BYTES // max(1, table.shape[1] * unit.shape[1] * 8))
    for start in range(0, len(table), rows_per_block):
        block = slice(start, start + rows_per_block)
        cosine = np.einsum("nd,nkd->nk", unit[block], unit[table[block]])
        distances[block] = np.sqrt(np.clip(2.0 - 2.0 * cosine, 0.0, None))
    return distances


def sampling_pool(neighbors: np.ndarray, distances: np.ndarray, sample_k: int | None) -> np.ndarray:
    """``[N, s]`` the neighbors i' is drawn from (Eq. 5 as the authors' released code samples it): the first
    ``sample_k`` neighbors of each row that are not duplicates of it (distance > ``DUPLICATE_DISTANCE``).

    ``sample_k=None`` keeps every listed neighbor (uniform over all k, the paper's text). A row with fewer
    than ``sample_k`` non-duplicates repeats them cyclically (so sampling stays uniform over them); a row
    whose every neighbor is a duplicate keeps its first ``sample_k`` neighbors as they are.
    """
    neighbors = np.asarray(neighbors)
    if neighbors.shape != np.shape(distances):
        raise ValueError(f"neighbors {neighbors.shape} and distances {np.shape(distances)} must match")
    if sample_k is None:
        return neighbors
    if sample_k < 1:
        raise ValueError(f"sample_k must be a positive number of neighbors or None, got {sample_k}")
    width = min(sample_k, neighbors.shape[1])
    pool = np.empty((len(neighbors), width), dtype=neighbors.dtype)
    for row, (listed, gaps) in enumerate(zip(neighbors, distances, strict=True)):
        kept = listed[gaps > DUPLICATE_DISTANCE][:width]
        if len(kept) == 0:
            kept = listed[:width]
        pool[row] = np.resize(kept, width)
    return pool


def exact_neighbors(vectors: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Exact cosine k-NN of ``rows`` among all rows (self excluded; ties by lower index)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit[rows] @ unit.T
    similarity[np.arange(len(rows)), rows] = -np.inf
    order = np.argsort(-similarity, axis=1, kind="stable")
    return order[:, :k]


def recall_against_exact(vectors: np.ndarray, table: np.ndarray, n_queries: int, seed: int = 0) -> dict:
    """Recall@k of the Annoy table against exact search on a random sample of rows."""
    n, k = table.shape
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(n_queries, n), replace=False))
    exact = exact_neighbors(np.asarray(vectors, dtype=np.float32), rows, k)
    overlap = [len(set(table[r]) & set(e)) / k for r, e in zip(rows, exact, strict=True)]
    return {"recall_at_k": float(np.mean(overlap)), "k": k, "n_queries": len(rows)}


def same_topic_share(topics: np.ndarray, table: np.ndarray) -> float:
    """Share of the table's entries whose topic is their row's (the expected same-topic rate of an i' drawn
    uniformly from each row)."""
    topics = np.asarray(topics)
    return float((topics[np.asarray(table)] == topics[:, None]).mean())
