"""The search backends of serving/: Annoy, given enough of the forest to inspect, and the HNSW graph find what
exact search finds, with the same cosine scores, for one and for several (PVSE) embeddings per item; real faiss
and Annoy indexes, saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest

from serving.graph_search import HnswSearch
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS, AnnoySearch, ExactSearch, choose_backend


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
    graph = HnswSearch.build(gallery, tmp_path / "g.hnsw")
    for query in queries:
        expected, scores = brute_force(gallery, query, 10)
        for backend in (exact, annoy, loaded, graph):
            items, found_scores = backend.search(query, 10)
            assert items.tolist() == expected, backend.name
            np.testing.assert_allclose(found_scores, scores, atol=1e-5)


def test_excluded_items_are_left_out_and_k_is_capped(tmp_path):
    gallery = clustered(30, 1, seed=3)
    query = gallery[5]
    backends = (
        ExactSearch(gallery),
        AnnoySearch.build(gallery, tmp_path / "g.ann", 4, 10_000),
        HnswSearch.build(gallery, tmp_path / "g.hnsw"),
    )
    for backend in backends:
        items, scores = backend.search(query, 5)
        assert items[0] == 5 and scores[0] == pytest.approx(1.0, abs=1e-5)
        items, _ = backend.search(query, 5, exclude=[5])
        assert 5 not in items.tolist() and len(items) == 5
        assert len(backend.search(query, 100, exclude=[5])[0]) == 29


def test_backend_by_size_or_as_asked():
    assert choose_backend(1000, exact_up_to=1000) == "exact"
    assert choose_backend(1001, exact_up_to=1000) == "hnsw"
    assert choose_backend(EXACT_SEARCH_MAX_VECTORS) == "exact"
    assert choose_backend(EXACT_SEARCH_MAX_VECTORS + 1) == "hnsw"
    assert choose_backend(5, exact_up_to=1000, backend="annoy") == "annoy"
    assert choose_backend(10**9, backend="exact") == "exact"
    with pytest.raises(ValueError, match="choose one of auto, exact, annoy, hnsw"):
        choose_backend(5, backend="faiss")


@pytest.mark.parametrize("per_item", [1, 3])
def test_hnsw_saved_and_loaded_answers_as_built(tmp_path, per_item):
    gallery = clustered(2000, per_item, seed=5, width=32)
    built = HnswSearch.build(gallery, tmp_path / "g.hnsw", m=16, ef_construction=80, ef_search=64)
    loaded = HnswSearch.load(tmp_path / "g.hnsw", 2000, per_item, 32, ef_search=64)
    assert loaded.settings() == built.settings() == {"M": 16, "ef_construction": 80, "ef_search": 64}
    for query in clustered(20, per_item, seed=6, width=32):
        items, scores = built.search(query, 10)
        again, again_scores = loaded.search(query, 10)
        assert again.tolist() == items.tolist()
        np.testing.assert_array_equal(again_scores, scores)
    with pytest.raises(ValueError, match="rebuild the index"):
        HnswSearch.load(tmp_path / "g.hnsw", 1999, per_item, 32, ef_search=64)


def test_pvse_items_ranked_through_hnsw_as_exact_ranks_them(tmp_path):
    """K = 3 vectors per item, 10k items: an item's score is its best of the 3 x 3 pairs on both backends."""
    gallery = clustered(10_000, 3, seed=7, width=32)
    exact, graph = ExactSearch(gallery), HnswSearch.build(gallery, tmp_path / "g.hnsw")
    recall = []
    for query in clustered(50, 3, seed=8, width=32):
        expected, expected_scores = exact.search(query, 10)
        items, scores = graph.search(query, 10)
        assert len(set(items.tolist())) == 10  # ten distinct items, not ten rows
        assert np.all(np.diff(scores) <= 1e-6)
        found = dict(zip(items.tolist(), scores.tolist(), strict=True))
        for item in set(found) & set(expected.tolist()):  # the same best-pair score
            assert found[item] == pytest.approx(
                float(expected_scores[expected.tolist().index(item)]), abs=1e-5
            )
        recall.append(len(set(items.tolist()) & set(expected.tolist())) / 10)
    assert np.mean(recall) >= 0.99


def test_hnsw_widens_until_k_items_or_the_gallery_runs_out(tmp_path):
    # K = 4 rows per item and a query equal to one item's rows: its rows come back first, then others
    gallery = clustered(50, 4, seed=9, width=16)
    graph = HnswSearch.build(gallery, tmp_path / "g.hnsw")
    items, _ = graph.search(gallery[3], 49, exclude=[3])
    assert len(items) == 49 and 3 not in items.tolist()
    assert sorted(graph.search(gallery[3], 1000)[0].tolist()) == list(range(50))


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_empty_and_one_item_galleries(tmp_path, backend):
    query = clustered(1, 2, seed=10)[0]
    for n in (0, 1):
        gallery = clustered(1, 2, seed=11)[:n]
        if backend == "exact":
            search = ExactSearch(gallery)
        else:
            HnswSearch.build(gallery, tmp_path / f"{n}.hnsw")
            search = HnswSearch.load(tmp_path / f"{n}.hnsw", n, 2, 16, ef_search=16)
        items, scores = search.search(query, 5)
        assert items.tolist() == list(range(n)) and len(scores) == n
        assert search.search(query, 5, exclude=[0])[0].tolist() == []


def test_a_query_of_another_width_is_one_clear_error(tmp_path):
    gallery = clustered(20, 1, seed=12, width=16)
    backends = (
        ExactSearch(gallery),
        AnnoySearch.build(gallery, tmp_path / "g.ann", 2, 100),
        HnswSearch.build(gallery, tmp_path / "g.hnsw"),
    )
    for backend in backends:
        with pytest.raises(ValueError) as error:
            backend.search(np.ones((1, 24), dtype=np.float32), 5)
        assert str(error.value) == f"query width 24 != the {backend.name} index's width 16"
