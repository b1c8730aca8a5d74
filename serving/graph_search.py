"""A graph index (HNSW, faiss ``IndexHNSWFlat``) over the flat ``[N*K, D]`` unit vectors, searched by inner
product (= cosine on unit vectors): the backend above the exact-search crossover of :mod:`serving.neighbors`.

faiss rather than hnswlib: faiss-cpu installs as a wheel everywhere the project installs (hnswlib needs a C++
compiler), its flat index is also the benchmark's fast exact reference, and it offers IVF-PQ should galleries
outgrow RAM. The settings below were chosen with ``benchmarks/bench_search.py --backends``
(benchmarks/results/bench_backends.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from serving.neighbors import _best_per_item, check_width

#: neighbors per node (2*M on the bottom layer). 16, not 32: at 100k items M 32 built 1.2-1.7x slower for
#: recall the search list buys back more cheaply (ef_search), and the 1M build must stay within 5 minutes on
#: 2 cores (hnswlib at M 16 / ef_construction 100: 221 s there; benchmarks/results/bench_backends.md)
HNSW_M = 16
#: candidate list while inserting: more gives a better graph and a longer build (about linearly)
HNSW_EF_CONSTRUCTION = 100
#: candidate list while searching (raised to the number of rows asked for when that is larger): 256, not 128,
#: for the overlapping gallery, where 128 loses 2-3% of the true top 10 already at 10k items; a query costs
#: well under a millisecond either way, far below exact search above the crossover. NOT yet enough on the
#: overlapping gallery at 100k items (recall@10 0.883; 0.927 at ef_search 512): see bench_backends.md
HNSW_EF_SEARCH = 256
#: vectors added per faiss call: a progress bar that moves, and each call still spreads over every core
ADD_CHUNK = 20_000
#: below this many vectors a build takes about a second: no progress bar
PROGRESS_FROM_VECTORS = 50_000


def _flat(vectors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vectors.reshape(-1, vectors.shape[-1]), dtype=np.float32)


class HnswSearch:
    """HNSW over item ``i``'s K vectors at rows ``i*K .. i*K+K-1``; an item's score is its best pair."""

    name = "hnsw"

    def __init__(self, index: faiss.IndexHNSWFlat, n_items: int, per_item: int, ef_search: int) -> None:
        self.index, self.n_items, self.per_item, self.ef_search = index, n_items, per_item, ef_search
        self.width = index.d

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        path: Path | None = None,
        m: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        ef_search: int = HNSW_EF_SEARCH,
        progress: bool | None = None,
    ) -> HnswSearch:
        """Insert ``vectors`` (``[N, K, D]``, unit rows) in chunks, on every core; written to ``path`` when
        given. ``progress``: a bar (default: for builds of at least ``PROGRESS_FROM_VECTORS`` vectors)."""
        n_items, per_item, width = vectors.shape
        flat = _flat(vectors)
        index = faiss.IndexHNSWFlat(width, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
        show = len(flat) >= PROGRESS_FROM_VECTORS if progress is None else progress
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        try:
            with tqdm(total=len(flat), desc="HNSW graph", unit="vec", disable=not show) as bar:
                for start in range(0, len(flat), ADD_CHUNK):
                    chunk = flat[start : start + ADD_CHUNK]
                    index.add(chunk)
                    bar.update(len(chunk))
        finally:
            faiss.omp_set_num_threads(threads)
        if path is not None:
            faiss.write_index(index, str(path))
        return cls(index, n_items, per_item, ef_search)

    @classmethod
    def load(cls, path: Path, n_items: int, per_item: int, width: int, ef_search: int) -> HnswSearch:
        index = faiss.read_index(str(path))
        if index.ntotal != n_items * per_item or index.d != width:
            raise ValueError(
                f"{path} holds {index.ntotal} vectors of width {index.d}, the index {n_items * per_item} of "
                f"width {width}; rebuild the index"
            )
        return cls(index, n_items, per_item, ef_search)

    def settings(self) -> dict[str, Any]:
        """What ``index.json`` records: M is read back from the graph, so a loaded index reports its own."""
        return {
            "M": int(self.index.hnsw.nb_neighbors(1)),
            "ef_construction": int(self.index.hnsw.efConstruction),
            "ef_search": int(self.ef_search),
        }

    def _rows(self, query: np.ndarray, wanted: int) -> tuple[np.ndarray, np.ndarray]:
        # per call, not on the shared index: the server searches from several threads at once
        params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, wanted))
        scores, rows = self.index.search(query, wanted, params=params)
        found = rows >= 0  # faiss pads with -1 where the graph yielded fewer rows
        return rows[found].astype(np.int64), scores[found].astype(np.float64)

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        query = np.ascontiguousarray(check_width(query, self.width, self.name))
        excluded = set(exclude)
        k = min(k, self.n_items - sum(0 <= item < self.n_items for item in excluded))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        total = self.n_items * self.per_item
        # K query vectors x K rows per item: k distinct items need at least (k + excluded) * K rows; widen
        # while the best-per-item list is short (an item's K rows often come back together)
        wanted = min(total, (k + len(excluded)) * self.per_item)
        while True:
            rows, scores = self._rows(query, wanted)
            items, best = _best_per_item(rows, scores, self.per_item)
            keep = np.fromiter((item not in excluded for item in items), dtype=bool, count=len(items))
            items, best = items[keep], best[keep]
            if len(items) >= k or wanted >= total:
                return items[:k], best[:k].astype(np.float32)
            wanted = min(total, wanted * 2)
