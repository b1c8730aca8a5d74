"""``bench_search.py --backends``: every search backend of serving/ (and faiss's flat index as a faster exact
reference) on two synthetic galleries at each size, in one process: recall@10 against exact search of the same
vectors in the same run, search latency p50 / p99 (one query at a time, one thread, after a warm-up; no query
embedding), build seconds and bytes per vector of the saved index. The rows ``auto`` would use are marked
``default``; a recall-against-p99 plot per gallery is written next to the JSON.

Galleries (256-d unit vectors; queries are new draws from the same mixture):

* ``clustered``: one centre per 100 items, items at cosine ~0.6 to their centre (bench_search.py's gallery):
  a query's top 10 are nearly always items of its own cluster.
* ``overlapping``: one centre per 1,000 items at cosine ~0.35 to it: cluster-mates sit at cosine ~0.12 to a
  query, about two standard deviations of random 256-d pairs, so the true top 10 mix the query's cluster
  with items of other clusters — the hard case for a graph or a coarse quantiser.

Backends run interleaved query by query so all see the same load of this shared machine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from serving.backends import choose_backend
from serving.compressed_search import PQ_DIMS_PER_CODE, PQ_RERANK, PqScanSearch, sub_quantizers
from serving.graph_search import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_M, HnswSearch
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS, AnnoySearch, ExactSearch

WIDTH = 256
#: (items per centre, cosine of an item to its centre)
GALLERIES = {"clustered": (100, 0.6), "overlapping": (1000, 0.35)}
ANNOY_GRID = {"n_trees": 48, "search_k": (40_000, 100_000, 400_000)}
#: HNSW builds (M, ef_construction) and the ef_search values tried on each (one build: at 1M a faiss graph
#: takes many minutes on 2 cores; the 10k-100k sweep in bench_backends_sweep.json tried M 32 and more ef)
HNSW_GRID = f"{HNSW_M}:{HNSW_EF_CONSTRUCTION}:{HNSW_EF_SEARCH},1024,2048"
#: PQ scan builds (dimensions per 4-bit code) and the rows re-ranked exactly on each; the default is one of
#: them (2 dimensions per code: twice the bytes scanned, far fewer rows to re-rank)
PQ_GRID = f"{PQ_DIMS_PER_CODE}:3000,{PQ_RERANK},12000;2:1000"
WARMUP = 5


def synthetic(kind: str, n: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gallery ``[n, 1, WIDTH]`` and queries ``[n_queries, 1, WIDTH]`` of one ``GALLERIES`` mixture."""
    per_centre, cosine = GALLERIES[kind]
    # unit centre + N(0, s^2) per dimension has cosine 1 / sqrt(1 + WIDTH s^2) to its centre
    noise = np.sqrt((1 / cosine**2 - 1) / WIDTH)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // per_centre), WIDTH)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(count: int) -> np.ndarray:
        out = np.empty((count, WIDTH), dtype=np.float32)
        for start in range(0, count, 100_000):  # blocks: a 1M draw in float64 would take 2 GB at once
            size = min(count, start + 100_000) - start
            block = centres[rng.integers(0, len(centres), size)] + noise * rng.standard_normal(
                (size, WIDTH), dtype=np.float32
            )
            out[start : start + size] = block / np.linalg.norm(block, axis=1, keepdims=True)
        return out[:, None, :]

    return draw(n), draw(n_queries)


class FaissFlat:
    """Exact inner product with faiss's ``IndexFlatIP`` (benchmark only: the reference exact search)."""

    name = "exact-faiss"

    def __init__(self, vectors: np.ndarray, path: Path) -> None:
        self.index = faiss.IndexFlatIP(vectors.shape[2])
        self.index.add(np.ascontiguousarray(vectors[:, 0, :]))
        faiss.write_index(self.index, str(path))

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = self.index.search(query, k)
        return rows[0], scores[0]


