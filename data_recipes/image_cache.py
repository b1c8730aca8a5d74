"""Decode every image once into one uint8 array [N, S, S, 3] (.npy, memory-mapped), rejecting bad ones.

Each distinct image path is decoded once (several pairs may share an image, e.g. COCO's five
captions); images that fail :func:`data_recipes.validate.load_image_rgb` reject all their pairs, and
so does a placeholder: the same decoded pixels behind many different paths (e.g. Flickr's
"photo no longer available"). Rows of the cache follow the manifest order of the kept pairs.

Whether an image is a placeholder depends on every path seen, not on one image: a pipeline that grows its
data in shards decides it where the shards meet (``pipeline.steps.stacking``), from the content hash the
cache records for each kept pair (``placeholder_min_paths=None`` here), with :func:`find_placeholders`.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from tqdm import tqdm

from common.files import write_npy_through_memmap
from data_recipes.validate import (
    DEFAULT_MAX_PIXELS,
    ImageRejected,
    load_image_rgb,
    make_rejects,
    reject_counts,
)

DEFAULT_PLACEHOLDER_MIN_PATHS = 10
# Paths decoded per thread-pool round: bounds the decoded thumbnails waiting to be written.
_CHUNK_PATHS = 256
# Rows copied per step when the final cache is gathered from the per-image array.
_COPY_ROWS = 1024


@dataclass
class ImageCacheResult:
    """Rows of the cache (kept pair ids, manifest order), the rejected pairs, counts, and the decoded content
    hash of each kept pair (what placeholder detection compares)."""

    pair_ids: list[str]
    rejects: pd.DataFrame
    stats: dict = field(default_factory=dict)
    content_hashes: list[str] = field(default_factory=list)


def find_placeholders(
    paths: Sequence[str], content_hashes: Sequence[str], min_paths: int = DEFAULT_PLACEHOLDER_MIN_PATHS
) -> dict[str, str]:
    """The paths whose decoded pixels sit behind at least ``min_paths`` distinct paths, each with the
    reject detail; ``paths[i]`` decoded to ``content_hashes[i]`` (a path may repeat)."""
    if min_paths < 2:
        raise ValueError(
            f"placeholder_min_paths must be >= 2 (one path is never a placeholder), got {min_paths}"
        )
    paths_of_hash: dict[str, list[str]] = defaultdict(list)
    for path, content_hash in dict(zip(paths, content_hashes, strict=True)).items():
        paths_of_hash[content_hash].append(path)
    return {
        path: f"same decoded pixels (hash {content_hash[:12]}) as {len(same) - 1} other image paths"
        for content_hash, same in paths_of_hash.items()
        if len(same) >= min_paths
        for path in same
    }


@dataclass
class _Decoded:
    pixels: np.ndarray | None
    content_hash: str
    reason: str = ""
    detail: str = ""


def centre_square(image: Image.Image, size: int) -> np.ndarray:
    """Shorter side scaled to ``size``, centre-cropped to ``size`` x ``size``; uint8 [size, size, 3].

    Cropping the centred square of side min(W, H) and scaling it to ``size`` is the same geometry
    as scaling then cropping, but resamples fewer pixels. PIL's bicubic filter is antialiased when
    downscaling; the reducing gap keeps large downscales fast at no visible cost.
    """
    width, height = image.size
    side = min(width, height)
    left = (width - side) / 2.0
    top = (height - side) / 2.0
    box = (left, top, left + side, top + side)
    resized = image.resize((size, size), Image.Resampling.BICUBIC, box=box, reducing_gap=3.0)
    return np.asarray(resized, dtype=np.uint8)


def _decode_one(path: str, image_size: int, max_pixels: int) -> _Decoded:
    try:
        image = load_image_rgb(path, max_pixels=max_pixels, draft_size=image_size)
    except ImageRejected as rejected:
        return _Decoded(None, "", rejected.reason, rejected.detail)
    pixels = centre_square(image, image_size)
    # Hashing the thumbnail plus the decoded size finds the same decoded picture at a third of the
    # cost of hashing the full pixels; only degenerate images (one flat colour) could collide.
    digest = hashlib.blake2b(pixels.tobytes(), digest_size=16)
    digest.update(f"{image.size}".encode())
    return _Decoded(pixels, digest.hexdigest())


def _decode_all(paths: Sequence[str], image_size: int, max_pixels: int, workers: int) -> Iterator[_Decoded]:
    """Decoded images in ``paths`` order; PIL releases the GIL while decoding, so threads overlap."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start in range(0, len(paths), _CHUNK_PATHS):
            chunk = paths[start : start + _CHUNK_PATHS]
            yield from pool.map(lambda p: _decode_one(p, image_size, max_pixels), chunk)


