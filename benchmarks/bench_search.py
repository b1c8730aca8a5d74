"""Search speed of ``crossmodal``: query latency p50 / p99 for text and image queries at 10k and 1M gallery
items, exact search against Annoy in the same run (Annoy's recall@10 against exact), the size where Annoy
becomes faster, and the served API's requests per second for text queries. ``--backends`` measures every
backend (exact, faiss flat, Annoy, HNSW) on two galleries: what ``serving.neighbors.EXACT_SEARCH_MAX_VECTORS``
and the HNSW defaults are set from.

Galleries are synthetic: 256-d embeddings drawn as a mixture of clusters (one centre per 100 items, noise so a
centre's items sit at cosine ~0.6 around it), L2-normalised, like a trained model's topic structure; uniform
random vectors would have no neighborhoods to find and understate Annoy. Queries are new draws from the same
mixture. A query's latency is its embedding (the demo profile's model: GRU 256 for a text, EfficientNet-Lite0
at 96 px + projection for a 64 px photo; random weights, which do not change the cost) plus the search.

    python benchmarks/bench_search.py --quick                 # 2k and 10k items, 50 queries: seconds
    python benchmarks/bench_search.py --bundle B              # 10k and 1M, and the API's requests/s with B
    python benchmarks/bench_search.py --annoy-sweep           # Annoy's recall / latency by trees x search_k
    python benchmarks/bench_search.py --backends --sizes 100000,1000000 --json benchmarks/results/bench_backends.json
                                                              # every backend, two galleries (bench_backends.py)
    python benchmarks/bench_search.py --backends --quick      # the same at 2k and 10k items, seconds
"""

from __future__ import annotations

import os

# as `crossmodal` runs (serving/cli.py): one BLAS thread, set before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import platform
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.bounded_json import read_bounded  # noqa: E402
from common.tokenizer import TOKENIZER_VERSION  # noqa: E402
from models.backbones import build_trunk  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.registry import build_model  # noqa: E402
from serving.bundle import Bundle  # noqa: E402
from serving.embed import Embedder  # noqa: E402
from serving.neighbors import ANNOY_SEARCH_K, ANNOY_TREES, AnnoySearch, ExactSearch  # noqa: E402

WIDTH = 256
ITEMS_PER_CLUSTER = 100
#: per-dimension noise around a unit centre: cosine to the centre 1 / sqrt(1 + 256 * NOISE^2) = 0.6
NOISE = 0.083
TEXT = "Protesters gathered outside the state senate on Monday over the unemployment rate in Texas."


