"""Near-duplicate text removal: LSH banding of MinHash signatures (:mod:`pipeline.steps.minhash`), verified
clusters.

Texts are normalised (lowercase, punctuation removed) and cut into word shingles; two texts are
near-duplicates when the Jaccard similarity of their shingle sets, estimated from MinHash
signatures (Broder 1997), reaches ``threshold``. The signatures are exactly those of
``datasketch.MinHash(num_perm, seed)`` updated with each shingle's UTF-8 bytes (its default
"affine32" scheme), but computed for a whole batch of documents at once with numpy; candidates
come from the banding datasketch's ``MinHashLSH`` would use, also done with numpy (see
:class:`DedupIndex`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from datasketch import MinHashLSH
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from common.files import atomic_path
from pipeline.steps.minhash import (
    EMPTY_HASH,
    MINHASH_SCHEME,
    is_empty_signature,
    minhash_signatures,
    signature_hashes,
)

# How far below the verification threshold the LSH banding is tuned (see DedupIndex).
LSH_SLACK = 0.2
# Candidate pairs generated per numpy step, and verified per step (each verified pair gathers two
# signature rows, 1 KiB at 128 permutations).
_PAIRS_PER_CHUNK = 1_000_000
_VERIFY_PAIRS = 65_536
_SNIPPET_CHARS = 80
_N_EXAMPLE_CLUSTERS = 5
#: the defaults of :func:`deduplicate`; equal to the profiles' ``dedup_threshold`` / ``dedup_num_perm`` /
#: ``dedup_shingle_size`` (tests/test_dedup.py checks), so the one-shot call agrees with the pipeline
DEFAULT_THRESHOLD = 0.7
DEFAULT_NUM_PERM = 128
DEFAULT_SHINGLE_SIZE = 3


def _pairs_in_runs(keys: np.ndarray, rows: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every pair of ``rows`` that share a key, as (left, right) arrays, in chunks of bounded size."""
    order = np.argsort(keys)
    sorted_keys, sorted_rows = keys[order], rows[order]
    boundaries = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate(([0], boundaries))
    lengths = np.diff(np.concatenate((starts, [len(sorted_keys)])))
    shared = lengths >= 2
    starts, lengths = starts[shared], lengths[shared]
    n_pairs = lengths * (lengths - 1) // 2
    chunk_of_run = np.cumsum(n_pairs) // _PAIRS_PER_CHUNK
    for chunk in np.unique(chunk_of_run):
        in_chunk = chunk_of_run == chunk
        run_starts, run_lengths = starts[in_chunk], lengths[in_chunk]
        # Position p in a run ending at e pairs with the e - 1 - p positions after it.
        positions = np.repeat(run_starts, run_lengths) + _ranks_within(run_lengths)
        run_ends = np.repeat(run_starts + run_lengths, run_lengths)
        partners = run_ends - 1 - positions
        left = np.repeat(positions, partners)
        right = left + 1 + _ranks_within(partners)
        yield sorted_rows[left], sorted_rows[right]


def _ranks_within(lengths: np.ndarray) -> np.ndarray:
    """0, 1, ..., n-1 for each n in ``lengths``, concatenated."""
    total = int(lengths.sum())
    return np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def default_lsh_threshold(threshold: float) -> float:
    """The banding threshold used to find candidates for a verification ``threshold``: 0.2 lower."""
    return max(round(threshold - LSH_SLACK, 6), 0.05)


