"""Nearest items by cosine similarity of L2-normalised embeddings ``[N, K, D]``: exact (one matrix product) or
Annoy (approximate, angular), chosen by gallery size at the crossover measured by
``benchmarks/bench_search.py`` (figures in ``benchmarks/results/bench_search.md``).

With K > 1 embeddings per item (PVSE) an item's score is the best over the K x K query-item pairs, PVSE's
similarity; every item's K vectors are rows ``item * K + j`` of the flat table.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
from annoy import AnnoyIndex

#: up to this many vectors a modality is searched exactly. Measured by benchmarks/bench_search.py on this 2-core
#: machine with 256-d clustered embeddings (benchmarks/results/bench_search.md): at 1M vectors exact search takes
#: 19-40 ms (p50) with recall 1, while Annoy needs 48 trees and search_k >= 250k to reach recall@10 >= 0.95 and is
#: then no faster (~30-45 ms); Annoy pays off only beyond that, where exact grows linearly and Annoy does not.
EXACT_SEARCH_MAX_VECTORS = 1_000_000
#: Annoy settings above the crossover: recall@10 0.99 at 1M vectors in the benchmark (16 trees / 40k: 0.46)
ANNOY_TREES = 48
ANNOY_SEARCH_K = 400_000


def choose_backend(n_vectors: int, exact_up_to: int = EXACT_SEARCH_MAX_VECTORS) -> str:
    return "exact" if n_vectors <= exact_up_to else "annoy"


def _best_per_item(rows: np.ndarray, scores: np.ndarray, per_item: int) -> tuple[np.ndarray, np.ndarray]:
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
        scores = (self.flat @ np.asarray(query, dtype=np.float32).T).reshape(self.n_items, -1).max(axis=1)
        excluded = np.fromiter(exclude, dtype=np.int64)
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

    def __init__(self, index: AnnoyIndex, n_items: int, per_item: int, search_k: int) -> None:
        self.index, self.n_items, self.per_item, self.search_k = index, n_items, per_item, search_k

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
        index.save(str(path))
        return cls(index, n_items, per_item, search_k)

    @classmethod
    def load(cls, path: Path, n_items: int, per_item: int, width: int, search_k: int) -> AnnoySearch:
        index = AnnoyIndex(width, "angular")
        index.load(str(path))  # memory-mapped: several processes share the pages
        if index.get_n_items() != n_items * per_item:
            raise ValueError(
                f"{path} holds {index.get_n_items()} vectors, the index {n_items * per_item}; rebuild the index"
            )
        return cls(index, n_items, per_item, search_k)

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        excluded = set(exclude)
        wanted = min(self.n_items * self.per_item, (k + len(excluded)) * self.per_item)
        rows, scores = [], []
        for vector in np.asarray(query, dtype=np.float32):
            found, distances = self.index.get_nns_by_vector(
                vector.tolist(), wanted, search_k=max(self.search_k, wanted), include_distances=True
            )
            rows.append(np.asarray(found, dtype=np.int64))
            scores.append(1.0 - np.square(np.asarray(distances, dtype=np.float64)) / 2.0)
        items, best = _best_per_item(np.concatenate(rows), np.concatenate(scores), self.per_item)
        keep = np.array([item not in excluded for item in items], dtype=bool)
        return items[keep][:k], best[keep][:k].astype(np.float32)
