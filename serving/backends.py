"""The search backends by name (``crossmodal index --backend``): their classes, each tagged ``approximate`` when it
keeps a structure in a file beside the vectors (``<modality>.<suffix>``, read back by ``load(path, n_items,
per_item, width, settings[search_setting])``), and the choice of ``auto``.

Why a module of its own: the classes live with their libraries (Annoy in :mod:`serving.neighbors`, faiss in
:mod:`serving.graph_search` and :mod:`serving.compressed_search`), and those import the exact search's helpers
from :mod:`serving.neighbors`; the table that holds all four sits above them.
"""

from __future__ import annotations

from common.registry import Registry
from serving.compressed_search import PqScanSearch
from serving.graph_search import HnswSearch
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS, AnnoySearch, ExactSearch

SearchBackend = ExactSearch | AnnoySearch | HnswSearch | PqScanSearch

#: every backend's class by name; ``approximate`` ones keep a file beside the vectors
SEARCH_BACKENDS: Registry[type[SearchBackend]] = Registry("search backend")
SEARCH_BACKENDS.add("exact", ExactSearch, approximate=False)
SEARCH_BACKENDS.add("annoy", AnnoySearch, approximate=True)
SEARCH_BACKENDS.add("hnsw", HnswSearch, approximate=True)
SEARCH_BACKENDS.add("pq", PqScanSearch, approximate=True)
#: what ``crossmodal index --backend`` accepts: ``auto`` (exact up to the crossover, the PQ scan above), then
#: exact search, then the approximate backends
BACKENDS = ("auto", *SEARCH_BACKENDS.names(approximate=False), *SEARCH_BACKENDS.names(approximate=True))
#: the backends kept in a file beside the vectors, by name
APPROXIMATE_BACKENDS: dict[str, type[AnnoySearch | HnswSearch | PqScanSearch]] = {
    name: SEARCH_BACKENDS.get(name) for name in SEARCH_BACKENDS.names(approximate=True)
}


def choose_backend(n_vectors: int, exact_up_to: int = EXACT_SEARCH_MAX_VECTORS, backend: str = "auto") -> str:
    """The backend that searches ``n_vectors`` vectors: ``backend`` itself (by its canonical name) unless it is
    ``auto``; a one-line ``ValueError`` naming the valid choices for any other name."""
    if backend != "auto" and backend not in SEARCH_BACKENDS:
        close = SEARCH_BACKENDS.close_match(backend)
        hint = f" did you mean {close!r}?" if close else ""
        raise ValueError(f"search backend {backend!r}:{hint} choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return SEARCH_BACKENDS.resolve(backend)
    return "exact" if n_vectors <= exact_up_to else "pq"