def _timed(build: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = build()
    return time.perf_counter() - started, result


def interleaved(
    searches: Sequence[Callable[[np.ndarray], np.ndarray]], queries: np.ndarray, truth: Sequence[set[int]]
) -> tuple[list[list[float]], list[list[float]]]:
    """Every ``search(query) -> top-10 rows`` on every query, interleaved query by query so all see the same
    load of this shared machine; the first ``WARMUP`` queries untimed (they page the index in and warm the
    caches). Per search: milliseconds and recall@10 against ``truth`` (one set per timed query)."""
    times: list[list[float]] = [[] for _ in searches]
    recall: list[list[float]] = [[] for _ in searches]
    for position, query in enumerate(queries):
        for slot, search in enumerate(searches):
            seconds, found = _timed(lambda s=search, q=query: s(q))
            if position >= WARMUP:
                times[slot].append(seconds * 1000)
                recall[slot].append(len(set(np.asarray(found).tolist()) & truth[position - WARMUP]) / 10)
    return times, recall


def parse_grid(grid: str) -> list[tuple[list[int], list[int]]]:
    """``"a:b:x,y;..."`` as ([a, b], [x, y]) per build: the build's settings, then the search settings tried
    on it (HNSW: ``M:ef_construction:ef_search,...``; PQ: ``dims_per_code:rerank,...``)."""
    builds = []
    for build in grid.split(";"):
        *fixed, searched = build.split(":")
        builds.append(([int(value) for value in fixed], [int(value) for value in searched.split(",")]))
    return builds


def _candidates(gallery: np.ndarray, work: Path, hnsw_grid: str, pq_grid: str) -> list[dict[str, Any]]:
    """Every (backend, settings) with its search function, build seconds and index file."""
    out: list[dict[str, Any]] = []
    n = len(gallery)
    exact_file = work / "vectors.npy"
    np.save(exact_file, gallery)
    exact = ExactSearch(gallery)
    out.append(
        {"backend": "exact", "settings": {}, "search": exact.search, "build_s": 0.0, "file": exact_file}
    )
    build_s, flat = _timed(lambda: FaissFlat(gallery, work / "flat.faiss"))
    out.append(
        {
            "backend": "exact-faiss",
            "settings": {},
            "search": flat.search,
            "build_s": build_s,
            "file": work / "flat.faiss",
        }
    )
    trees = ANNOY_GRID["n_trees"]
    build_s, annoy = _timed(lambda: AnnoySearch.build(gallery, work / "g.ann", trees, 0))
    for search_k in ANNOY_GRID["search_k"]:
        searcher = AnnoySearch(annoy.index, n, 1, search_k)
        out.append(
            {
                "backend": "annoy",
                "settings": {"n_trees": trees, "search_k": search_k},
                "search": searcher.search,
                "build_s": build_s,
                "file": work / "g.ann",
            }
        )
    for (m, ef_construction), ef_values in parse_grid(hnsw_grid):
        path = work / f"g_{m}_{ef_construction}.hnsw"
        build_s, graph = _timed(lambda m=m, c=ef_construction, p=path: HnswSearch.build(gallery, p, m, c))
        print(f"  hnsw M {m} ef_construction {ef_construction}: built in {build_s:.1f} s", flush=True)
        for ef_search in ef_values:
            searcher = HnswSearch(graph.index, n, 1, ef_search)
            out.append(
                {
                    "backend": "hnsw",
                    "settings": {"M": m, "ef_construction": ef_construction, "ef_search": ef_search},
                    "search": searcher.search,
                    "build_s": build_s,
                    "file": path,
                }
            )
    for (dims_per_code,), rerank_values in parse_grid(pq_grid):
        path = work / f"g_{dims_per_code}.pq"
        build_s, scan = _timed(lambda d=dims_per_code, p=path: PqScanSearch.build(gallery, p, dims_per_code=d))
        print(f"  pq {dims_per_code} dimensions per code: built in {build_s:.1f} s", flush=True)
        for rerank in rerank_values:
            searcher = PqScanSearch(scan.index, n, 1, rerank)
            out.append(
                {
                    "backend": "pq",
                    "settings": searcher.settings(),
                    "search": searcher.search,
                    "build_s": build_s,
                    "file": path,
                }
            )
    return out


def is_default(backend: str, settings: dict[str, Any], n: int) -> bool:
    """Whether ``crossmodal index --backend auto`` would search ``n`` vectors with this row."""
    chosen = choose_backend(n, EXACT_SEARCH_MAX_VECTORS)
    if chosen == "exact":
        return backend == "exact"
    defaults = {
        "hnsw": {"M": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH},
        "pq": {"sub_quantizers": sub_quantizers(WIDTH), "bits": 4, "rerank": PQ_RERANK},
    }
    return backend == chosen and settings == defaults[chosen]


def bench_gallery(
    kind: str, n: int, n_queries: int, work: Path, hnsw_grid: str, pq_grid: str
) -> list[dict[str, Any]]:
    gallery, queries = synthetic(kind, n, n_queries + WARMUP, seed=n + len(kind))
    print(f"{kind} {n:,} items: building", flush=True)
    candidates = _candidates(gallery, work, hnsw_grid, pq_grid)
    faiss.omp_set_num_threads(1)  # searching: one query at a time on one thread (builds used every core)
    truth = [set(ExactSearch(gallery).search(q, 10)[0].tolist()) for q in queries[WARMUP:]]
    searches = [lambda q, c=candidate: c["search"](q, 10)[0] for candidate in candidates]
    times, recall = interleaved(searches, queries, truth)
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    rows = []
    for slot, candidate in enumerate(candidates):
        row = {
            "gallery": kind,
            "items": n,
            "backend": candidate["backend"],
            "settings": candidate["settings"],
            "default": is_default(candidate["backend"], candidate["settings"], n),
            "recall@10": round(float(np.mean(recall[slot])), 4),
            "search_p50_ms": round(float(np.percentile(times[slot], 50)), 3),
            "search_p99_ms": round(float(np.percentile(times[slot], 99)), 3),
            "build_s": round(candidate["build_s"], 2),
            "bytes_per_vector": round(candidate["file"].stat().st_size / n, 1),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    for path in {candidate["file"] for candidate in candidates}:
        path.unlink()
    return rows


def plot(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Recall@10 against search p99 per gallery, one PNG each beside ``out`` (``<stem>_<gallery>.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for kind in GALLERIES:
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for (backend, n), marker in zip(
            sorted({(r["backend"], r["items"]) for r in rows if r["gallery"] == kind}),
            "osD^v<>ph*Xd+x",
            strict=False,
        ):
            points = [r for r in rows if r["gallery"] == kind and r["backend"] == backend and r["items"] == n]
            axes.plot(
                [r["search_p99_ms"] for r in points],
                [r["recall@10"] for r in points],
                marker=marker,
                linestyle="-" if len(points) > 1 else "none",
                label=f"{backend}, {n:,} items",
            )
            for r in points:
                if r["default"]:
                    axes.annotate("default", (r["search_p99_ms"], r["recall@10"]), fontsize=8)
        axes.set(xscale="log", xlabel="search p99 (ms, one query, one thread)", ylabel="recall@10 vs exact")
        axes.set_title(f"{kind} gallery")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
        figure.tight_layout()
        path = out.with_name(f"{out.stem}_{kind}.png")
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table per gallery, as benchmarks/results/bench_backends.md and docs/serving.md show them."""
    lines = []
    for kind in GALLERIES:
        lines += [
            f"**{kind}**",
            "",
            "| items | backend | settings | recall@10 | search p50 / p99 ms | build s | bytes/vector | default |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r["gallery"] == kind):
            settings = ", ".join(f"{k} {v:,}" for k, v in r["settings"].items()) or "—"
            lines.append(
                f"| {r['items']:,} | {r['backend']} | {settings} | {r['recall@10']:.3f} | {r['search_p50_ms']} / "
                f"{r['search_p99_ms']} | {r['build_s']} | {r['bytes_per_vector']:,.0f} | {'yes' if r['default'] else ''} |"
            )
        lines.append("")
    return "\n".join(lines)


def run(
    sizes: list[int],
    n_queries: int,
    out: Path | None,
    work: Path,
    hnsw_grid: str = HNSW_GRID,
    pq_grid: str = PQ_GRID,
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "queries": n_queries,
        "exact_search_max_vectors": EXACT_SEARCH_MAX_VECTORS,
        "hnsw_grid": hnsw_grid,
        "pq_grid": pq_grid,
        "backends": [
            row
            for n in sizes
            for kind in GALLERIES
            for row in bench_gallery(kind, n, n_queries, work, hnsw_grid, pq_grid)
        ],
    }
    print(markdown(results["backends"]))
    if out is not None:
        out.write_text(json.dumps(results, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(results["backends"]))
        for path in plot(results["backends"], out):
            print(f"wrote {path}")
    return results
