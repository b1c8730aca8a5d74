"""Input guards, row chunking and the one similarity every evaluation metric scores with.

Why one module: every metric (retrieval, neighborhoods, calibration, proximity) must agree on what a score
is and refuse the same malformed inputs, so a PVSE variant is ranked by the similarity it was trained with
wherever it is evaluated. Conventions shared by the metric modules of ``evaluation``:

* Embeddings are ``[n, d]`` float arrays (one embedding per item) or ``[n, K, d]`` (K embeddings per
  item, as PVSE gives). Every score between two items comes from :func:`cross_modal_scores`: the dot
  product for ``[n, d]``, and for ``[n, K, d]`` PVSE's multiple-instance similarity, the maximum dot
  product over the K x K' pairs of the two items' embeddings (Song & Soleymani 2019; ``mil_similarity``
  in ``models/losses/pvse_mil.py``). An ``[n, 1, d]`` array is treated as the ``[n, d]`` array it holds,
  so K = 1 gives exactly the single-embedding numbers. Cross-modal functions expect L2-normalised
  embeddings (each of the K, for ``[n, K, d]``) and refuse any whose norm is not 1; within-modality
  neighbor functions use cosine similarity (for ``[n, K, d]``: the same maximum over the K x K pairs of
  cosines) and normalise themselves (a Doc2Vec reference space is not normalised).
* Row ``i`` of ``image`` is paired with row ``i`` of ``text`` unless a function takes ``text_to_image``.
* ``group_ids`` (any hashable labels, one per row) mark rows that hold the same item, e.g. the pairs of one
  COCO image; rows of one group are never used as each other's negatives.
* Similarities are computed in float64 and, except for the global PR curve (which must sort all
  n_images * n_texts scores), in row chunks (:func:`chunk_rows`), so memory stays bounded for thousands
  of queries.
* Every random draw takes an explicit seed; the same arguments give the same numbers.
* Ties: a paired item must score *strictly* higher than a negative to beat it (ties count against the
  model); nearest-neighbor sets break ties by the lower row index.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

# Rows per similarity chunk are chosen so one chunk holds about this many float64 entries (~64 MB).
_CHUNK_ENTRIES = 8_000_000
_UNIT_NORM_TOLERANCE = 1e-3


def as_embeddings(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as float64 ``[n, d]`` or ``[n, K, d]`` (``[n, 1, d]`` becomes ``[n, d]``), refusing empty or
    non-finite input: a NaN would otherwise rank silently as the lowest score."""
    array = np.asarray(x, dtype=np.float64)
    if array.ndim == 3 and array.shape[1] == 1:
        # one embedding per item: the single-embedding case, so K = 1 runs the very same [n, d] code
        array = array[:, 0, :]
    if array.ndim not in (2, 3) or 0 in array.shape:
        raise ValueError(
            f"{name} must be a non-empty [n, d] array of embeddings, or [n, K, d] with K embeddings per item "
            f"(PVSE), got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or inf; check the encoder output before evaluating")
    return array


def as_unit_embeddings(x: np.ndarray, name: str) -> np.ndarray:
    """:func:`as_embeddings`, refusing any embedding whose L2 norm is not 1: cross-modal scores are dot
    products, which only equal cosines for unit vectors."""
    array = as_embeddings(x, name)
    norms = np.linalg.norm(array, axis=-1)
    worst = np.unravel_index(int(np.argmax(np.abs(norms - 1.0))), norms.shape)
    if abs(norms[worst] - 1.0) > _UNIT_NORM_TOLERANCE:
        where = f"row {worst[0]}" + (f" embedding {worst[1]}" if len(worst) == 2 else "")
        raise ValueError(
            f"{name} {where} has L2 norm {norms[worst]:.4f}; similarity here is the dot product, so "
            f"L2-normalise the embeddings first (x / np.linalg.norm(x, axis=-1, keepdims=True))"
        )
    return array


