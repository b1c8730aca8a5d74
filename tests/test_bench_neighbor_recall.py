"""benchmarks/bench_neighbor_recall.py on a small table: recall is measured against exact search (a search_k
that visits every item finds every true neighbor; Annoy's default on clustered data finds fewer)."""

from __future__ import annotations

import json

import numpy as np
from annoy import AnnoyIndex

from benchmarks.bench_neighbor_recall import recall_grid, stored_vectors


def test_recall_is_against_exact_search_and_reaches_one_when_every_item_is_visited():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((600, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = recall_grid(vectors, k=20, trees=[2], factors=[1, 100], n_queries=50)
    assert [row["search_k"] for row in rows] == [40, 4000]
    assert rows[1]["recall@20"] == 1.0 and rows[1]["recall@10"] == 1.0
    assert rows[0]["recall@20"] < 1.0  # two trees and Annoy's default search_k miss some on random 16-d data


def test_the_vectors_are_read_back_from_a_table_s_annoy_file(tmp_path):
    vectors = np.random.default_rng(1).standard_normal((30, 8)).astype(np.float32)
    index = AnnoyIndex(8, "angular")
    for row, vector in enumerate(vectors):
        index.add_item(row, vector)
    index.build(2)
    index.save(str(tmp_path / "index.ann"))
    (tmp_path / "neighbors.json").write_text(json.dumps({"annoy": {"dim": 8}}))
    expected = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(stored_vectors(tmp_path / "index.ann"), expected, rtol=1e-6)
