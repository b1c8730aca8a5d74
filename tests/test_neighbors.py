"""The two search backends of serving/: Annoy, given enough of the forest to inspect, finds what exact search
finds, with the same cosine scores, for one and for several (PVSE) embeddings per item."""

from __future__ import annotations

import numpy as np
import pytest

from serving.neighbors import AnnoySearch, ExactSearch, choose_backend


def clustered(n: int, per_item: int, seed: int, width: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 20), width))
    vectors = centres[rng.integers(0, len(centres), n * per_item)] + 0.3 * rng.standard_normal(
        (n * per_item, width)
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.reshape(n, per_item, width).astype(np.float32)


def brute_force(gallery: np.ndarray, query: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
    """Best pair score per item, by a loop: what both backends must reproduce."""
    scores = np.array([max(float(q @ v) for q in query for v in item) for item in gallery])
    top = np.argsort(-scores, kind="stable")[:k]
    return top.tolist(), scores[top]


@pytest.mark.parametrize("per_item", [1, 2])
def test_exact_and_annoy_find_the_brute_force_top_k(tmp_path, per_item):
    gallery = clustered(400, per_item, seed=per_item)
    queries = clustered(12, per_item, seed=99)
    exact = ExactSearch(gallery)
    annoy = AnnoySearch.build(gallery, tmp_path / "g.ann", n_trees=8, search_k=len(gallery) * per_item * 8)
    loaded = AnnoySearch.load(tmp_path / "g.ann", len(gallery), per_item, gallery.shape[2], annoy.search_k)
    for query in queries:
        expected, scores = brute_force(gallery, query, 10)
        for backend in (exact, annoy, loaded):
            items, found_scores = backend.search(query, 10)
            assert items.tolist() == expected, backend.name
            np.testing.assert_allclose(found_scores, scores, atol=1e-5)


def test_excluded_items_are_left_out_and_k_is_capped(tmp_path):
    gallery = clustered(30, 1, seed=3)
    query = gallery[5]
    for backend in (ExactSearch(gallery), AnnoySearch.build(gallery, tmp_path / "g.ann", 4, 10_000)):
        items, scores = backend.search(query, 5)
        assert items[0] == 5 and scores[0] == pytest.approx(1.0, abs=1e-5)
        items, _ = backend.search(query, 5, exclude=[5])
        assert 5 not in items.tolist() and len(items) == 5
        assert len(backend.search(query, 100, exclude=[5])[0]) == 29


def test_backend_by_size():
    assert choose_backend(1000, exact_up_to=1000) == "exact"
    assert choose_backend(1001, exact_up_to=1000) == "annoy"