def unit_centres(n: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((max(1, n // ITEMS_PER_CLUSTER), WIDTH)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def clustered(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """``n`` unit vectors around random ``centres`` (float32 [n, 1, WIDTH])."""
    out = np.empty((n, WIDTH), dtype=np.float32)
    for start in range(0, n, 100_000):
        stop = min(n, start + 100_000)
        which = rng.integers(0, len(centres), stop - start)
        block = centres[which] + rng.standard_normal((stop - start, WIDTH), dtype=np.float32) * NOISE
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out[:, None, :]


def demo_sized_embedder() -> Embedder:
    """The demo profile's architecture through serving's Embedder (random weights: the cost is the same)."""
    torch.manual_seed(0)
    vocab = {f"w{i}": i + 2 for i in range(5000)} | {w.lower(): 9 for w in TEXT.replace(".", "").split()}
    config = ModelConfig(
        backbone="efficientnet_lite0",
        pretrained=False,
        embed_dim=WIDTH,
        word_dim=200,
        gru_hidden=256,
        vocab_size=len(vocab) + 2,
        trunk="frozen",
        feature_dim=1280,
    )
    model = build_model("vse", config, None).eval()
    trunk = build_trunk("efficientnet_lite0", False).eval()
    # the parts of an exported bundle's manifest that serving's Embedder reads (serving/bundle.py)
    manifest = {
        "image": {
            "backbone": "efficientnet_lite0",
            "trunk": "frozen",
            "cache_size": 64,
            "image_size": 96,
            "features": "pooled",
            "mean": trunk.mean,
            "std": trunk.std,
        },
        "text": {"max_tokens": 64, "tokenizer_version": TOKENIZER_VERSION},
        "embedding": {"width": WIDTH, "per_item": 1},
        "model": {"model": "vse"},  # the model record's name: whether it attends over the trunk's map
    }
    return Embedder(Bundle(path=Path("."), manifest=manifest, model=model, trunk=trunk, vocab=vocab))


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
    }


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def bench_size(n: int, n_queries: int, embedder: Embedder, work: Path) -> dict:
    """Exact and Annoy on one gallery, interleaved query by query so both see the same machine load: each
    query embeds a text and a photo once (timed) and searches with both backends (timed); a query's latency
    is its embedding plus its search."""
    rng = np.random.default_rng(n)
    centres = unit_centres(n, rng)
    gallery = clustered(n, rng, centres)
    queries = clustered(n_queries, rng, centres)
    photo = np.random.default_rng(1).integers(0, 255, (1, 64, 64, 3), dtype=np.uint8)
    exact = ExactSearch(gallery)
    build_s, annoy = timed(
        lambda: AnnoySearch.build(gallery, work / f"bench_{n}.ann", ANNOY_TREES, ANNOY_SEARCH_K)
    )
    # untimed: the first forward pass allocates and picks kernels, the first search pages the data in
    (
        embedder.embed_query_text(TEXT),
        embedder.embed_pixels(photo),
        exact.search(queries[0], 10),
        annoy.search(queries[0], 10),
    )
    times: dict[str, list[float]] = {name: [] for name in ("text", "image", "exact", "annoy")}
    recall = []
    for query in queries:
        times["text"].append(timed(lambda: embedder.embed_query_text(TEXT))[0])
        times["image"].append(timed(lambda: embedder.embed_pixels(photo))[0])
        exact_s, (exact_items, _) = timed(lambda q=query: exact.search(q, 10))
        annoy_s, (annoy_items, _) = timed(lambda q=query: annoy.search(q, 10))
        times["exact"].append(exact_s)
        times["annoy"].append(annoy_s)
        recall.append(len(set(exact_items) & set(annoy_items)) / 10)
    row: dict = {"items": n, "queries": n_queries, "annoy_build_s": round(build_s, 1)}
    row["annoy"] = {
        "n_trees": ANNOY_TREES,
        "search_k": ANNOY_SEARCH_K,
        "recall@10": round(float(np.mean(recall)), 4),
    }
    row["embed_text"], row["embed_image"] = percentiles(times["text"]), percentiles(times["image"])
    for backend in ("exact", "annoy"):
        search = np.asarray(times[backend])
        row[f"{backend}_search"] = percentiles(search)
        row[f"{backend}_text_query"] = percentiles(np.asarray(times["text"]) + search)
        row[f"{backend}_image_query"] = percentiles(np.asarray(times["image"]) + search)
    print(json.dumps(row), flush=True)
    return row


def exact_curve(sizes: list[int], n_queries: int) -> list[dict]:
    """Exact search alone at growing sizes: where it crosses Annoy's (flat) latency."""
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        centres = unit_centres(n, rng)
        exact, queries = ExactSearch(clustered(n, rng, centres)), clustered(n_queries, rng, centres)
        exact.search(queries[0], 10)
        rows.append(
            {"items": n, **percentiles([timed(lambda q=q, e=exact: e.search(q, 10))[0] for q in queries])}
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def api_requests_per_second(bundle: Path, seconds: float, clients: int, work: Path) -> dict:
    """``crossmodal serve`` on a 10k-item index of ``bundle``'s width, hit with text queries by ``clients``
    threads for ``seconds``."""
    import httpx

    from serving.bundle import load_bundle
    from serving.gallery import validated_batch
    from serving.index import GalleryIndex

    loaded = load_bundle(bundle)
    n, size = 10_000, int(loaded.image["cache_size"])
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 1, loaded.width)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
    import pandas as pd

    items = pd.DataFrame(
        {"item_id": [f"i{i}" for i in range(n)], "path": "", "text": None, "has_image": True}
    )
    index = GalleryIndex.create(work / "api_index", loaded)
    index.add(
        validated_batch(items, np.zeros((n, size, size, 3), np.uint8)),
        vectors,
        np.zeros((0, 1, loaded.width), np.float32),
        "bench",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "serving.cli", "serve", str(work / "api_index"), "--port", str(port)], env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                httpx.get(f"{base}/api/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        words = sorted(loaded.vocab)[:200]
        deadline = time.time() + seconds

        def client(i: int) -> int:
            done = 0
            with httpx.Client(timeout=30) as session:
                while time.time() < deadline:
                    query = " ".join(words[(done + i * 7 + j) % len(words)] for j in range(8))
                    session.get(f"{base}/api/search/text", params={"q": query, "k": 10}).raise_for_status()
                    done += 1
            return done

        started = time.time()
        with ThreadPoolExecutor(clients) as pool:
            total = sum(pool.map(client, range(clients)))
        elapsed = time.time() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "requests": total,
        "seconds": round(elapsed, 1),
        "clients": clients,
        "requests_per_s": round(total / elapsed, 1),
        "model": loaded.manifest["variant"]["label"],
        "width": loaded.width,
        "items": n,
    }


def annoy_sweep(n: int, work: Path, n_queries: int = 100) -> list[dict]:
    """Annoy's recall@10 and search latency at ``n`` items for a grid of trees x search_k: how the settings
    of serving.neighbors were chosen (the least search work reaching recall@10 >= 0.95)."""
    rng = np.random.default_rng(n)
    centres = unit_centres(n, rng)
    gallery, queries = clustered(n, rng, centres), clustered(n_queries, rng, centres)
    exact = ExactSearch(gallery)
    truth = [set(exact.search(query, 10)[0]) for query in queries]
    rows = []
    for n_trees in (16, 48):
        build_s, annoy = timed(lambda t=n_trees: AnnoySearch.build(gallery, work / f"sweep_{t}.ann", t, 0))
        for search_k in (40_000, 100_000, 200_000, 400_000):
            annoy.search_k = search_k
            annoy.search(queries[0], 10)
            times, recall = [], []
            for query, expected in zip(queries, truth, strict=True):
                seconds, (items, _) = timed(lambda q=query, a=annoy: a.search(q, 10))
                times.append(seconds)
                recall.append(len(set(items) & expected) / 10)
            row = {
                "n_trees": n_trees,
                "build_s": round(build_s, 1),
                "search_k": search_k,
                "recall@10": round(float(np.mean(recall)), 3),
                **percentiles(times),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def markdown(results: dict) -> str:
    """The results as the tables of benchmarks/results/bench_search.md and docs/serving.md."""
    lines = [
        f"Machine: {results['machine']}, torch threads {results['torch_threads']}, one BLAS thread (as "
        f"`crossmodal` runs). Latencies in ms over {results['sizes'][0]['queries']} queries; a query = its embedding + "
        "the search.",
        "",
        "| items | backend | recall@10 | search p50 / p99 | text query p50 / p99 | image query p50 / p99 | build |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["sizes"]:
        annoy = row["annoy"]
        for backend in ("exact", "annoy"):
            recall = "1 (exact)" if backend == "exact" else f"{annoy['recall@10']:.3f}"
            build = "—" if backend == "exact" else f"{row['annoy_build_s']} s ({annoy['n_trees']} trees)"
            cells = [
                f"{row[f'{backend}_{part}']['p50_ms']} / {row[f'{backend}_{part}']['p99_ms']}"
                for part in ("search", "text_query", "image_query")
            ]
            name = backend if backend == "exact" else f"annoy (search_k {annoy['search_k']:,})"
            lines.append(f"| {row['items']:,} | {name} | {recall} | {' | '.join(cells)} | {build} |")
    lines += [
        "",
        "Embedding alone (demo-sized model), p50 / p99 ms: "
        + "; ".join(
            f"{row['items']:,} items run: text {row['embed_text']['p50_ms']} / {row['embed_text']['p99_ms']}, "
            f"image {row['embed_image']['p50_ms']} / {row['embed_image']['p99_ms']}"
            for row in results["sizes"]
        ),
        "",
        "Exact search alone by gallery size (p50 / p99 ms): "
        + ", ".join(
            f"{row['items']:,}: {row['p50_ms']} / {row['p99_ms']}" for row in results["exact_search_by_size"]
        )
        + f". Crossover (exact within Annoy's p99): {results['crossover_items']} items.",
    ]
    if "api_text_queries" in results:
        api = results["api_text_queries"]
        lines += [
            "",
            f"API: {api['requests_per_s']} text queries/s ({api['requests']} in {api['seconds']} s, "
            f"{api['clients']} client threads on the same 2 cores, {api['items']:,} items, model "
            f"{api['model']} {api['width']}-d).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2k and 10k items, 50 queries (a smoke test)")
    parser.add_argument("--bundle", help="a bundle for the API's requests/s (skipped without one)")
    parser.add_argument("--api-seconds", type=float, default=20.0)
    parser.add_argument("--out", help="write the results as JSON here (and as Markdown beside it, .md)")
    parser.add_argument("--render", help="only print the Markdown tables of a results JSON")
    parser.add_argument("--annoy-sweep", action="store_true", help="only Annoy's trees x search_k grid at 1M")
    parser.add_argument(
        "--backends", action="store_true", help="every backend on two galleries per size (bench_backends.py)"
    )
    parser.add_argument("--sizes", help="--backends: gallery sizes, comma-separated (default 100000,1000000)")
    parser.add_argument("--queries", type=int, default=300, help="--backends: queries per gallery")
    parser.add_argument("--json", help="--backends: write the rows here (Markdown and PNG plots beside it)")
    parser.add_argument("--hnsw", help='--backends: HNSW builds and ef_search values, "M:efC:ef,ef;M:efC:ef"')
    parser.add_argument("--pq", help='--backends: PQ scan builds and re-rank sizes, "dims_per_code:rerank,rerank;..."')
    args = parser.parse_args(argv)
    if args.backends:
        from benchmarks.bench_backends import HNSW_GRID, PQ_GRID, run

        default_sizes = "2000,10000" if args.quick else "100000,1000000"
        sizes = [int(size) for size in (args.sizes or default_sizes).split(",")]
        with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
            out = Path(args.json) if args.json else None
            queries = 100 if args.quick else args.queries
            run(sizes, queries, out, Path(tmp), args.hnsw or HNSW_GRID, args.pq or PQ_GRID)
        return {}
    if args.render:
        print(markdown(read_bounded(Path(args.render))), end="")
        return {}
    if args.annoy_sweep:
        with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
            annoy_sweep(1_000_000, Path(tmp))
        return {}
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    embedder = demo_sized_embedder()
    results: dict = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch_threads": torch.get_num_threads(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        sizes = [2_000, 10_000] if args.quick else [10_000, 1_000_000]
        results["sizes"] = [bench_size(n, 50 if args.quick else 300, embedder, Path(tmp)) for n in sizes]
        curve = (
            [2_000, 10_000, 30_000] if args.quick else [10_000, 30_000, 100_000, 200_000, 300_000, 1_000_000]
        )
        results["exact_search_by_size"] = exact_curve(curve, 30 if args.quick else 100)
        annoy_p99 = results["sizes"][-1]["annoy_search"]["p99_ms"]
        faster = [row["items"] for row in results["exact_search_by_size"] if row["p99_ms"] <= annoy_p99]
        # the size up to which exact search answers within Annoy's p99 (at its recall-matched settings)
        largest = results["exact_search_by_size"][-1]["items"]
        results["crossover_items"] = (
            (max(faster) if faster else 0) if largest not in faster else f">= {largest}"
        )
        if args.bundle:
            results["api_text_queries"] = api_requests_per_second(
                Path(args.bundle), args.api_seconds, 8, Path(tmp)
            )
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        Path(args.out).with_suffix(".md").write_text(markdown(results))
    return results


if __name__ == "__main__":
    main()
