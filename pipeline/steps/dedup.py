"""Near-duplicate text removal: which pairs are kept (one per cluster; an earlier shard's pair is never
displaced), over the LSH index of :mod:`pipeline.steps.lsh_index`.

Texts are normalised (lowercase, punctuation removed) and cut into word shingles; two texts are
near-duplicates when the Jaccard similarity of their shingle sets, estimated from MinHash
signatures (Broder 1997), reaches ``threshold``. The signatures are exactly those of
``datasketch.MinHash(num_perm, seed)`` updated with each shingle's UTF-8 bytes (its default
"affine32" scheme), but computed for a whole batch of documents at once with numpy
(:mod:`pipeline.steps.minhash`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from pipeline.steps.lsh_index import DedupIndex
from pipeline.steps.minhash import is_empty_signature, minhash_signatures

_SNIPPET_CHARS = 80
_N_EXAMPLE_CLUSTERS = 5
#: the defaults of :func:`deduplicate`; equal to the profiles' ``dedup_threshold`` / ``dedup_num_perm`` /
#: ``dedup_shingle_size`` (tests/test_dedup.py checks), so the one-shot call agrees with the pipeline
DEFAULT_THRESHOLD = 0.7
DEFAULT_NUM_PERM = 128
DEFAULT_SHINGLE_SIZE = 3


@dataclass
class DedupResult:
    """The manifest with one pair kept per cluster, the clusters, and a report."""

    kept: pd.DataFrame
    clusters: list[list[str]]
    report: dict = field(default_factory=dict)


def deduplicate(
    manifest: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    num_perm: int = DEFAULT_NUM_PERM,
    shingle_size: int = DEFAULT_SHINGLE_SIZE,
    *,
    seed: int = 1,
    lsh_threshold: float | None = None,
) -> DedupResult:
    """Remove near-duplicate texts, keeping the smallest pair_id of each cluster (manifest order kept).

    The one-shot form of :func:`deduplicate_into` (a fresh index): what a sharded, incremental run must
    reproduce. Its defaults are the profiles' (``Profile.dedup_*``), so a call without settings removes
    what the pipeline removes.
    """
    index = DedupIndex(threshold, num_perm, seed, lsh_threshold)
    return deduplicate_into(index, manifest, shingle_size)


def deduplicate_into(index: DedupIndex, manifest: pd.DataFrame, shingle_size: int = 3) -> DedupResult:
    """Add the manifest's pairs to ``index`` (which may hold earlier shards) and keep the new pairs that
    duplicate nothing already indexed, nor a smaller pair_id among the new ones.

    Only the new texts are hashed. A pair indexed earlier is never displaced by one that arrives later,
    so the kept/removed status of earlier shards does not change. ``kept`` holds new rows only
    (manifest order); ``clusters`` every cluster that holds a new pair (earlier members included).
    """
    missing = [c for c in ("pair_id", "text") if c not in manifest.columns]
    if missing:
        raise ValueError(f"manifest lacks column(s) {missing}; deduplicate a validated manifest")
    pair_ids = manifest["pair_id"].astype(str).tolist()
    if len(set(pair_ids)) != len(pair_ids):
        raise ValueError(
            "manifest has duplicate pair_id values; run data_recipes.validate.validate_records first"
        )
    texts = manifest["text"].astype(str).tolist()
    earlier = set(index.pair_ids)
    signatures = minhash_signatures(
        texts, num_perm=index.num_perm, seed=index.seed, shingle_size=shingle_size
    )
    clusters = index.add_and_find(pair_ids, signatures)
    removed: set[str] = set()
    n_removed_by_earlier = 0
    for cluster in clusters:
        new_members = [p for p in cluster if p not in earlier]
        if len(new_members) < len(cluster):  # an earlier pair is in the cluster: every new member goes
            removed.update(new_members)
            n_removed_by_earlier += len(new_members)
        else:
            removed.update(new_members[1:])
    kept = manifest[[p not in removed for p in pair_ids]].reset_index(drop=True)
    text_of = dict(zip(pair_ids, texts, strict=True))
    largest_first = sorted(clusters, key=lambda c: (-len(c), c[0]))
    report = {
        "n_input": len(pair_ids),
        "n_kept": len(kept),
        "n_removed": len(removed),
        "n_removed_as_duplicates_of_earlier_shards": n_removed_by_earlier,
        "n_signatures_computed": len(texts),
        "n_indexed_before": len(earlier),
        "n_clusters": len(clusters),
        "n_without_shingles": int(is_empty_signature(signatures).sum()),
        "cluster_size_histogram": {str(size): n for size, n in sorted(Counter(map(len, clusters)).items())},
        "threshold": index.threshold,
        "lsh_threshold": index.lsh_threshold,
        "num_perm": index.num_perm,
        "shingle_size": shingle_size,
        "example_clusters": [
            [{"pair_id": p, "text": text_of.get(p, "(earlier shard)")[:_SNIPPET_CHARS]} for p in cluster]
            for cluster in largest_first[:_N_EXAMPLE_CLUSTERS]
        ],
    }
    return DedupResult(kept, clusters, report)


