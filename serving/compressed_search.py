"""A compressed full scan: every vector's 4-bit product-quantisation code (faiss ``IndexPQFastScan``, one
code per ``PQ_DIMS_PER_CODE`` dimensions: 32 bytes for a 256-d vector) is scored against the query with SIMD
table lookups, and the best ``rerank`` rows are scored again exactly from the float32 vectors
(``IndexRefineFlat``) — the backend above the exact-search crossover of :mod:`serving.neighbors`.

Why a scan and not only a graph: on the benchmark's ``overlapping`` gallery (the true top 10 scattered over
many clusters, as in near-random high-dimensional data) an HNSW graph at 1M items stays far below recall 0.95
at any search list this machine can afford, while a scan of compact codes misses no region of the gallery; its
build is seconds (a codebook trained on a sample, then one pass of encoding) instead of many minutes.
Measured with ``benchmarks/bench_search.py --backends`` (benchmarks/results/bench_backends.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from common.files import native_write
from serving.faiss_search import FaissSearch, add_in_chunks, every_core, flat_rows, read_checked

#: dimensions per 4-bit code: 4 (one bit per dimension, 32 bytes for 256-d); 8 per code halves the scan but
#: needs far more rows re-ranked for the same recall (recall@10 0.71 against 0.975 at 100k overlapping items)
PQ_DIMS_PER_CODE = 4
#: rows re-scored exactly per query (at least 1 per row asked for): the recall knob. 6000, the cheapest setting
#: of the benchmark's grid (3000, 6000, 12000) with recall@10 >= 0.95 on both galleries at 1M items: 1.000 /
#: 0.981 (3000: 1.000 / 0.947), p99 8.2 / 10.3 ms against exact's 134.6 / 143.2 ms in the same run
PQ_RERANK = 6000
#: codebooks are trained on at most this many rows (a seeded sample): more changes little and costs time
PQ_TRAIN_ROWS = 65_536
#: k-means wants at least 39 points per centroid (16 centroids of 4 bits); smaller galleries are tiled
PQ_MIN_TRAIN_ROWS = 39 * 16


def sub_quantizers(width: int, dims_per_code: int = PQ_DIMS_PER_CODE) -> int:
    """Codes per vector: ``width / dims_per_code``, lowered to a divisor of ``width`` (faiss needs one)."""
    count = max(1, width // dims_per_code)
    while width % count:
        count -= 1
    return count


def training_rows(flat: np.ndarray, seed: int = 0) -> np.ndarray:
    """A seeded sample of at most ``PQ_TRAIN_ROWS`` rows, tiled up to ``PQ_MIN_TRAIN_ROWS`` for small
    galleries (an empty one trains on seeded noise: nothing is encoded with it)."""
    rng = np.random.default_rng(seed)
    if len(flat) == 0:
        flat = rng.standard_normal((PQ_MIN_TRAIN_ROWS, flat.shape[1]), dtype=np.float32)
    if len(flat) > PQ_TRAIN_ROWS:
        flat = flat[np.sort(rng.choice(len(flat), PQ_TRAIN_ROWS, replace=False))]
    if len(flat) < PQ_MIN_TRAIN_ROWS:
        flat = np.resize(flat, (PQ_MIN_TRAIN_ROWS, flat.shape[1]))
    return np.ascontiguousarray(flat, dtype=np.float32)


class PqScanSearch(FaissSearch):
    """A 4-bit PQ fast scan with an exact re-rank of the best ``rerank`` rows, over item ``i``'s K vectors
    at rows ``i*K .. i*K+K-1``; an item's score is its best pair (exact, from the re-rank)."""

    name = "pq"
    #: the file beside the vectors (``<modality>.pq``) and the setting ``load`` takes from ``index.json``
    suffix = "pq"
    search_setting = "rerank"

    def __init__(self, index: faiss.IndexRefineFlat, n_items: int, per_item: int, rerank: int) -> None:
        super().__init__(index, n_items, per_item)
        self.rerank = rerank

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        path: Path | None = None,
        rerank: int = PQ_RERANK,
        dims_per_code: int = PQ_DIMS_PER_CODE,
        progress: bool | None = None,
    ) -> PqScanSearch:
        """Train the codebooks on a sample of ``vectors`` (``[N, K, D]``, unit rows), encode every row on
        every core; written to ``path`` when given."""
        n_items, per_item, width = vectors.shape
        flat = flat_rows(vectors)
        codes = faiss.IndexPQFastScan(
            width, sub_quantizers(width, dims_per_code), 4, faiss.METRIC_INNER_PRODUCT
        )
        with every_core():
            codes.train(training_rows(flat))
        index = faiss.IndexRefineFlat(codes)
        add_in_chunks(index, flat, "PQ codes", progress)
        if path is not None:
            with native_write(path):
                faiss.write_index(index, str(path))
        return cls(index, n_items, per_item, rerank)

    @classmethod
    def load(cls, path: Path, n_items: int, per_item: int, width: int, rerank: int) -> PqScanSearch:
        return cls(read_checked(path, n_items, per_item, width), n_items, per_item, rerank)

    def settings(self) -> dict[str, Any]:
        """What ``index.json`` records: the code layout is read back from the index itself."""
        codes = faiss.downcast_index(self.index.base_index)
        return {"sub_quantizers": int(codes.M), "bits": int(codes.nbits), "rerank": int(self.rerank)}

    def _rows(self, query: np.ndarray, wanted: int) -> tuple[np.ndarray, np.ndarray]:
        # per call, not on the shared index: the server searches from several threads at once
        params = faiss.IndexRefineSearchParameters(k_factor=float(max(1, math.ceil(self.rerank / wanted))))
        scores, rows = self.index.search(query, wanted, params=params)
        return rows, scores