def build_image_cache(
    manifest: pd.DataFrame,
    image_size: int,
    out_path: Path,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    placeholder_min_paths: int | None = DEFAULT_PLACEHOLDER_MIN_PATHS,
    workers: int = 0,
) -> ImageCacheResult:
    """Decode, check and resize the manifest's images into ``out_path`` (uint8 [N, S, S, 3] .npy).

    Pairs whose image is rejected (a :data:`data_recipes.validate.REJECT_REASONS` image reason, or
    ``placeholder_image`` when the same decoded pixels sit behind at least ``placeholder_min_paths``
    different paths) are left out of the cache and listed in ``rejects``. With ``placeholder_min_paths``
    None, placeholders stay in the cache for the caller to find with :func:`find_placeholders` over more
    data (the result's ``content_hashes``). The file appears only when complete (temp file +
    ``os.replace``). ``workers`` = 0 picks one decoding thread per core.
    """
    missing = [c for c in ("pair_id", "image_path") if c not in manifest.columns]
    if missing:
        raise ValueError(f"manifest lacks column(s) {missing}; build the cache from a validated manifest")
    if image_size < 1:
        raise ValueError(f"image_size must be >= 1, got {image_size}")
    if placeholder_min_paths is not None and placeholder_min_paths < 2:
        raise ValueError(
            "placeholder_min_paths must be >= 2 (one path is never a placeholder), "
            f"got {placeholder_min_paths}"
        )
    pair_ids = manifest["pair_id"].astype(str).tolist()
    if len(set(pair_ids)) != len(pair_ids):
        raise ValueError(
            "manifest has duplicate pair_id values; run data_recipes.validate.validate_records first"
        )
    out_path = Path(out_path)
    if out_path.suffix != ".npy":
        raise ValueError(f"out_path must end in .npy, got {out_path}")
    if not out_path.parent.is_dir():
        raise FileNotFoundError(
            f"folder {out_path.parent} does not exist; create it before building the cache"
        )
    workers = workers or max(1, os.cpu_count() or 1)
    started = time.perf_counter()

    pair_paths = manifest["image_path"].astype(str).tolist()
    distinct_paths = list(dict.fromkeys(pair_paths))
    row_of_path = {path: row for row, path in enumerate(distinct_paths)}
    path_reject: dict[str, tuple[str, str]] = {}
    hash_of_path: dict[str, str] = {}
    shape = (len(distinct_paths), image_size, image_size, 3)

    # One row per distinct image, gathered into pair order at the end (unique name: parallel builds).
    per_image_path = out_path.with_name(f".{out_path.stem}.per_image.{os.getpid()}.{uuid.uuid4().hex}.npy")

    def fill_per_image(array: np.ndarray) -> None:
        decoded = _decode_all(distinct_paths, image_size, max_pixels, workers)
        progress = tqdm(decoded, total=len(distinct_paths), desc="images", unit="img", disable=None)
        for row, (path, result) in enumerate(zip(distinct_paths, progress, strict=True)):
            if result.pixels is None:
                path_reject[path] = (result.reason, result.detail)
                continue
            array[row] = result.pixels
            hash_of_path[path] = result.content_hash

    try:
        write_npy_through_memmap(per_image_path, shape, np.uint8, fill_per_image, named=out_path)
        placeholders = (
            {}
            if placeholder_min_paths is None
            else find_placeholders(list(hash_of_path), list(hash_of_path.values()), placeholder_min_paths)
        )
        path_reject.update((path, ("placeholder_image", detail)) for path, detail in placeholders.items())
        kept_positions = [i for i, path in enumerate(pair_paths) if path not in path_reject]
        kept_rows = np.array([row_of_path[pair_paths[i]] for i in kept_positions], dtype=np.int64)
        if np.array_equal(kept_rows, np.arange(len(distinct_paths))):
            os.replace(per_image_path, out_path)
        else:
            per_image = np.load(per_image_path, mmap_mode="r")

            def fill_final(array: np.ndarray) -> None:
                for start in range(0, len(kept_rows), _COPY_ROWS):
                    array[start : start + _COPY_ROWS] = per_image[kept_rows[start : start + _COPY_ROWS]]

            final_shape = (len(kept_rows), image_size, image_size, 3)
            write_npy_through_memmap(out_path, final_shape, np.uint8, fill_final, named=out_path)
            del per_image
    finally:
        if per_image_path.exists():
            per_image_path.unlink()

    rejects = make_rejects(
        (pair_ids[i], *path_reject[path]) for i, path in enumerate(pair_paths) if path in path_reject
    )
    seconds = time.perf_counter() - started
    stats = {
        "n_pairs": len(pair_ids),
        "n_distinct_images": len(distinct_paths),
        "n_kept_pairs": len(kept_positions),
        "n_rejected_pairs": len(rejects),
        "n_rejected_images": len(path_reject),
        "rejects_by_reason": reject_counts(rejects),
        "n_placeholder_images": len({hash_of_path[path] for path in placeholders}),
        "placeholder_paths": len(placeholders),
        "image_size": image_size,
        "cache_bytes": len(kept_positions) * image_size * image_size * 3,
        "seconds": round(seconds, 3),
        "images_per_second": round(len(distinct_paths) / seconds, 1) if seconds > 0 else None,
    }
    return ImageCacheResult(
        [pair_ids[i] for i in kept_positions],
        rejects,
        stats,
        [hash_of_path[pair_paths[i]] for i in kept_positions],
    )


