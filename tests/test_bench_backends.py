"""benchmarks/bench_backends.py at toy size: the JSON rows the issue specifies, recall measured against exact
search of the same vectors, the row ``auto`` uses marked, and the plots written."""

from __future__ import annotations

import json

from benchmarks.bench_backends import PQ_GRID, is_default, parse_grid, run, synthetic
from serving.compressed_search import PQ_RERANK
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS

KEYS = {
    "gallery",
    "items",
    "backend",
    "settings",
    "default",
    "recall@10",
    "search_p50_ms",
    "search_p99_ms",
    "build_s",
    "bytes_per_vector",
}


def test_grids_parse_into_build_and_search_settings():
    assert parse_grid("16:100:256,1024;32:64:128") == [([16, 100], [256, 1024]), ([32, 64], [128])]
    assert parse_grid(PQ_GRID)[0][1].count(PQ_RERANK) == 1  # the default re-rank is one of the rows measured


def test_the_default_row_follows_the_crossover():
    settings = {"sub_quantizers": 64, "bits": 4, "rerank": PQ_RERANK}
    assert is_default("exact", {}, EXACT_SEARCH_MAX_VECTORS)
    assert not is_default("pq", settings, EXACT_SEARCH_MAX_VECTORS)
    assert is_default("pq", settings, EXACT_SEARCH_MAX_VECTORS + 1)
    assert not is_default("pq", {**settings, "rerank": 1}, EXACT_SEARCH_MAX_VECTORS + 1)
    assert not is_default("hnsw", {"M": 16, "ef_construction": 100, "ef_search": 256}, 10**6)


def test_galleries_are_unit_vectors():
    gallery, queries = synthetic("overlapping", 2000, 7, seed=1)
    assert gallery.shape == (2000, 1, 256) and queries.shape == (7, 1, 256)
    norms = (gallery[:, 0] ** 2).sum(axis=1)
    assert abs(norms - 1).max() < 1e-5


def test_a_toy_run_writes_the_rows_tables_and_plots(tmp_path):
    out = tmp_path / "backends.json"
    work = tmp_path / "work"
    work.mkdir()
    run([500], 12, out, work, hnsw_grid="16:40:32,64", pq_grid="4:50,200")
    rows = json.loads(out.read_text())["backends"]
    assert {row["gallery"] for row in rows} == {"clustered", "overlapping"}
    for row in rows:
        assert set(row) == KEYS and row["items"] == 500 and 0 <= row["recall@10"] <= 1
        assert row["bytes_per_vector"] > 0 and row["search_p99_ms"] >= row["search_p50_ms"] > 0
    exact = [row for row in rows if row["backend"] == "exact"]
    assert all(row["recall@10"] == 1.0 and row["default"] for row in exact)  # 500 vectors: below the crossover
    assert sum(row["default"] for row in rows) == 2
    assert {row["backend"] for row in rows} == {"exact", "exact-faiss", "annoy", "hnsw", "pq"}
    assert out.with_suffix(".md").read_text().count("| 500 | pq |") == 4
    assert (tmp_path / "backends_clustered.png").stat().st_size > 0
    assert not list(work.iterdir())  # index files removed after each gallery
