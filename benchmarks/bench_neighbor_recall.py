"""Recall of a pipeline neighbor table's Annoy search against exact search, by tree count and search_k, on the
vectors of a table a run built (a NeighborTables ``index.ann`` holds them): recall@k for the table's k and
recall@10 for the pool the training draws i' from, the query time, and what the whole table would take.

    python benchmarks/bench_neighbor_recall.py RUN_ROOT/NeighborTables/<id>/index.ann --json out.json
    python benchmarks/bench_neighbor_recall.py --quick INDEX   # k 20, 5 and 10 trees, 50 queries: a smoke test

Measured on the text table of a 100k-pair run (docs/scaling.md, "Neighbor tables at size"); it sets the paper
profile's ``neighbors.search_k``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from annoy import AnnoyIndex

from common.bounded_json import read_bounded
from pipeline.steps.neighbors import ANNOY_METRIC, build_annoy_index, exact_neighbors


def stored_vectors(path: Path) -> np.ndarray:
    """The unit-normalised vectors an Annoy file holds (its width read from the table's ``neighbors.json``)."""
    width = read_bounded(path.parent / "neighbors.json")["annoy"]["dim"]
    index = AnnoyIndex(width, ANNOY_METRIC)
    index.load(str(path))
    vectors = np.array([index.get_item_vector(i) for i in range(index.get_n_items())], dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _recall(found: list[list[int]], truth: np.ndarray, depth: int) -> float:
    """Mean share of each query's true first ``depth`` neighbors among its first ``depth`` found."""
    shares = [len(set(f[:depth]) & set(t[:depth].tolist())) / depth for f, t in zip(found, truth, strict=True)]
    return round(float(np.mean(shares)), 4)


def recall_grid(
    vectors: np.ndarray, k: int, trees: list[int], factors: list[int], n_queries: int, seed: int = 0
) -> list[dict]:
    """For each tree count and each multiple of Annoy's default search_k (trees * k): recall@k and @10."""
    n = len(vectors)
    queries = np.random.default_rng(seed).choice(n, min(n_queries, n), replace=False)
    truth = exact_neighbors(vectors, queries, k)
    rows = []
    for n_trees in trees:
        # built as the pipeline builds its tables (one thread); the build time includes adding the items
        started = time.perf_counter()
        index = build_annoy_index(vectors, n_trees, seed)
        build_s = time.perf_counter() - started
        for factor in factors:
            search_k = n_trees * k * factor
            started = time.perf_counter()
            found = [
                [j for j in index.get_nns_by_item(int(q), k + 1, search_k=search_k) if j != q][:k]
                for q in queries
            ]
            query_ms = (time.perf_counter() - started) / len(queries) * 1000
            rows.append(
                {
                    "items": n,
                    "n_trees": n_trees,
                    "search_k": search_k,
                    "build_s": round(build_s, 1),
                    "query_ms": round(query_ms, 2),
                    f"recall@{k}": _recall(found, truth, k),
                    "recall@10": _recall(found, truth, 10),
                    "table_minutes": round(query_ms * n / 60_000, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a NeighborTables index.ann (neighbors.json beside it)")
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--trees", default="50,100,200")
    parser.add_argument("--factors", default="1,4,16", help="multiples of Annoy's default search_k (trees * k)")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="k 20, trees 5,10, factors 1,4, 50 queries (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.k, args.trees, args.factors, args.queries = 20, "5,10", "1,4", 50
    rows = recall_grid(
        stored_vectors(args.index),
        args.k,
        [int(t) for t in args.trees.split(",")],
        [int(f) for f in args.factors.split(",")],
        args.queries,
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