def load_image_cache(path: str | Path) -> np.ndarray:
    """The cache as a read-only memory map, uint8 [N, S, S, 3]."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image cache at {path}; build it with build_image_cache")
    cache = np.load(path, mmap_mode="r")
    if cache.dtype != np.uint8 or cache.ndim != 4 or cache.shape[3] != 3 or cache.shape[1] != cache.shape[2]:
        raise ValueError(
            f"{path} holds {cache.dtype} {cache.shape}, not an image cache uint8 [N, S, S, 3]; rebuild it"
        )
    return cache


class ShardedImageCache:
    """Several image caches (one per data shard) read as one: row ``r`` of shard ``s`` is global row
    ``offset[s] + r``. Incremental rebuilds append a shard instead of decoding old images again.
    """

    def __init__(self, shards: Sequence[np.ndarray]) -> None:
        if not shards:
            raise ValueError("no image cache shards; build at least one with build_image_cache")
        tails = {tuple(shard.shape[1:]) for shard in shards}
        if len(tails) != 1:
            raise ValueError(f"image cache shards differ in image size: {sorted(tails)}; rebuild them alike")
        self._shards = list(shards)
        self._ends = np.cumsum([len(shard) for shard in shards])
        self.shape = (int(self._ends[-1]), *next(iter(tails)))
        self.dtype = shards[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: int | np.ndarray) -> np.ndarray:
        if np.isscalar(rows):
            return self[np.array([rows])][0]
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"image cache rows must lie in [0, {len(self)}), got {rows.min()}..{rows.max()}")
        shard_of = np.searchsorted(self._ends, rows, side="right")
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for shard in np.unique(shard_of):
            chosen = shard_of == shard
            start = self._ends[shard - 1] if shard else 0
            out[chosen] = self._shards[shard][rows[chosen] - start]
        return out


def load_image_shards(paths: Sequence[str | Path]) -> np.ndarray | ShardedImageCache:
    """The caches at ``paths`` as one indexable cache (the memmap itself when there is one shard)."""
    caches = [load_image_cache(path) for path in paths]
    return caches[0] if len(caches) == 1 else ShardedImageCache(caches)