def l2_normalise(x: np.ndarray, name: str) -> np.ndarray:
    """:func:`as_embeddings` scaled to unit length, for cosine similarity within one space (a Doc2Vec
    reference space is not normalised); zero rows are refused, their cosine is undefined."""
    array = as_embeddings(x, name)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    zero_rows = np.flatnonzero((norms == 0).reshape(array.shape[0], -1).any(axis=1))
    if zero_rows.size:
        raise ValueError(
            f"{name} rows {zero_rows[:5].tolist()} have zero norm, so cosine similarity is undefined; "
            f"drop those samples before evaluating"
        )
    return array / norms


def check_same_rows(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    """Refuse two arrays that cannot be row-aligned: row i of both must describe the same pair."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{name_a} has {a.shape[0]} rows but {name_b} has {b.shape[0]}; row i of both must describe "
            f"the same pair/sample"
        )


def check_same_width(image: np.ndarray, text: np.ndarray) -> None:
    """Refuse embeddings of different widths: scores need one joint space."""
    if image.shape[-1] != text.shape[-1]:
        raise ValueError(
            f"image embeddings are {image.shape[-1]}-d but text embeddings are {text.shape[-1]}-d; both "
            f"modalities must be projected into the same joint space"
        )


def embedding_sets(x: np.ndarray) -> np.ndarray:
    """``[n, K, d]`` view of embeddings; an ``[n, d]`` array is the K = 1 case."""
    return x if x.ndim == 3 else x[:, None, :]


def cross_modal_scores(query: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """``[n_query, n_gallery]`` float64 similarity of every query item to every gallery item.

    For ``[n, d]`` inputs this is the dot product ``query @ gallery.T``. For ``[n, K, d]`` inputs (K
    embeddings per item) it is PVSE's multiple-instance similarity (Song & Soleymani 2019, Sec. 3.2;
    the score its ranking loss and retrieval use): ``s(q, g) = max_{k, l} <query[q, k], gallery[g, l]>``,
    the best-matching pair of the two items' embeddings. An ``[n, d]`` side counts as K = 1, and an
    ``[n, 1, d]`` side is reduced to ``[n, d]``, so K = 1 reproduces the dot product bit for bit. The same
    rule serves within one modality (query and gallery both images, or both texts).

    The caller bounds the ``[n_query, n_gallery]`` result (every function here passes row chunks); the
    K x K' pair scores behind it are computed in query-row chunks of about ``_CHUNK_ENTRIES`` entries.
    """
    query = as_embeddings(query, "query")
    gallery = as_embeddings(gallery, "gallery")
    check_same_width(query, gallery)
    if query.ndim == 2 and gallery.ndim == 2:
        return query @ gallery.T
    query_sets, gallery_sets = embedding_sets(query), embedding_sets(gallery)
    n_query, query_k, width = query_sets.shape
    n_gallery, gallery_k = gallery_sets.shape[:2]
    flat_gallery = gallery_sets.reshape(n_gallery * gallery_k, width)
    scores = np.empty((n_query, n_gallery), dtype=np.float64)
    for rows in chunk_rows(n_query, query_k * n_gallery * gallery_k):
        pair_scores = query_sets[rows].reshape(-1, width) @ flat_gallery.T
        scores[rows] = pair_scores.reshape(-1, query_k, n_gallery, gallery_k).max(axis=(1, 3))
    return scores


def group_codes(group_ids: Sequence | np.ndarray | None, n: int) -> np.ndarray:
    """Integer codes for ``group_ids`` (any labels); ``None`` makes every row its own group."""
    if group_ids is None:
        return np.arange(n)
    labels = np.asarray(group_ids)
    if labels.shape != (n,):
        raise ValueError(f"group_ids must have one label per row ({n}), got shape {labels.shape}")
    _, codes = np.unique(labels, return_inverse=True)
    return codes.reshape(n)


def chunk_rows(n_rows: int, row_width: int) -> Iterator[slice]:
    """Row slices of ``n_rows`` such that a ``[rows, row_width]`` float64 block holds about
    ``_CHUNK_ENTRIES`` entries, so similarity matrices of thousands of queries stay bounded in memory."""
    step = max(1, _CHUNK_ENTRIES // max(1, row_width))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def check_seed(seed: int) -> None:
    """Refuse a seed that is not a non-negative integer: every draw must be reproducible from it."""
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
