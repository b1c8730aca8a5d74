"""Near-duplicate candidates by LSH banding of MinHash signatures (:mod:`pipeline.steps.minhash`), verified by
the Jaccard similarity the full signatures estimate, and joined into clusters: :class:`DedupIndex`, the
in-memory index that one-shot and incremental deduplication (:mod:`pipeline.steps.dedup`) add texts to.
Saved and loaded by :mod:`pipeline.steps.lsh_store`.

Candidates come from the banding datasketch's ``MinHashLSH`` would use, done with numpy (see
:class:`DedupIndex`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from datasketch import MinHashLSH
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from pipeline.steps.dedup_settings import DEFAULTS
from pipeline.steps.minhash import EMPTY_HASH, is_empty_signature, signature_hashes

# How far below the verification threshold the LSH banding is tuned (see DedupIndex).
LSH_SLACK = 0.2
# Candidate pairs generated per numpy step, and verified per step (each verified pair gathers two
# signature rows, 1 KiB at 128 permutations).
_PAIRS_PER_CHUNK = 1_000_000
_VERIFY_PAIRS = 65_536


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
        self, threshold: float, num_perm: int = DEFAULTS.num_perm, seed: int = 1, lsh_threshold: float | None = None
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

    def restore(self, pair_ids: list[str], signatures: np.ndarray, edges: np.ndarray) -> None:
        """Fill an empty index with stored items and their verified links (:mod:`pipeline.steps.lsh_store`)."""
        if self.pair_ids:
            raise ValueError("restore fills an empty index; this one already holds items")
        self._append(pair_ids, signatures)
        self.edges = edges
