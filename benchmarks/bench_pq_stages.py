"""Where the PQ backend's query time goes at 1M items, and whether a smaller code or a cheaper re-rank buys
the issue-26 target (p99 at most 1/20 of exact's). One gallery of ``bench_backends.py`` per run; every variant
answers the same queries, interleaved query by query, one thread, after a warm-up:

* ``exact``: numpy, as ``ExactSearch`` does (the reference);
* ``scan 64x4, k=R``: the backend's 4-bit fast scan alone, no re-rank (its recall is the codes' own);
* ``pq 64x4, rerank R``: the backend as shipped (faiss ``IndexRefineFlat``);
* ``pq 64x4, numpy rerank R``: the same scan, the re-rank as one ``np.take`` + matrix-vector product;
* ``pq 32x4, rerank R``: 16-byte codes (half the bytes scanned; the table fits this machine's L3 cache);
* ``cascade 32x4 > 64x8 > exact``: the 16-byte scan keeps R1 rows, 8-bit PQ codes re-score them to R2,
  exact re-ranks those.

    python benchmarks/bench_pq_stages.py --gallery overlapping --items 1000000 --json out.json
    python benchmarks/bench_pq_stages.py --quick     # 2,000 items, 20 queries: seconds, a smoke test

At ``--quick``'s size the larger re-rank depths exceed the gallery (every item is re-ranked): the rows prove the
variants run, not the 1M figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_backends import WARMUP, WIDTH, interleaved, synthetic  # noqa: E402
from common.bounded_json import read_bounded  # noqa: E402
from serving.compressed_search import training_rows  # noqa: E402
from serving.faiss_search import every_core  # noqa: E402
from serving.neighbors import ExactSearch  # noqa: E402

Searcher = Callable[[np.ndarray], np.ndarray]


def _fast_scan(train: np.ndarray, codes: int) -> faiss.IndexPQFastScan:
    index = faiss.IndexPQFastScan(WIDTH, codes, 4, faiss.METRIC_INNER_PRODUCT)
    index.train(train)
    return index


def variants(flat: np.ndarray) -> dict[str, Searcher]:
    """Every variant's ``query [1, D] -> top-10 rows``, built on every core."""
    train = training_rows(flat)
    refine = faiss.IndexRefineSearchParameters
    with every_core():
        scan64 = faiss.IndexRefineFlat(_fast_scan(train, 64))
        scan64.add(flat)
        scan32 = faiss.IndexRefineFlat(_fast_scan(train, 32))
        scan32.add(flat)
        pq8 = faiss.IndexPQ(WIDTH, 64, 8, faiss.METRIC_INNER_PRODUCT)
        pq8.train(train)
        cascade = faiss.IndexRefineFlat(faiss.IndexRefine(_fast_scan(train, 32), pq8))
        cascade.add(flat)
    codes64 = faiss.downcast_index(scan64.base_index)

    def scan_only(k: int) -> Searcher:
        return lambda query: codes64.search(query, k)[1][0][:10]

    def refined(index: faiss.Index, rerank: int) -> Searcher:
        return lambda query: index.search(query, 10, params=refine(k_factor=rerank / 10))[1][0]

    def numpy_rerank(rerank: int) -> Searcher:
        def search(query: np.ndarray) -> np.ndarray:
            rows = np.sort(codes64.search(query, rerank)[1][0])
            scores = np.take(flat, rows[rows >= 0], axis=0) @ query[0]
            top = np.argpartition(-scores, 10)[:10]
            return rows[rows >= 0][top[np.argsort(-scores[top], kind="stable")]]

        return search

    def cascaded(first: int, second: int) -> Searcher:
        params = refine(k_factor=second / 10, base_index_params=refine(k_factor=first / second))
        return lambda query: cascade.search(query, 10, params=params)[1][0]

    exact = ExactSearch(flat[:, None, :])
    return {
        "exact": lambda query: exact.search(query, 10)[0],
        "scan 64x4, k=10": scan_only(10),
        "scan 64x4, k=6000": scan_only(6000),
        "pq 64x4, rerank 3000": refined(scan64, 3000),
        "pq 64x4, rerank 6000": refined(scan64, 6000),
        "pq 64x4, numpy rerank 3000": numpy_rerank(3000),
        "pq 64x4, numpy rerank 6000": numpy_rerank(6000),
        "scan 32x4, k=10": lambda query: scan32.base_index.search(query, 10)[1][0],
        "pq 32x4, rerank 12000": refined(scan32, 12000),
        "pq 32x4, rerank 24000": refined(scan32, 24000),
        "cascade 32x4 > 64x8 > exact, 10000 > 500": cascaded(10_000, 500),
        "cascade 32x4 > 64x8 > exact, 40000 > 1000": cascaded(40_000, 1000),
    }


def run(gallery_kind: str, items: int, n_queries: int) -> list[dict]:
    gallery, queries = synthetic(gallery_kind, items, n_queries + WARMUP, seed=items + len(gallery_kind))
    flat = np.ascontiguousarray(gallery[:, 0, :])
    del gallery
    print(f"{gallery_kind} {items:,} items: building", flush=True)
    searchers = variants(flat)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    truth = [set(searchers["exact"](query).tolist()) for query in queries[WARMUP:]]
    times, recall = interleaved(list(searchers.values()), queries, truth)
    faiss.omp_set_num_threads(threads)
    exact_p99 = float(np.percentile(times[list(searchers).index("exact")], 99))
    rows = []
    for slot, name in enumerate(searchers):
        p99 = float(np.percentile(times[slot], 99))
        rows.append(
            {
                "gallery": gallery_kind,
                "items": items,
                "variant": name,
                "recall@10": round(float(np.mean(recall[slot])), 4),
                "search_p50_ms": round(float(np.percentile(times[slot], 50)), 3),
                "search_p99_ms": round(p99, 3),
                "exact_p99_over_p99": round(exact_p99 / p99, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gallery", choices=("clustered", "overlapping"), default="overlapping")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", type=Path, help="append this run's rows to a JSON list at this path")
    parser.add_argument("--quick", action="store_true", help="2,000 items and 20 queries (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.items, args.queries = 2_000, 20
    rows = run(args.gallery, args.items, args.queries)
    if args.json:
        previous = read_bounded(args.json) if args.json.exists() else []
        args.json.write_text(json.dumps(previous + rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
