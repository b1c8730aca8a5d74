"""Benchmark near-duplicate removal (pipeline.steps.dedup) against a naive datasketch loop and exact Jaccard.

For 10k and 100k synthetic short documents with planted near-duplicates it times
  * batched: ``minhash_signatures`` + ``DedupIndex.add_and_find`` (numpy banding), and
  * naive:   one ``datasketch.MinHash()`` per document updated shingle by shingle, then
             ``MinHashLSH`` insert/query with the same banding, estimated-Jaccard check and union-find,
checks both give the same clusters, and prints the speed ratio. It then times 1M documents (batched
only) and measures recall/precision against EXACT shingle Jaccard on a sample.

    OMP_NUM_THREADS=1 python benchmarks/bench_dedup.py            # writes benchmarks/results/dedup.json
    OMP_NUM_THREADS=1 python benchmarks/bench_dedup.py --quick    # 1k/2k docs once, no 1M run, no file unless --out
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from datasketch import LeanMinHash, MinHash, MinHashLSH
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from result_files import add_out_option, out_path, write_results  # noqa: E402

from pipeline.steps.dedup_quality import dedup_precision_recall  # noqa: E402
from pipeline.steps.lsh_index import DedupIndex, default_lsh_threshold  # noqa: E402
from pipeline.steps.minhash import MINHASH_SCHEME, minhash_signatures, text_shingles  # noqa: E402

THRESHOLD = 0.6
NUM_PERM = 128
SHINGLE_SIZE = 3
RESULTS = Path(__file__).resolve().parent / "results" / "dedup.json"


def synthetic_corpus(n_docs: int, seed: int, dup_fraction: float = 0.1) -> tuple[list[str], np.ndarray]:
    """Short Zipf-worded documents; ``dup_fraction`` of them are edited copies of an earlier document.

    A copy gets 0-4 word edits (substitute / delete / insert) plus case and punctuation noise, so the
    planted pairs spread over Jaccard ~0.2-1. Returns the texts and, per document, the index of the
    document it copies (-1 for originals).
    """
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(20_000)])
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    lengths = rng.integers(6, 26, n_docs)
    words = rng.choice(vocabulary, size=int(lengths.sum()), p=weights)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    texts = [" ".join(words[offsets[i] : offsets[i + 1]]) for i in range(n_docs)]
    source = np.full(n_docs, -1, dtype=np.int64)
    copies = np.flatnonzero(rng.random(n_docs) < dup_fraction)
    copies = copies[copies > 0]
    for doc in copies:
        original = int(rng.integers(0, doc))
        while source[original] >= 0:  # copy an original so planted groups are stars
            original = int(source[original])
        tokens = texts[original].split()
        for _ in range(int(rng.integers(0, 5))):
            edit, where = rng.integers(0, 3), int(rng.integers(0, len(tokens)))
            if edit == 0:
                tokens[where] = str(rng.choice(vocabulary[:2000]))
            elif edit == 1 and len(tokens) > 3:
                del tokens[where]
            else:
                tokens.insert(where, str(rng.choice(vocabulary[:2000])))
        noisy = " ".join(tokens)
        texts[doc] = (noisy.capitalize() + ".") if rng.random() < 0.5 else noisy.upper().replace(" ", ", ", 1)
        source[doc] = original
    return texts, source


def components(n_nodes: int, pairs: np.ndarray) -> np.ndarray:
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n_nodes, n_nodes))
    return connected_components(graph, directed=False)[1]


def clusters_from_labels(ids: list[str], labels: np.ndarray) -> list[list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for pair_id, label in zip(ids, labels, strict=True):
        groups[int(label)].append(pair_id)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _timing(started: float, cpu_started: float, signed: float) -> dict:
    """Wall seconds of the signature phase and of the rest, total wall and CPU seconds, measured up to now
    (both contenders are timed the same way)."""
    done = time.perf_counter()
    return {
        "signatures_s": signed - started,
        "lsh_and_clusters_s": done - signed,
        "total_s": done - started,
        "total_cpu_s": time.process_time() - cpu_started,
    }


def batched(
    ids: list[str], texts: list[str], lsh_threshold: float
) -> tuple[list[list[str]], dict, DedupIndex]:
    started, cpu_started = time.perf_counter(), time.process_time()
    signatures = minhash_signatures(texts, num_perm=NUM_PERM, shingle_size=SHINGLE_SIZE)
    signed = time.perf_counter()
    index = DedupIndex(THRESHOLD, NUM_PERM, lsh_threshold=lsh_threshold)
    clusters = index.add_and_find(ids, signatures)
    timing = _timing(started, cpu_started, signed)
    return clusters, timing, index


def naive(ids: list[str], texts: list[str], lsh_threshold: float) -> tuple[list[list[str]], dict]:
    """What one writes from the datasketch docs: a MinHash per document, LSH insert + query, check, join."""
    started, cpu_started = time.perf_counter(), time.process_time()
    sketches = []
    for text in texts:
        sketch = MinHash(num_perm=NUM_PERM)
        for shingle in text_shingles(text, SHINGLE_SIZE):
            sketch.update(shingle.encode("utf-8"))
        sketches.append(LeanMinHash(sketch))
    signed = time.perf_counter()
    lsh = MinHashLSH(threshold=lsh_threshold, num_perm=NUM_PERM)
    usable = [i for i, sketch in enumerate(sketches) if not sketch.is_empty()]
    with lsh.insertion_session() as session:
        for i in usable:
            session.insert(i, sketches[i], check_duplication=False)
    edges = []
    for i in usable:
        for j in lsh.query(sketches[i]):
            if j > i and sketches[i].jaccard(sketches[j]) >= THRESHOLD:
                edges.append((i, j))
    labels = components(len(ids), np.array(edges, dtype=np.int64).reshape(-1, 2))
    clusters = clusters_from_labels(ids, labels)
    timing = _timing(started, cpu_started, signed)
    return clusters, timing


def bulk_signature_seconds(texts: list[str]) -> float:
    """datasketch's own batch API (``MinHash.bulk``), the fairer per-library baseline for signatures."""
    started = time.perf_counter()
    MinHash.bulk(
        [[s.encode("utf-8") for s in text_shingles(t, SHINGLE_SIZE)] for t in texts], num_perm=NUM_PERM
    )
    return time.perf_counter() - started


