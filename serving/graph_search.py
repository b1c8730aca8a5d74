"""A graph index (HNSW, faiss ``IndexHNSWFlat``) over the flat ``[N*K, D]`` unit vectors, searched by inner
product (= cosine on unit vectors): ``crossmodal index --backend hnsw``. Not ``auto``'s choice: at 1M items it
answers in 2-3 ms with recall@10 0.98 on the clustered gallery, but on the overlapping one (the true top 10
spread over many clusters) it finds 0.50-0.70 of them at ef_search 256-2048, and its build takes 7-8 minutes on 2
cores (the PQ scan of :mod:`serving.compressed_search`: 10 s, recall 0.98-1.00). A gallery whose recall you have
checked (run the benchmark's measurement on your own vectors) gets the fastest queries from it.

faiss rather than hnswlib: faiss-cpu installs as a wheel everywhere the project installs (hnswlib needs a C++
compiler), its flat index is also the benchmark's fast exact reference, and it offers IVF-PQ should galleries
outgrow RAM. The settings below were chosen with ``benchmarks/bench_search.py --backends``
(benchmarks/results/bench_backends.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

from common.files import native_write
from serving.faiss_search import FaissSearch, add_in_chunks, flat_rows, read_checked

#: neighbors per node (2*M on the bottom layer). 16, not 32: at 100k items M 32 built 1.2-1.7x slower for
#: recall the search list buys back more cheaply (ef_search); at 1M, M 16 already builds in 407-492 s here
HNSW_M = 16
#: candidate list while inserting: more gives a better graph and a longer build (about linearly)
HNSW_EF_CONSTRUCTION = 100
#: candidate list while searching (raised to the number of rows asked for when that is larger): 256, not 128,
#: for the overlapping gallery, where 128 loses 2-3% of the true top 10 already at 10k items (recall there at
#: 100k / 1M items: 0.88 / 0.50; see bench_backends.md)
HNSW_EF_SEARCH = 256


class HnswSearch(FaissSearch):
    """HNSW over item ``i``'s K vectors at rows ``i*K .. i*K+K-1``; an item's score is its best pair."""

    name = "hnsw"
    #: the file beside the vectors (``<modality>.hnsw``) and the setting ``load`` takes from ``index.json``
    suffix = "hnsw"
    search_setting = "ef_search"

    def __init__(self, index: faiss.IndexHNSWFlat, n_items: int, per_item: int, ef_search: int) -> None:
        super().__init__(index, n_items, per_item)
        self.ef_search = ef_search

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
        index = faiss.IndexHNSWFlat(width, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
        add_in_chunks(index, flat_rows(vectors), "HNSW graph", progress)
        if path is not None:
            with native_write(path):
                faiss.write_index(index, str(path))
        return cls(index, n_items, per_item, ef_search)

    @classmethod
    def load(cls, path: Path, n_items: int, per_item: int, width: int, ef_search: int) -> HnswSearch:
        return cls(read_checked(path, n_items, per_item, width), n_items, per_item, ef_search)

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
        return rows, scores
