"""The search backends of serving/: Annoy, given enough of the forest to inspect, the HNSW graph and the PQ scan
with its exact re-rank find what exact search finds, with the same cosine scores, for one and for several
(PVSE) embeddings per item; real faiss and Annoy indexes, saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest

from serving.backends import choose_backend
from serving.compressed_search import PqScanSearch, sub_quantizers, training_rows
from serving.graph_search import HnswSearch
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS, AnnoySearch, ExactSearch


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
    scan = PqScanSearch.build(gallery, tmp_path / "g.pq", rerank=200)
    for query in queries:
        expected, scores = brute_force(gallery, query, 10)
        for backend in (exact, annoy, loaded, graph, scan):
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
        PqScanSearch.build(gallery, tmp_path / "g.pq", rerank=8),
    )
    for backend in backends:
        items, scores = backend.search(query, 5)
        assert items[0] == 5 and scores[0] == pytest.approx(1.0, abs=1e-5)
        items, _ = backend.search(query, 5, exclude=[5])
        assert 5 not in items.tolist() and len(items) == 5
        assert len(backend.search(query, 100, exclude=[5])[0]) == 29


def test_backend_by_size_or_as_asked():
    assert choose_backend(1000, exact_up_to=1000) == "exact"
    assert choose_backend(1001, exact_up_to=1000) == "pq"
    assert choose_backend(EXACT_SEARCH_MAX_VECTORS) == "exact"
    assert choose_backend(EXACT_SEARCH_MAX_VECTORS + 1) == "pq"
    assert choose_backend(5, exact_up_to=1000, backend="annoy") == "annoy"
    assert choose_backend(5, exact_up_to=1000, backend="hnsw") == "hnsw"
    assert choose_backend(10**9, backend="exact") == "exact"
    with pytest.raises(ValueError, match="choose one of auto, exact, annoy, hnsw, pq"):
        choose_backend(5, backend="faiss")


#: per backend: build to a path, load it back, and the settings index.json would record
SAVED = {
    "hnsw": (
        lambda gallery, path: HnswSearch.build(gallery, path, m=16, ef_construction=80, ef_search=64),
        lambda path, n, per_item, width: HnswSearch.load(path, n, per_item, width, ef_search=64),
        {"M": 16, "ef_construction": 80, "ef_search": 64},
    ),
    "pq": (
        lambda gallery, path: PqScanSearch.build(gallery, path, rerank=50),
        lambda path, n, per_item, width: PqScanSearch.load(path, n, per_item, width, rerank=50),
        {"sub_quantizers": 8, "bits": 4, "rerank": 50},
    ),
}


@pytest.mark.parametrize("backend", sorted(SAVED))
@pytest.mark.parametrize("per_item", [1, 3])
def test_saved_and_loaded_answers_as_built_and_builds_are_reproducible(tmp_path, backend, per_item):
    build, load, settings = SAVED[backend]
    gallery = clustered(2000, per_item, seed=5, width=32)
    built = build(gallery, tmp_path / "g")
    loaded = load(tmp_path / "g", 2000, per_item, 32)
    assert loaded.settings() == built.settings() == settings
    for query in clustered(20, per_item, seed=6, width=32):
        items, scores = built.search(query, 10)
        again, again_scores = loaded.search(query, 10)
        assert again.tolist() == items.tolist()
        np.testing.assert_array_equal(again_scores, scores)
    if backend == "pq":  # a seeded training sample and k-means: the same vectors give the same file
        build(gallery, tmp_path / "again")
        assert (tmp_path / "again").read_bytes() == (tmp_path / "g").read_bytes()
    with pytest.raises(ValueError, match="rebuild the index"):
        load(tmp_path / "g", 1999, per_item, 32)
    with pytest.raises(ValueError, match="rebuild the index"):
        load(tmp_path / "g", 2000, per_item, 48)


def test_pq_codes_per_vector_divide_the_width_and_training_rows_are_bounded():
    assert [sub_quantizers(width) for width in (256, 1024, 30, 7, 1)] == [64, 256, 6, 1, 1]
    assert sub_quantizers(256, dims_per_code=2) == 128
    rows = np.arange(70_000 * 2, dtype=np.float32).reshape(70_000, 2)
    sample = training_rows(rows)
    assert sample.shape == (65_536, 2) and np.array_equal(sample, training_rows(rows))
    assert len(np.unique(sample[:, 0])) == 65_536  # drawn without replacement
    assert training_rows(rows[:3]).shape == (624, 2)  # tiled up to what k-means needs
    assert training_rows(rows[:0]).shape == (624, 2)


@pytest.mark.parametrize("backend", ["hnsw", "pq"])
def test_pvse_items_ranked_through_an_approximate_backend_as_exact_ranks_them(tmp_path, backend):
    """K = 3 vectors per item, 10k items: an item's score is its best of the 3 x 3 pairs on both backends."""
    gallery = clustered(10_000, 3, seed=7, width=32)
    builders = {"hnsw": HnswSearch.build, "pq": PqScanSearch.build}
    exact, graph = ExactSearch(gallery), builders[backend](gallery, tmp_path / "g")
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


@pytest.mark.parametrize("backend", ["hnsw", "pq"])
def test_approximate_backends_widen_until_k_items_or_the_gallery_runs_out(tmp_path, backend):
    # K = 4 rows per item and a query equal to one item's rows: its rows come back first, then others
    gallery = clustered(50, 4, seed=9, width=16)
    graph = HnswSearch.build(gallery) if backend == "hnsw" else PqScanSearch.build(gallery, rerank=4)
    items, _ = graph.search(gallery[3], 49, exclude=[3])
    assert len(items) == 49 and 3 not in items.tolist()
    assert sorted(graph.search(gallery[3], 1000)[0].tolist()) == list(range(50))


@pytest.mark.parametrize("backend", ["exact", "hnsw", "pq"])
def test_empty_and_one_item_galleries(tmp_path, backend):
    query = clustered(1, 2, seed=10)[0]
    for n in (0, 1):
        gallery = clustered(1, 2, seed=11)[:n]
        if backend == "exact":
            search = ExactSearch(gallery)
        elif backend == "hnsw":
            HnswSearch.build(gallery, tmp_path / f"{n}.hnsw")
            search = HnswSearch.load(tmp_path / f"{n}.hnsw", n, 2, 16, ef_search=16)
        else:
            PqScanSearch.build(gallery, tmp_path / f"{n}.pq")
            search = PqScanSearch.load(tmp_path / f"{n}.pq", n, 2, 16, rerank=16)
        items, scores = search.search(query, 5)
        assert items.tolist() == list(range(n)) and len(scores) == n
        assert search.search(query, 5, exclude=[0])[0].tolist() == []


def test_a_query_of_another_width_is_one_clear_error(tmp_path):
    gallery = clustered(20, 1, seed=12, width=16)
    backends = (
        ExactSearch(gallery),
        AnnoySearch.build(gallery, tmp_path / "g.ann", 2, 100),
        HnswSearch.build(gallery, tmp_path / "g.hnsw"),
        PqScanSearch.build(gallery, tmp_path / "g.pq"),
    )
    for backend in backends:
        with pytest.raises(ValueError) as error:
            backend.search(np.ones((1, 24), dtype=np.float32), 5)
        assert str(error.value) == f"query width 24 != the {backend.name} index's width 16"
