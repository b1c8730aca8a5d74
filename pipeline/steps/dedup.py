"""Near-duplicate text removal: which pairs are kept (the smallest pair_id of each cluster), over the LSH index
of :mod:`pipeline.steps.lsh_index`.

A grown dataset (shards) is deduplicated with :func:`deduplicate_reusing`: the signatures of pairs an
earlier shard's index holds are reused (only new texts are hashed), and the kept set is the one-shot
build's, so an earlier shard's pair may be displaced by a later pair with a smaller id or joined to another
earlier pair's cluster through a later text. :func:`deduplicate_into` keeps the older rule (an indexed pair
is never displaced) for callers that need kept pairs to stay kept.

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

import numpy as np
import pandas as pd

from pipeline.steps.dedup_settings import DEFAULTS
from pipeline.steps.lsh_index import DedupIndex
from pipeline.steps.minhash import is_empty_signature, minhash_signatures

_SNIPPET_CHARS = 80
_N_EXAMPLE_CLUSTERS = 5



@dataclass
class DedupResult:
    """The manifest with one pair kept per cluster, the clusters, and a report."""

    kept: pd.DataFrame
    clusters: list[list[str]]
    report: dict = field(default_factory=dict)


def deduplicate(
    manifest: pd.DataFrame,
    threshold: float = DEFAULTS.threshold,
    num_perm: int = DEFAULTS.num_perm,
    shingle_size: int = DEFAULTS.shingle_size,
    *,
    seed: int = 1,
    lsh_threshold: float | None = None,
) -> DedupResult:
    """Remove near-duplicate texts, keeping the smallest pair_id of each cluster (manifest order kept).

    The one-shot form of :func:`deduplicate_into` (a fresh index): what a sharded, incremental run must
    reproduce. Its defaults are ``DedupSettings``' (:mod:`pipeline.steps.dedup_settings`), so a call without settings removes what the pipeline
    removes.
    """
    index = DedupIndex(threshold, num_perm, seed, lsh_threshold)
    return deduplicate_into(index, manifest, shingle_size)


def deduplicate_reusing(
    stored: DedupIndex | None,
    manifest: pd.DataFrame,
    threshold: float = DEFAULTS.threshold,
    num_perm: int = DEFAULTS.num_perm,
    shingle_size: int = DEFAULTS.shingle_size,
) -> tuple[DedupResult, DedupIndex]:
    """:func:`deduplicate` of ``manifest`` (the same kept pairs and clusters), hashing only the texts whose
    pair_id ``stored`` (an earlier shard's index, or None) does not hold; returns the result and the new
    index (the manifest's pairs only: a stored pair no longer in the manifest, e.g. an earlier shard's row
    now rejected as a placeholder, no longer removes anything).

    Stored signatures are reused as they are: a pair_id keeps its text across shards (a later row with an
    earlier id is rejected as ``duplicate_pair_id``). Candidates are banded again over all pairs, which is
    numpy sorting; the hashing saved is the expensive part.
    """
    if stored is not None and (stored.threshold, stored.num_perm) != (threshold, num_perm):
        raise ValueError(
            f"the stored index was built with threshold {stored.threshold}, num_perm {stored.num_perm}; "
            f"this deduplication uses {threshold}, {num_perm}"
        )
    index = (
        DedupIndex(threshold, num_perm)
        if stored is None
        else DedupIndex(threshold, num_perm, stored.seed, stored.lsh_threshold)
    )
    pair_ids = manifest["pair_id"].astype(str).tolist()
    stored_row = {} if stored is None else {p: row for row, p in enumerate(stored.pair_ids)}
    reused = np.array([p in stored_row for p in pair_ids], dtype=bool)
    signatures = np.zeros((len(pair_ids), num_perm), dtype=np.uint32)
    if reused.any():
        signatures[reused] = stored.signatures[
            [stored_row[p] for p, r in zip(pair_ids, reused, strict=True) if r]
        ]
    if not reused.all():
        signatures[~reused] = minhash_signatures(
            manifest.loc[~reused, "text"].astype(str).tolist(),
            num_perm=num_perm,
            seed=index.seed,
            shingle_size=shingle_size,
        )
    result = deduplicate_into(index, manifest, shingle_size, signatures=signatures)
    earlier = {p for p, r in zip(pair_ids, reused, strict=True) if r}
    kept = set(result.kept["pair_id"])
    result.report.update(
        {
            "n_signatures_computed": int((~reused).sum()),
            "n_indexed_before": 0 if stored is None else len(stored),
            "n_reused": len(earlier),
            "n_removed_earlier_pairs": len(earlier - kept),
            "n_removed_as_duplicates_of_earlier_shards": sum(
                len([p for p in cluster if p not in earlier and p not in kept])
                for cluster in result.clusters
                if any(p in earlier for p in cluster)
            ),
        }
    )
    return result, index


def deduplicate_into(
    index: DedupIndex,
    manifest: pd.DataFrame,
    shingle_size: int = DEFAULTS.shingle_size,
    *,
    signatures: np.ndarray | None = None,
) -> DedupResult:
    """Add the manifest's pairs to ``index`` (which may hold earlier shards) and keep the new pairs that
    duplicate nothing already indexed, nor a smaller pair_id among the new ones.

    Only the new texts are hashed (none when their ``signatures`` are given, rows in manifest order). A pair
    indexed earlier is never displaced by one that arrives later, so the kept/removed status of earlier
    shards does not change. ``kept`` holds new rows only
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
    if signatures is None:
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
