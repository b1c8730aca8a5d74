"""MinHash signatures of word shingles, computed for a whole batch of documents at once with numpy.

Texts are normalised (lowercase, punctuation removed) and cut into word shingles. The signatures are exactly
those of ``datasketch.MinHash(num_perm, seed)`` updated with each shingle's UTF-8 bytes (its default
"affine32" scheme); the LSH index that bands them is in :mod:`pipeline.steps.dedup`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence

import numpy as np
from datasketch import MinHash

from pipeline.steps.dedup_settings import DEFAULTS

MINHASH_SCHEME = "affine32"
EMPTY_HASH = np.uint32(0xFFFFFFFF)
# Shingles per numpy batch: the permuted batch is shingles x num_perm uint32 (~32 MiB at 128).
_BATCH_SHINGLES = 65_536
# Rows hashed per step (a column-major uint64 copy of the slab is made).
_HASH_ROWS = 65_536
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_PUNCTUATION = re.compile(r"[^\w\s]|_")


def normalise_for_dedup(text: str) -> list[str]:
    """Lowercased words with punctuation removed ("Don't!" -> ["dont"])."""
    return _PUNCTUATION.sub("", str(text).lower()).split()


def text_shingles(text: str, shingle_size: int = DEFAULTS.shingle_size) -> list[str]:
    """Distinct word ``shingle_size``-grams of the normalised text, in order of first appearance.

    A text with fewer words than ``shingle_size`` is represented by its words, so short texts are
    still compared; a text with no words has no shingles and is never a duplicate.
    """
    if shingle_size < 1:
        raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
    words = normalise_for_dedup(text)
    if len(words) < shingle_size:
        return list(dict.fromkeys(words))
    grams = (" ".join(words[i : i + shingle_size]) for i in range(len(words) - shingle_size + 1))
    return list(dict.fromkeys(grams))


#: MurmurHash3's finalisers: (the unsigned type, its three shifts, its two multipliers)
_FMIX32 = (np.uint32, (16, 13, 16), (0x85EBCA6B, 0xC2B2AE35))
_FMIX64 = (np.uint64, (33, 33, 33), (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53))


def _fmix(values: np.ndarray, finaliser: tuple) -> np.ndarray:
    """MurmurHash3's finaliser of ``values``' width: xor-shift, multiply, xor-shift, multiply, xor-shift (wrapping)."""
    kind, (first, second, third), (one, two) = finaliser
    values = values ^ (values >> kind(first))
    values = values * kind(one)
    values = values ^ (values >> kind(second))
    values = values * kind(two)
    return values ^ (values >> kind(third))


def _fmix32(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, as datasketch applies it before its affine permutations."""
    return _fmix(values, _FMIX32)


def _sha1_hash32(shingles: Sequence[str]) -> np.ndarray:
    """datasketch's ``sha1_hash32`` of each shingle's UTF-8 bytes (first 4 SHA-1 bytes, little-endian)."""
    digests = b"".join(hashlib.sha1(s.encode("utf-8")).digest()[:4] for s in shingles)
    return np.frombuffer(digests, dtype="<u4").astype(np.uint32)


def _batches(texts: Sequence[str], shingle_size: int) -> Iterator[tuple[int, list[list[str]]]]:
    """(first document index, shingles of each document) with about ``_BATCH_SHINGLES`` shingles per batch."""
    start, batch, n_shingles = 0, [], 0
    for index, text in enumerate(texts):
        shingles = text_shingles(text, shingle_size)
        batch.append(shingles)
        n_shingles += len(shingles)
        if n_shingles >= _BATCH_SHINGLES:
            yield start, batch
            start, batch, n_shingles = index + 1, [], 0
    if batch:
        yield start, batch


def minhash_signatures(
    texts: Sequence[str], num_perm: int = DEFAULTS.num_perm, seed: int = 1, shingle_size: int = DEFAULTS.shingle_size
) -> np.ndarray:
    """MinHash signatures uint32 [N, num_perm] of the texts' shingle sets.

    Row i equals ``datasketch.MinHash(num_perm=num_perm, seed=seed)`` after ``update(s.encode())``
    for every shingle s of text i: h = fmix32(sha1_hash32(s)), then min over shingles of
    a_k * h + b_k mod 2^32 for each permutation k. A text without shingles keeps the empty value
    2^32 - 1 everywhere. The values are uint32 because that is datasketch's own dtype for this scheme.
    """
    if num_perm < 2:
        raise ValueError(f"num_perm must be >= 2, got {num_perm}")
    a, b = MinHash(num_perm=num_perm, seed=seed).permutations
    a = a.astype(np.uint32)[:, None]
    b = b.astype(np.uint32)[:, None]
    signatures = np.full((len(texts), num_perm), EMPTY_HASH, dtype=np.uint32)
    for start, batch in _batches(texts, shingle_size):
        lengths = np.array([len(s) for s in batch], dtype=np.int64)
        non_empty = np.flatnonzero(lengths)
        if non_empty.size == 0:
            continue
        flat = [shingle for shingles in batch for shingle in shingles]
        hashed = _fmix32(_sha1_hash32(flat))[None, :]
        # [num_perm, shingles]: reducing along the contiguous last axis is several times faster.
        permuted = a * hashed + b  # uint32 arithmetic wraps: this is the mod 2^32
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))[non_empty]
        signatures[start + non_empty] = np.minimum.reduceat(permuted, offsets, axis=1).T
    return signatures


def is_empty_signature(signatures: np.ndarray) -> np.ndarray:
    return np.all(signatures == EMPTY_HASH, axis=1)


def fold_words(columns: np.ndarray) -> np.ndarray:
    """FNV-style fold of uint64 word rows [k, n] into n values (equal columns give equal values)."""
    folded = np.full(columns.shape[1], _FNV_OFFSET, dtype=np.uint64)
    for word in columns:
        folded ^= word
        folded *= _FNV_PRIME
    return folded


def _fmix64(values: np.ndarray) -> np.ndarray:
    return _fmix(values, _FMIX64)


def signature_hashes(signatures: np.ndarray, bands: int, rows_per_band: int) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of each signature's LSH bands [N, bands] and of the whole signature [N].

    Equal bands always get equal hashes. A band-hash collision only adds a candidate that
    verification drops; a whole-signature collision (odds about N^2 / 2^65) could hide one row
    behind another's representative, which is negligible at any corpus size here.
    """
    n_rows = len(signatures)
    band_hashes = np.empty((n_rows, bands), dtype=np.uint64)
    whole = np.empty(n_rows, dtype=np.uint64)
    for start in range(0, n_rows, _HASH_ROWS):
        # One column-major copy of a slab of rows: every word pass then reads contiguous memory.
        columns = np.ascontiguousarray(signatures[start : start + _HASH_ROWS].T, dtype=np.uint64)
        stop = start + columns.shape[1]
        for band in range(bands):
            band_hashes[start:stop, band] = _fmix64(
                fold_words(columns[band * rows_per_band : (band + 1) * rows_per_band])
            )
        whole[start:stop] = _fmix64(fold_words(columns))
    return band_hashes, whole
