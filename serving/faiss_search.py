"""What the faiss backends of :mod:`serving.neighbors` share: a faiss index over the flat ``[N*K, D]`` unit
vectors (item ``i``'s K vectors at rows ``i*K .. i*K+K-1``, an item's score its best pair, PVSE's similarity),
built in chunks on every core with a progress bar, saved and loaded as one file, and searched for ``k``
distinct items with ``exclude`` by fetching rows and widening until enough items come back."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from serving.neighbors import best_per_item, check_width

#: vectors added per faiss call: a progress bar that moves, and each call still spreads over every core
ADD_CHUNK = 20_000
#: below this many vectors a build takes about a second: no progress bar
PROGRESS_FROM_VECTORS = 50_000


def flat_rows(vectors: np.ndarray) -> np.ndarray:
    """``[N, K, D]`` as the contiguous float32 ``[N*K, D]`` table faiss indexes."""
    return np.ascontiguousarray(vectors.reshape(-1, vectors.shape[-1]), dtype=np.float32)


def add_in_chunks(index: faiss.Index, flat: np.ndarray, label: str, progress: bool | None) -> None:
    """``index.add(flat)`` on every core, ``ADD_CHUNK`` rows at a time under a ``label`` progress bar
    (``progress`` None: a bar for at least ``PROGRESS_FROM_VECTORS`` rows)."""
    show = len(flat) >= PROGRESS_FROM_VECTORS if progress is None else progress
    with every_core(), tqdm(total=len(flat), desc=label, unit="vec", disable=not show) as bar:
        for start in range(0, len(flat), ADD_CHUNK):
            chunk = flat[start : start + ADD_CHUNK]
            index.add(chunk)
            bar.update(len(chunk))


@contextmanager
def every_core() -> Iterator[None]:
    """faiss on every core inside the block, the caller's thread count restored after it (searches run on
    the threads the caller set: the server's, or one in the benchmark)."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


def read_checked(path: Path, n_items: int, per_item: int, width: int) -> faiss.Index:
    """The faiss index at ``path``; a ValueError saying to rebuild when it does not hold these vectors."""
    index = faiss.read_index(str(path))
    if index.ntotal != n_items * per_item or index.d != width:
        raise ValueError(
            f"{path} holds {index.ntotal} vectors of width {index.d}, the index {n_items * per_item} of "
            f"width {width}; rebuild the index"
        )
    return index


def search_items(
    rows_for: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
    query: np.ndarray,
    k: int,
    exclude: Iterable[int],
    n_items: int,
    per_item: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best items (not in ``exclude``) and their scores, from ``rows_for(query, wanted)``, which
    returns up to ``wanted`` (row, score) pairs of the flat table, best first."""
    excluded = set(exclude)
    k = min(k, n_items - sum(0 <= item < n_items for item in excluded))
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    total = n_items * per_item
    # K query vectors x K rows per item: k distinct items need at least (k + excluded) * K rows; widen
    # while the best-per-item list is short (an item's K rows often come back together)
    wanted = min(total, (k + len(excluded)) * per_item)
    while True:
        rows, scores = rows_for(query, wanted)
        found = rows >= 0  # faiss pads with -1 where it yielded fewer rows
        items, best = best_per_item(rows[found].astype(np.int64), scores[found].astype(np.float64), per_item)
        keep = np.fromiter((item not in excluded for item in items), dtype=bool, count=len(items))
        items, best = items[keep], best[keep]
        if len(items) >= k or wanted >= total:
            return items[:k], best[:k].astype(np.float32)
        wanted = min(total, wanted * 2)


class FaissSearch:
    """A faiss index over item vectors, searched by :func:`search_items`; subclasses say how rows are
    fetched (``_rows``) and what ``index.json`` records (``settings``)."""

    name = "faiss"

    def __init__(self, index: faiss.Index, n_items: int, per_item: int) -> None:
        self.index, self.n_items, self.per_item = index, n_items, per_item
        self.width = index.d

    def _rows(self, query: np.ndarray, wanted: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def search(self, query: np.ndarray, k: int, exclude: Iterable[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        query = np.ascontiguousarray(check_width(query, self.width, self.name))
        return search_items(self._rows, query, k, exclude, self.n_items, self.per_item)