def exact_jaccard_pairs(texts: list[str]) -> dict[tuple[int, int], float]:
    """Exact shingle Jaccard of every pair of documents sharing at least one shingle."""
    sets = [frozenset(text_shingles(t, SHINGLE_SIZE)) for t in texts]
    postings: dict[str, list[int]] = defaultdict(list)
    for doc, shingles in enumerate(sets):
        for shingle in shingles:
            postings[shingle].append(doc)
    candidates = set()
    for docs in postings.values():
        candidates.update((docs[a], docs[b]) for a in range(len(docs)) for b in range(a + 1, len(docs)))
    return {(i, j): len(sets[i] & sets[j]) / len(sets[i] | sets[j]) for i, j in candidates}


def accuracy_vs_exact(n_docs: int, seed: int, settings: list[tuple[float, float]]) -> list[dict]:
    """For each (verification threshold, LSH banding threshold): recall of the EXACT pairs (shingle
    Jaccard >= THRESHOLD) that end up in one cluster, and precision of the verified links.
    """
    texts, source = synthetic_corpus(n_docs, seed)
    ids = [f"d{i:07d}" for i in range(n_docs)]
    exact = exact_jaccard_pairs(texts)
    true_pairs = sorted(pair for pair, jaccard in exact.items() if jaccard >= THRESHOLD)
    exact_labels = components(n_docs, np.array(true_pairs, dtype=np.int64).reshape(-1, 2))
    sizes = np.bincount(exact_labels)
    exact_truth = pd.DataFrame(
        {"pair_id": ids, "dup_cluster": [label if sizes[label] > 1 else None for label in exact_labels]}
    )
    copied = set(source[source >= 0].tolist())
    planted = [int(s) if s >= 0 else (i if i in copied else None) for i, s in enumerate(source)]
    planted_truth = pd.DataFrame({"pair_id": ids, "dup_cluster": planted})
    signatures = minhash_signatures(texts, num_perm=NUM_PERM, shingle_size=SHINGLE_SIZE)
    rows = []
    for verify_threshold, lsh_threshold in settings:
        index = DedupIndex(verify_threshold, NUM_PERM, lsh_threshold=lsh_threshold)
        clusters = index.add_and_find(ids, signatures)
        cluster_of = {int(pair_id[1:]): c for c, cluster in enumerate(clusters) for pair_id in cluster}
        together = {p for p in true_pairs if p[0] in cluster_of and cluster_of[p[0]] == cluster_of.get(p[1])}
        edges = index.edges.tolist()
        edge_ok = sum(exact.get((min(a, b), max(a, b)), 0.0) >= THRESHOLD for a, b in edges)
        by_jaccard = {}
        for low, high in [(0.6, 0.65), (0.65, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]:
            in_bin = [pair for pair in true_pairs if low <= exact[pair] < high]
            found = sum(pair in together for pair in in_bin)
            by_jaccard[f"{low:.2f}-{min(high, 1.0):.2f}"] = {
                "n_pairs": len(in_bin),
                "recall": found / len(in_bin) if in_bin else None,
            }
        rows.append(
            {
                "n_docs": n_docs,
                "target_exact_jaccard": THRESHOLD,
                "verify_threshold": verify_threshold,
                "lsh_threshold": lsh_threshold,
                "bands_rows": [index.bands, index.rows_per_band],
                "n_exact_pairs": len(true_pairs),
                "n_verified_links": len(edges),
                "pair_recall_vs_exact": len(together) / len(true_pairs) if true_pairs else None,
                "link_precision_vs_exact": edge_ok / len(edges) if edges else None,
                "recall_by_exact_jaccard": by_jaccard,
                "cluster_pairs_vs_exact_components": dedup_precision_recall(clusters, exact_truth),
                "cluster_pairs_vs_planted_copies": dedup_precision_recall(clusters, planted_truth),
            }
        )
    return rows


def speed(n_docs: int, seed: int, run_naive: bool, repeats: int) -> dict:
    """Timings on one corpus; the batched run is repeated and its fastest run kept (the machine is shared)."""
    texts, _ = synthetic_corpus(n_docs, seed)
    ids = [f"d{i:07d}" for i in range(n_docs)]
    lsh_threshold = default_lsh_threshold(THRESHOLD)
    runs = [batched(ids, texts, lsh_threshold)[:2] for _ in range(repeats)]
    clusters, timing = min(runs, key=lambda run: run[1]["total_s"])
    result = {"n_docs": n_docs, "n_clusters": len(clusters), "batched": timing, "batched_repeats": repeats}
    print(
        f"{n_docs:>9} docs  batched {timing['total_s']:.2f}s wall, {timing['total_cpu_s']:.2f}s CPU "
        f"({len(clusters)} clusters)",
        flush=True,
    )
    if run_naive:
        naive_clusters, naive_timing = naive(ids, texts, lsh_threshold)
        result["naive"] = naive_timing
        result["same_clusters_as_naive"] = naive_clusters == clusters
        result["speedup_total"] = naive_timing["total_s"] / timing["total_s"]
        result["speedup_total_cpu"] = naive_timing["total_cpu_s"] / timing["total_cpu_s"]
        result["speedup_signatures"] = naive_timing["signatures_s"] / timing["signatures_s"]
        result["speedup_lsh"] = naive_timing["lsh_and_clusters_s"] / timing["lsh_and_clusters_s"]
        result["datasketch_bulk_signatures_s"] = min(bulk_signature_seconds(texts) for _ in range(repeats))
        print(
            f"{'':>9}       naive   {naive_timing['total_s']:.2f}s wall, "
            f"{naive_timing['total_cpu_s']:.2f}s CPU "
            f"-> {result['speedup_total']:.1f}x faster (CPU time {result['speedup_total_cpu']:.1f}x) "
            f"(signatures {result['speedup_signatures']:.1f}x, LSH {result['speedup_lsh']:.1f}x); "
            f"same clusters: {result['same_clusters_as_naive']}; datasketch MinHash.bulk signatures "
            f"{result['datasketch_bulk_signatures_s']:.2f}s vs ours {timing['signatures_s']:.2f}s",
            flush=True,
        )
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1k and 2k docs timed once, no 1M run (a smoke test)")
    parser.add_argument("--no-million", action="store_true", help="skip the 1M-document timing")
    add_out_option(parser, RESULTS)
    args = parser.parse_args(argv)
    out = out_path(args, RESULTS)
    sizes = [1_000, 2_000] if args.quick else [10_000, 100_000]
    results = {
        "scheme": MINHASH_SCHEME,
        "num_perm": NUM_PERM,
        "shingle_size": SHINGLE_SIZE,
        "threshold": THRESHOLD,
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "note": "shared machine: wall times include contention, total_cpu_s does not",
        },
        "speed": [speed(n, seed=n, run_naive=True, repeats=1 if args.quick else 3) for n in sizes],
    }
    if not (args.quick or args.no_million):
        results["speed"].append(speed(1_000_000, seed=1, run_naive=False, repeats=1))
    settings = [
        (THRESHOLD, default_lsh_threshold(THRESHOLD)),  # the pipeline default
        (THRESHOLD, THRESHOLD),  # datasketch's own banding for the threshold
        (0.55, default_lsh_threshold(0.55)),  # verify a little below the target for recall
        (0.5, default_lsh_threshold(0.5)),
    ]
    results["accuracy"] = accuracy_vs_exact(1_000 if args.quick else 20_000, seed=7, settings=settings)
    for row in results["accuracy"]:
        bins = ", ".join(
            f"{k}: {v['recall']:.2f}"
            for k, v in row["recall_by_exact_jaccard"].items()
            if v["recall"] is not None
        )
        print(
            f"exact Jaccard >= {THRESHOLD} on {row['n_docs']} docs ({row['n_exact_pairs']} pairs); verify at "
            f"{row['verify_threshold']}, LSH for {row['lsh_threshold']} (b={row['bands_rows'][0]}, "
            f"r={row['bands_rows'][1]}): pair recall {row['pair_recall_vs_exact']:.3f}, link precision "
            f"{row['link_precision_vs_exact']:.3f}; recall by Jaccard {bins}",
            flush=True,
        )
    write_results(results, "", out, None)
    return results


if __name__ == "__main__":
    main()
