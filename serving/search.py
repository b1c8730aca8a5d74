"""Queries against an index: by text, by image, by an item of the index, or by a ready embedding.

What a query is compared with (``against``): by default the other modality, what the model was trained to
match and what the index is for ("which of our photos fit this article?" and back): a text query ranks the
items' images, an image query their texts. ``against`` picks the same modality instead (text -> texts,
image -> images). A query by item uses the item's image when it has one, else its text, and leaves the item
itself out of a same-modality ranking.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.devices import pick_device
from serving.bundle import Bundle, load_bundle
from serving.embed import Embedder, QueryError
from serving.index import MODALITIES, GalleryIndex

MAX_K = 1000
#: rows of one vector query (a PVSE query has K <= 4 rows; more is not a query but a batch)
MAX_QUERY_ROWS = 64


@dataclass(frozen=True)
class Hit:
    rank: int
    item_id: str
    score: float
    text: str | None
    path: str
    has_image: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class UnknownItem(KeyError):
    pass


#: how a JSON client calls the Python types a parsed body holds
_JSON_KINDS = {str: "string", bool: "boolean", type(None): "null", dict: "object", list: "array"}


def _numbers(vector: Any) -> list[list[float | int]]:
    """``vector`` as rows of JSON numbers, refusing what ``np.asarray`` would quietly turn into one: a string
    ("1.5"), a boolean (true is 1), null; ``not_a_number`` names the first such value and where it is."""
    if isinstance(vector, np.ndarray):
        if vector.dtype.kind not in "iuf":
            raise QueryError("not_a_number", f"the vector holds {vector.dtype} values, not numbers")
        if vector.ndim not in (1, 2) or vector.size == 0:
            raise QueryError("ragged_vector", f"the vector must be [D] or [K, D] numbers, got shape {list(vector.shape)}")
        return np.atleast_2d(vector).tolist()
    if not isinstance(vector, list | tuple) or not vector:
        raise QueryError("ragged_vector", "the vector must be [D] or [K, D] numbers: a non-empty list")
    nested = [isinstance(row, list | tuple) for row in vector]
    if any(nested) and not all(nested):
        raise QueryError("ragged_vector", "the vector mixes numbers and lists: give [D] or [K, D] numbers")
    rows = [list(row) for row in vector] if all(nested) else [list(vector)]
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int | float):
                where = f"vector[{i}][{j}]" if all(nested) else f"vector[{j}]"
                kind = _JSON_KINDS.get(type(value), type(value).__name__)
                shown = json.dumps(value)[:40] if value is None or isinstance(value, str | bool) else f"an {kind}"
                raise QueryError(
                    "not_a_number", f"{where} is {shown}, a JSON {kind}: every value must be a JSON number"
                )
    return rows


def query_vectors(vector: Any, width: int, label: str) -> np.ndarray:
    """``vector`` (``[D]`` or ``[K, D]`` numbers) as a float32 ``[K, D]`` array of unit rows, or a
    :class:`QueryError` whose reason says what is wrong: ``not_a_number`` (a string, boolean or null where a
    number belongs), ``ragged_vector`` (rows of several lengths), ``too_many_rows``, ``width_mismatch``,
    ``not_finite`` (NaN or infinite values, or an integer beyond float range), ``zero_vector`` (a row of
    length 0: it has no direction, so every item would score 0)."""
    rows = _numbers(vector)
    if len(rows) > MAX_QUERY_ROWS:
        raise QueryError("too_many_rows", f"a query has at most {MAX_QUERY_ROWS} rows, got {len(rows)}")
    if len({len(row) for row in rows}) != 1 or not rows[0]:
        lengths = sorted({len(row) for row in rows})
        raise QueryError("ragged_vector", f"the vector's rows must be equally long and non-empty, got lengths {lengths}")
    try:
        query = np.asarray(rows, dtype=np.float64)
    except OverflowError:  # an integer literal beyond float64's range (10**400)
        raise QueryError("not_finite", "the vector holds a number beyond the float range") from None
    if query.shape[1] != width:
        raise QueryError(
            "width_mismatch",
            f"the index holds {width}-d embeddings of bundle {label!r}; got a query of shape {list(query.shape)}",
        )
    if not np.isfinite(query).all():
        raise QueryError("not_finite", "the vector holds NaN or infinite values")
    return unit_rows(query)


def unit_rows(query: np.ndarray) -> np.ndarray:
    """Finite float64 rows as float32 unit rows, whatever their scale: each row is divided by its largest
    absolute value first, so the sum of squares neither overflows (1e200: the norm would be inf and every
    score 0) nor underflows (1e-200: the norm would be 0, a row called all zeros)."""
    largest = np.abs(query).max(axis=1, keepdims=True)
    if (largest == 0).any():
        raise QueryError("zero_vector", "a row of the vector is all zeros: it has no direction to search")
    scaled = query / largest  # every value now in [-1, 1], one of them ±1: the norm is in [1, sqrt(D)]
    unit = scaled / np.linalg.norm(scaled, axis=1, keepdims=True)
    if not np.isfinite(unit).all():  # cannot happen for finite input; a NaN score must never reach a client
        raise QueryError("not_finite", "the vector could not be normalised")
    return unit.astype(np.float32)


class Searcher:
    """An index with the bundle it was built with (checked to match); queries are embedded on ``device``
    (default: the GPU when there is one)."""

    def __init__(self, index: GalleryIndex, bundle: Bundle, device: torch.device | None = None) -> None:
        index.check_bundle(bundle)
        self.index, self.bundle = index, bundle
        self.embedder = Embedder(bundle, device or pick_device())

    @classmethod
    def open(cls, index_path: Path, bundle_path: Path | None = None, device: torch.device | None = None) -> Searcher:
        index = GalleryIndex.open(index_path)
        return cls(index, load_bundle(bundle_path or index.bundle_path()), device)

    def _check(self, k: int, against: str) -> None:
        if not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise QueryError("bad_k", f"k must be an integer from 1 to {MAX_K}, got {k!r}")
        if against not in MODALITIES:
            raise QueryError("bad_against", f"against must be one of {list(MODALITIES)}, got {repr(against)[:40]}")
        if len(self.index.vectors[against]) == 0:
            other = "text" if against == "image" else "image"
            raise QueryError(
                "empty_modality", f"the index holds no {against}s to rank; search against={other} instead"
            )

    def _hits(self, found: list[tuple[int, float]]) -> list[Hit]:
        items = self.index.items
        return [
            Hit(
                rank=rank,
                item_id=str(items.at[position, "item_id"]),
                score=round(score, 6),
                text=items.at[position, "text"],
                path=str(items.at[position, "path"]),
                has_image=bool(items.at[position, "image_row"] >= 0),
            )
            for rank, (position, score) in enumerate(found, start=1)
        ]

    def by_text(self, text: str, k: int = 10, against: str = "image") -> list[Hit]:
        self._check(k, against)
        return self._hits(self.index.search(against, self.embedder.embed_query_text(text), k))

    def by_pixels(self, pixels: np.ndarray, k: int = 10, against: str = "text") -> list[Hit]:
        """``pixels``: one thumbnail uint8 ``[S, S, 3]`` as :meth:`Embedder.decode` gives it."""
        self._check(k, against)
        return self._hits(self.index.search(against, self.embedder.embed_pixels(pixels[None])[0], k))

    def by_image_file(self, path: Path, k: int = 10, against: str = "text") -> list[Hit]:
        return self.by_pixels(self.embedder.decode(path), k, against)

    def item_position(self, item_id: str) -> int:
        if item_id not in self.index.position_of:
            raise UnknownItem(f"no item {item_id!r} in the index ({len(self.index.items)} items)")
        return self.index.position_of[item_id]

    def by_item(self, item_id: str, k: int = 10, against: str | None = None) -> list[Hit]:
        position = self.item_position(item_id)
        row = self.index.items.loc[position]
        use = "image" if row["image_row"] >= 0 else "text"
        against = against or ("text" if use == "image" else "image")
        self._check(k, against)
        query = self.index.vectors[use][int(row[f"{use}_row"])]
        return self._hits(self.index.search(against, query, k, exclude_item=position))

    def by_vector(
        self, vector: list[float] | list[list[float]], k: int = 10, against: str = "image"
    ) -> list[Hit]:
        """A query embedding computed elsewhere (``[D]`` or ``[K, D]``, K <= :data:`MAX_QUERY_ROWS`); its width
        must be the index's, every value finite and every row of non-zero length."""
        self._check(k, against)
        query = query_vectors(vector, self.index.meta["bundle"]["width"], self.index.meta["bundle"]["label"])
        return self._hits(self.index.search(against, query, k))

    def thumbnail(self, item_id: str) -> np.ndarray:
        row = int(self.index.items.at[self.item_position(item_id), "image_row"])
        if row < 0:
            raise UnknownItem(f"item {item_id!r} has no image")
        return np.asarray(self.index.thumbnails[row])

    def summary(self) -> dict[str, Any]:
        meta = self.index.meta
        return {
            "items": len(self.index.items),
            "images": len(self.index.vectors["image"]),
            "texts": len(self.index.vectors["text"]),
            "model": meta["bundle"]["label"],
            "bundle_id": meta["bundle"]["bundle_id"],
            "width": meta["bundle"]["width"],
            "backbone": meta["bundle"]["backbone"],
            "search": {m: meta["search"][m]["backend"] for m in MODALITIES},
            "thumbnail_size": meta["thumbnail_size"],
        }