class DedupIndex:
    """Signatures of everything seen so far, banded for LSH, for one-shot or incremental deduplication.

    Candidate pairs are those sharing a band: the ``b`` bands of ``r`` consecutive signature
    values that ``datasketch.MinHashLSH(lsh_threshold, num_perm)`` picks (its false positive /
    negative optimum), so the buckets are those its ``insert``/``query`` would use; they are found
    here by sorting band hashes with numpy instead of two Python calls per document (about 20x
    faster, and no per-document dict entries in memory). A candidate is a
    duplicate only if the Jaccard estimated from the full signatures reaches ``threshold``.
    Clusters are connected components of the verified duplicate graph (so duplicates are joined
    transitively).

    ``lsh_threshold`` (default :func:`default_lsh_threshold`) sits below ``threshold`` because the
    banding datasketch picks for a threshold t proposes only ~40% of the pairs whose Jaccard is
    exactly t (b=18, r=7 for t=0.6 at 128 permutations); banding for t - 0.2 (b=32, r=4) proposes
    98.8% of them, and the extra candidates cost one vectorised signature comparison each.
    """

    def __init__(
        self, threshold: float, num_perm: int = 128, seed: int = 1, lsh_threshold: float | None = None
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        lsh_threshold = default_lsh_threshold(threshold) if lsh_threshold is None else lsh_threshold
        if not 0.0 < lsh_threshold <= threshold:
            raise ValueError(f"lsh_threshold must be in (0, threshold={threshold}], got {lsh_threshold}")
        if num_perm < 2:
            raise ValueError(f"num_perm must be >= 2, got {num_perm}")
        self.threshold = float(threshold)
        self.lsh_threshold = float(lsh_threshold)
        self.num_perm = int(num_perm)
        self.seed = int(seed)
        reference = MinHashLSH(threshold=self.lsh_threshold, num_perm=self.num_perm)
        self.bands, self.rows_per_band = int(reference.b), int(reference.r)
        self.pair_ids: list[str] = []
        self.signatures = np.zeros((0, num_perm), dtype=np.uint32)
        self.edges = np.zeros((0, 2), dtype=np.int64)
        self._row_of: dict[str, int] = {}
        self._band_hashes = np.zeros((0, self.bands), dtype=np.uint64)
        self.signature_hashes = np.zeros(0, dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.pair_ids)

    def _check_new(self, new_pair_ids: list[str], new_signatures: np.ndarray) -> np.ndarray:
        new_signatures = np.asarray(new_signatures)
        if new_signatures.ndim != 2 or new_signatures.shape[1] != self.num_perm:
            raise ValueError(
                f"signatures must be [N, {self.num_perm}], got {new_signatures.shape}; compute them with "
                f"minhash_signatures(..., num_perm={self.num_perm}, seed={self.seed})"
            )
        if len(new_pair_ids) != len(new_signatures):
            raise ValueError(f"{len(new_pair_ids)} pair ids for {len(new_signatures)} signatures")
        if new_signatures.size and (
            int(new_signatures.max()) > int(EMPTY_HASH) or int(new_signatures.min()) < 0
        ):
            raise ValueError("signature values are not 32-bit; compute them with minhash_signatures")
        if len(set(new_pair_ids)) != len(new_pair_ids):
            raise ValueError("pair ids repeat within the new batch; pair ids must be unique")
        clash = [p for p in new_pair_ids if p in self._row_of]
        if clash:
            raise ValueError(f"{len(clash)} pair id(s) already in the index, e.g. {clash[:3]}")
        return new_signatures.astype(np.uint32, copy=False)

    def _append(self, new_pair_ids: list[str], new_signatures: np.ndarray) -> int:
        first_new = len(self.pair_ids)
        self.pair_ids.extend(new_pair_ids)
        self._row_of.update({p: first_new + i for i, p in enumerate(new_pair_ids)})
        self.signatures = (
            new_signatures if first_new == 0 else np.concatenate([self.signatures, new_signatures])
        )
        band_hashes, whole = signature_hashes(new_signatures, self.bands, self.rows_per_band)
        self._band_hashes = np.concatenate([self._band_hashes, band_hashes])
        self.signature_hashes = np.concatenate([self.signature_hashes, whole])
        return first_new

    def _candidates(self, first_new: int) -> np.ndarray:
        """Candidate pairs [K, 2] (left < right) with at least one row from ``first_new`` on."""
        n_rows = len(self.pair_ids)
        is_new = np.arange(n_rows) >= first_new
        # Rows with identical signatures fall in the same bucket of every band: link each to the first
        # row with that signature and band only those first rows, so repeated texts (a caption
        # used a thousand times) add a thousand links rather than half a million candidate pairs.
        usable_rows = np.flatnonzero(~is_empty_signature(self.signatures))
        _, first_of_hash, hash_group = np.unique(
            self.signature_hashes[usable_rows], return_index=True, return_inverse=True
        )
        first_with_signature = usable_rows[first_of_hash][hash_group]
        linked = (usable_rows >= first_new) & (first_with_signature != usable_rows)
        found = [first_with_signature[linked] * n_rows + usable_rows[linked]]
        representative = np.zeros(n_rows, dtype=bool)
        representative[usable_rows[first_of_hash]] = True
        for band in range(self.bands):
            keys = self._band_hashes[:, band]
            new_keys = keys[representative & is_new]
            if new_keys.size == 0:
                break
            if first_new == 0:
                rows = np.flatnonzero(representative)
            else:
                # Stored rows matter only when they share a bucket with a new row.
                rows = np.flatnonzero(representative & (is_new | np.isin(keys, new_keys)))
            for left, right in _pairs_in_runs(keys[rows], rows):
                keep = (left >= first_new) | (right >= first_new)
                low, high = np.minimum(left, right)[keep], np.maximum(left, right)[keep]
                found.append(low * n_rows + high)
        codes = np.unique(np.concatenate(found))
        return np.stack([codes // n_rows, codes % n_rows], axis=1)

    def _verify(self, candidates: np.ndarray) -> np.ndarray:
        """The candidate pairs whose signatures agree on at least ``threshold`` of their values."""
        kept = []
        for start in range(0, len(candidates), _VERIFY_PAIRS):
            chunk = candidates[start : start + _VERIFY_PAIRS]
            agreement = (self.signatures[chunk[:, 0]] == self.signatures[chunk[:, 1]]).mean(axis=1)
            kept.append(chunk[agreement >= self.threshold])
        return np.concatenate(kept) if kept else np.zeros((0, 2), dtype=np.int64)

    def _component_labels(self) -> np.ndarray:
        n_rows = len(self.pair_ids)
        graph = coo_matrix(
            (np.ones(len(self.edges), dtype=np.int8), (self.edges[:, 0], self.edges[:, 1])),
            shape=(n_rows, n_rows),
        )
        return connected_components(graph, directed=False)[1]

    def _clusters_from(self, labels: np.ndarray, wanted: np.ndarray | None = None) -> list[list[str]]:
        sizes = np.bincount(labels)
        in_cluster = sizes[labels] >= 2
        if wanted is not None:
            in_cluster &= np.isin(labels, wanted)
        members: dict[int, list[str]] = {}
        for row in np.flatnonzero(in_cluster):
            members.setdefault(int(labels[row]), []).append(self.pair_ids[row])
        return sorted(sorted(group) for group in members.values())

    def add_and_find(self, new_pair_ids: Sequence[str], new_signatures: np.ndarray) -> list[list[str]]:
        """Add new items; return every duplicate cluster that now holds at least one of them.

        New items are compared with the stored ones and among themselves; stored texts are not
        rehashed. Clusters are sorted (ids within a cluster, clusters by first id).
        """
        new_pair_ids = [str(p) for p in new_pair_ids]
        new_signatures = self._check_new(new_pair_ids, new_signatures)
        first_new = self._append(new_pair_ids, new_signatures)
        self.edges = np.concatenate([self.edges, self._verify(self._candidates(first_new))])
        labels = self._component_labels()
        return self._clusters_from(labels, wanted=np.unique(labels[first_new:]))

    def clusters(self) -> list[list[str]]:
        """All duplicate clusters (size >= 2), each sorted, sorted by first id."""
        return self._clusters_from(self._component_labels())

    def save(self, path: str | Path) -> None:
        """Write signatures, pair ids, verified links and settings to ``path`` (.npz), atomically."""
        path = Path(path)
        if path.suffix != ".npz":
            raise ValueError(f"a DedupIndex is saved as .npz, got {path}")
        settings = {
            "threshold": self.threshold,
            "lsh_threshold": self.lsh_threshold,
            "num_perm": self.num_perm,
            "seed": self.seed,
            "scheme": MINHASH_SCHEME,
        }
        # a file handle, so numpy does not append ".npz" to the temp name
        with atomic_path(path) as temp, open(temp, "wb") as handle:
            np.savez(
                handle,
                signatures=self.signatures,
                pair_ids=np.array(self.pair_ids, dtype=np.str_),
                edges=self.edges,
                settings=np.array(json.dumps(settings)),
            )

    @classmethod
    def load(cls, path: str | Path) -> DedupIndex:
        """Read an index written by :meth:`save`; band hashes are recomputed from the stored signatures."""
        with np.load(Path(path), allow_pickle=False) as stored:
            settings = json.loads(str(stored["settings"]))
            signatures = stored["signatures"]
            pair_ids = [str(p) for p in stored["pair_ids"]]
            edges = stored["edges"].astype(np.int64).reshape(-1, 2)
        if settings.get("scheme") != MINHASH_SCHEME:
            raise ValueError(
                f"{path} holds {settings.get('scheme')!r} signatures, not {MINHASH_SCHEME}; rebuild it"
            )
        index = cls(settings["threshold"], settings["num_perm"], settings["seed"], settings["lsh_threshold"])
        index._append(pair_ids, signatures.astype(np.uint32))
        index.edges = edges
        return index


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


def _pairs_within(groups: Sequence[Sequence[str]]) -> set[tuple[str, str]]:
    pairs = set()
    for group in groups:
        members = sorted(set(group))
        pairs.update(
            (members[i], members[j]) for i in range(len(members)) for j in range(i + 1, len(members))
        )
    return pairs


def dedup_precision_recall(clusters: Sequence[Sequence[str]], ground_truth: pd.DataFrame) -> dict:
    """Pairwise precision and recall of found duplicate pairs against injected duplicate clusters.

    A pair counts when both ids sit in one found cluster; it is correct when both also share a
    ``dup_cluster`` label (NaN / None = not injected). Precision is 1.0 when nothing was found and
    recall is 1.0 when nothing was injected (no claim is wrong, no duplicate is missed).
    """
    if "dup_cluster" not in ground_truth.columns:
        raise ValueError("ground_truth needs a dup_cluster column (NaN/None for pairs never duplicated)")
    ids = ground_truth["pair_id"] if "pair_id" in ground_truth.columns else ground_truth.index.to_series()
    labelled = pd.DataFrame(
        {"pair_id": ids.astype(str).to_numpy(), "dup_cluster": ground_truth["dup_cluster"].to_numpy()}
    )
    labelled = labelled[labelled["dup_cluster"].notna()]
    true_groups = [group["pair_id"].tolist() for _, group in labelled.groupby("dup_cluster", sort=True)]
    found_pairs = _pairs_within([[str(p) for p in cluster] for cluster in clusters])
    true_pairs = _pairs_within(true_groups)
    correct = len(found_pairs & true_pairs)
    precision = correct / len(found_pairs) if found_pairs else 1.0
    recall = correct / len(true_pairs) if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_found_pairs": len(found_pairs),
        "n_true_pairs": len(true_pairs),
        "n_correct_pairs": correct,
    }
