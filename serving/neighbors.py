"""Nearest items by cosine similarity of L2-normalised embeddings ``[N, K, D]``: exact (one matrix product),
Annoy (approximate, angular), a graph index (HNSW, :mod:`serving.graph_search`) or a 4-bit PQ scan with an
exact re-rank (:mod:`serving.compressed_search`); ``auto`` chooses exact or the PQ scan by gallery size at the
crossover measured by ``benchmarks/bench_search.py --backends`` (figures in
``benchmarks/results/bench_backends.md``).

With K > 1 embeddings per item (PVSE) an item's score is the best over the K x K query-item pairs, PVSE's
similarity; every item's K vectors are rows ``item * K + j`` of the flat table.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from annoy import AnnoyIndex

from common.files import native_write

#: up to this many vectors ``auto`` searches a modality exactly, above it with the PQ scan
#: (:mod:`serving.compressed_search`). Measured by benchmarks/bench_search.py --backends
#: (benchmarks/results/bench_backends.md): exact search costs ~1 ms a query at 10k vectors, where the PQ scan is
#: no faster, and grows linearly (p99 16-19 ms at 100k, 135-143 ms at 1M on this 2-core machine) while the scan
#: answers in 4 ms / 8-10 ms p99 at recall@10 0.98-1.00 on both galleries. Absolute times follow the machine's
#: memory bandwidth (exact reads every vector); the ratios are what travels.
EXACT_SEARCH_MAX_VECTORS = 20_000
#: Annoy settings (``--backend annoy`` only): recall@10 0.98 at 1M clustered vectors but 0.83 on the
#: overlapping gallery, at exact search's latency (benchmarks/results/bench_backends.md)
ANNOY_TREES = 48
ANNOY_SEARCH_K = 400_000
def check_width(query: np.ndarray, width: int, backend: str) -> np.ndarray:
    """``query`` as float32 ``[Kq, D]``; a ValueError naming both widths when D is not the gallery's."""
    query = np.atleast_2d(np.asarray(query, dtype=np.float32))
    if query.ndim != 2 or query.shape[1] != width:
        raise ValueError(f"query width {query.shape[-1]} != the {backend} index's width {width}")
    return query


def best_per_item(rows: np.ndarray, scores: np.ndarray, per_item: int) -> tuple[np.ndarray, np.ndarray]:
    """Highest score of each item among flat ``rows`` (item = row // K), items by decreasing score."""
    items = rows // per_item
    order = np.lexsort((-scores, items))
    first = np.ones(len(order), dtype=bool)
    first[1:] = items[order][1:] != items[order][:-1]
    kept_items, kept_scores = items[order][first], scores[order][first]
    ranking = np.argsort(-kept_scores, kind="stable")
    return kept_items[ranking], kept_scores[ranking]


class ExactSearch:
    """Every item scored: ``[N*K, D] @ [D, Kq]``, best pair per item, top k."""

    name = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        self.n_items, self.per_item, self.width = vectors.shape
        self.flat = np.ascontiguousarray(vectors.reshape(-1, self.width), dtype=np.float32)

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        query = check_width(query, self.width, self.name)
        pairs = self.flat @ query.T
        # an explicit row width: reshape(0, -1) of an empty gallery's scores is ambiguous
        scores = pairs.reshape(self.n_items, self.per_item * len(query)).max(axis=1)
        excluded = np.unique(np.fromiter(exclude, dtype=np.int64))
        excluded = excluded[(excluded >= 0) & (excluded < self.n_items)]  # an absent item excludes nothing
        if excluded.size:
            scores[excluded] = -np.inf
        k = min(k, self.n_items - excluded.size)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return top.astype(np.int64), scores[top].astype(np.float32)


class AnnoySearch:
    """Annoy's angular forest over the flat vectors; score = cosine = 1 - distance^2 / 2."""

    name = "annoy"
    #: the file beside the vectors (``<modality>.ann``) and the setting ``load`` takes from ``index.json``
    suffix = "ann"
    search_setting = "search_k"

    def __init__(
        self, index: AnnoyIndex, n_items: int, per_item: int, search_k: int, n_trees: int | None = None
    ) -> None:
        self.index, self.n_items, self.per_item, self.search_k = index, n_items, per_item, search_k
        # as built; None when loaded (Annoy's get_n_trees() over-counts the roots of a reloaded small forest)
        self.n_trees = n_trees

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        path: Path,
        n_trees: int = ANNOY_TREES,
        search_k: int = ANNOY_SEARCH_K,
        seed: int = 0,
    ) -> AnnoySearch:
        n_items, per_item, width = vectors.shape
        index = AnnoyIndex(width, "angular")
        index.set_seed(seed)
        for row, vector in enumerate(vectors.reshape(-1, width)):
            index.add_item(row, vector)
        index.build(n_trees, n_jobs=-1)
        with native_write(path):
            index.save(str(path))
        return cls(index, n_items, per_item, search_k, n_trees)

    @classmethod
    def load(cls, path: Path, n_items: int, per_item: int, width: int, search_k: int) -> AnnoySearch:
        index = AnnoyIndex(width, "angular")
        index.load(str(path))  # memory-mapped: several processes share the pages
        if index.get_n_items() != n_items * per_item:
            raise ValueError(
                f"{path} holds {index.get_n_items()} vectors, the index {n_items * per_item}; rebuild the index"
            )
        return cls(index, n_items, per_item, search_k)

    def settings(self) -> dict[str, Any]:
        """What ``index.json`` records."""
        return {"n_trees": self.n_trees, "search_k": int(self.search_k)}

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        query = check_width(query, self.index.f, self.name)
        excluded = set(exclude)
        wanted = min(self.n_items * self.per_item, (k + len(excluded)) * self.per_item)
        rows, scores = [], []
        for vector in query:
            found, distances = self.index.get_nns_by_vector(
                vector.tolist(), wanted, search_k=max(self.search_k, wanted), include_distances=True
            )
            rows.append(np.asarray(found, dtype=np.int64))
            scores.append(1.0 - np.square(np.asarray(distances, dtype=np.float64)) / 2.0)
        items, best = best_per_item(np.concatenate(rows), np.concatenate(scores), self.per_item)
        keep = np.array([item not in excluded for item in items], dtype=bool)
        return items[keep][:k], best[keep][:k].astype(np.float32)
