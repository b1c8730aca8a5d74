"""Qualitative results of Thomas & Kovashka §4.4: the Doc2Vec-neighbor pairs our model keeps closest
relative to the baseline (Fig. 5), top-k retrievals of our model next to the baseline's (Fig. 6), and the
small PNG thumbnails both show.

Every function takes test-set *positions* (row indices into the test embeddings) and returns positions,
so the report can look up each item's text and thumbnail. Embeddings may be ``[n, d]`` or, for PVSE,
``[n, K, d]``; scores and distances follow ``evaluation.embeddings`` (max over the K x K embedding pairs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from evaluation.embeddings import cross_modal_scores
from evaluation.neighborhoods import nearest_neighbor_mask
from evaluation.proximity import proximity_ratios, sample_neighbor_pairs, smallest_ratios_first


def doc2vec_neighbor_table(
    doc_vectors: np.ndarray, k: int, group_ids: np.ndarray | None = None
) -> np.ndarray:
    """``[n, k]`` exact k nearest test items of each test item in Doc2Vec space (cosine, self excluded).

    Entries naming a row of the same group (e.g. another caption of the same image, whose image distance
    is 0 under every model) are set to -1, the padding :func:`sample_neighbor_pairs` skips.
    """
    n = len(doc_vectors)
    if not 1 <= k <= n - 1:
        raise ValueError(f"k = {k} neighbors need at least k + 1 test items, got {n}; lower k")
    mask = nearest_neighbor_mask(doc_vectors, k)
    rows, columns = np.nonzero(mask)
    if not np.array_equal(np.bincount(rows, minlength=n), np.full(n, k)):
        raise RuntimeError("nearest_neighbor_mask did not return exactly k neighbors per row")
    table = columns.reshape(n, k).astype(np.int64)
    if group_ids is not None:
        groups = np.asarray(group_ids)
        table[groups[table] == groups[:, None]] = -1
    return table


def proximity_study(
    ours: tuple[np.ndarray, np.ndarray],
    baseline: tuple[np.ndarray, np.ndarray],
    doc_vectors: np.ndarray,
    k: int,
    n_pairs: int,
    seed: int,
    n_show: int,
    group_ids: np.ndarray | None = None,
) -> dict[str, Any]:
    """Fig. 5 of Thomas & Kovashka: how much closer our model keeps Doc2Vec-neighbor pairs than the baseline.

    ``ours`` / ``baseline`` are ``(image, text)`` test embeddings of the two models, row-aligned with
    ``doc_vectors``. Up to ``n_pairs`` unordered pairs are drawn (``seed``) from each item's ``k`` exact
    nearest test items in Doc2Vec space (Ω); for each modality the ratio d_ours(s1, s2) / d_baseline(s1, s2)
    of Euclidean distances between L2-normalised embeddings is computed for the *same* pairs (image-image
    with the image embeddings, text-text with the text embeddings; for ``[n, K, d]`` embeddings the
    smallest distance over the K x K pairs, see :func:`evaluation.proximity.proximity_ratios`). Returns the pairs, and per modality the
    ratios, their median, the share of pairs kept closer (ratio < 1) and the ``n_show`` pairs with the
    smallest ratios (``smallest``: ``[(position_a, position_b, ratio), ...]``).
    """
    n = len(doc_vectors)
    for name, (image, text) in (("ours", ours), ("baseline", baseline)):
        if len(image) != n or len(text) != n:
            raise ValueError(f"{name} embeddings must have one row per Doc2Vec vector ({n} test items)")
    table = doc2vec_neighbor_table(doc_vectors, min(k, n - 1), group_ids)
    pairs = sample_neighbor_pairs(table, n_pairs, seed)
    result: dict[str, Any] = {"k": int(table.shape[1]), "n_pairs": int(len(pairs)), "pairs": pairs}
    for index, modality in enumerate(("image", "text")):
        ratios = proximity_ratios(
            ours[index][pairs[:, 0]],
            ours[index][pairs[:, 1]],
            baseline[index][pairs[:, 0]],
            baseline[index][pairs[:, 1]],
        )
        finite = ratios[np.isfinite(ratios)]
        order = smallest_ratios_first(ratios)[:n_show]
        result[modality] = {
            "ratios": ratios,
            "n_finite": int(finite.size),
            "median_ratio": float(np.median(finite)) if finite.size else float("nan"),
            "share_closer": float(np.mean(finite < 1.0)) if finite.size else float("nan"),
            "smallest": [(int(pairs[p, 0]), int(pairs[p, 1]), float(ratios[p])) for p in order],
        }
    return result


def _top_k(query: np.ndarray, gallery: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = cross_modal_scores(query, gallery)
    # stable sort of negated scores: ties go to the lower gallery index, as in evaluation.neighborhoods
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


def retrieval_examples(
    ours: tuple[np.ndarray, np.ndarray],
    baseline: tuple[np.ndarray, np.ndarray],
    image_positions: np.ndarray,
    text_positions: np.ndarray,
    group_ids: np.ndarray,
    n_queries: int,
    k: int,
    seed: int,
) -> dict[str, list[dict[str, Any]]]:
    """Fig. 6 of Thomas & Kovashka: top-``k`` results of our model and of the baseline for sampled queries.

    Image queries are drawn from ``image_positions`` (the distinct test images) and searched among
    ``text_positions`` (the distinct test texts), and the reverse, ``n_queries`` each, uniformly without
    replacement with ``seed`` (the same queries for both models; uncurated). A result is correct when it
    shares the query's ``group_ids`` entry (its own pair). Returns ``{"i2t": [...], "t2i": [...]}``; each
    query is ``{"query": position, "ours": [(position, score, correct)], "baseline": [...]}``.
    """
    image_positions = np.asarray(image_positions)
    text_positions = np.asarray(text_positions)
    groups = np.asarray(group_ids)
    if n_queries < 1 or k < 1:
        raise ValueError(f"n_queries and k must be positive, got {n_queries} and {k}")
    rng = np.random.default_rng(seed)
    out: dict[str, list[dict[str, Any]]] = {}
    for direction, query_positions, gallery_positions, query_side in (
        ("i2t", image_positions, text_positions, 0),
        ("t2i", text_positions, image_positions, 1),
    ):
        chosen = np.sort(
            rng.choice(query_positions, size=min(n_queries, len(query_positions)), replace=False)
        )
        found = {}
        for name, (image, text) in (("ours", ours), ("baseline", baseline)):
            query, gallery = (image, text) if query_side == 0 else (text, image)
            order, scores = _top_k(query[chosen], gallery[gallery_positions], min(k, len(gallery_positions)))
            found[name] = (gallery_positions[order], scores)
        out[direction] = [
            {
                "query": int(query),
                **{
                    name: [
                        (int(position), float(score), bool(groups[position] == groups[query]))
                        for position, score in zip(found[name][0][q], found[name][1][q], strict=True)
                    ]
                    for name in found
                },
            }
            for q, query in enumerate(chosen)
        ]
    return out


def snippet(text: str, max_chars: int = 160) -> str:
    """``text`` on one line, cut at a word boundary to at most ``max_chars`` characters (with an ellipsis)."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    if len(flat) <= max_chars:
        return flat
    cut = flat[: max_chars - 1]
    if " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut + "…"


def write_thumbnails(
    image_cache: np.ndarray, cache_rows: np.ndarray, positions: Iterable[int], folder: Path, relative_to: Path
) -> dict[int, str]:
    """Write one PNG per needed image cache row; returns test position -> path relative to ``relative_to``.

    ``cache_rows[position]`` is the image cache row of a test position (the manifest's ``cache_row``);
    positions sharing an image share one file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[int, str] = {}
    for position in sorted(set(int(p) for p in positions)):
        row = int(cache_rows[position])
        target = folder / f"img_{row}.png"
        if not target.exists():
            pixels = np.ascontiguousarray(image_cache[row])
            if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
                raise ValueError(
                    f"image cache rows must be uint8 [S, S, 3], got {pixels.dtype} {pixels.shape}"
                )
            Image.fromarray(pixels).save(target, format="PNG")
        paths[position] = target.relative_to(relative_to).as_posix()
    return paths
