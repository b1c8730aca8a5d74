"""Queries against an index: by text, by image, by an item of the index, or by a ready embedding.

What a query is compared with (``against``): by default the other modality, what the model was trained to
match and what the index is for ("which of our photos fit this article?" and back): a text query ranks the
items' images, an image query their texts. ``against`` picks the same modality instead (text -> texts,
image -> images). A query by item uses the item's image when it has one, else its text, and leaves the item
itself out of a same-modality ranking.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

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


def query_vectors(vector: Any, width: int, label: str) -> np.ndarray:
    """``vector`` (``[D]`` or ``[K, D]`` numbers) as a float32 ``[K, D]`` array of unit rows, or a
    :class:`QueryError` whose reason says what is wrong: ``ragged_vector`` (rows of several lengths, or not numbers), ``too_many_rows``,
    ``width_mismatch``, ``not_finite`` (NaN or infinite values), ``zero_vector`` (a row of length 0: it has
    no direction, so every item would score 0)."""
    try:
        query = np.asarray(vector, dtype=np.float64)
    except (ValueError, TypeError):
        raise QueryError(
            "ragged_vector", "the vector must be a list of numbers or a list of equally long lists of numbers"
        ) from None
    query = np.atleast_2d(query)
    if query.ndim != 2 or query.size == 0:
        raise QueryError(
            "ragged_vector", f"the vector must be [D] or [K, D] numbers, got shape {list(query.shape)}"
        )
    if len(query) > MAX_QUERY_ROWS:
        raise QueryError("too_many_rows", f"a query has at most {MAX_QUERY_ROWS} rows, got {len(query)}")
    if query.shape[1] != width:
        raise QueryError(
            "width_mismatch",
            f"the index holds {width}-d embeddings of bundle {label!r}; got a query of shape {list(query.shape)}",
        )
    if not np.isfinite(query).all():
        raise QueryError("not_finite", "the vector holds NaN or infinite values")
    if (np.linalg.norm(query, axis=1) == 0).any():
        raise QueryError("zero_vector", "a row of the vector is all zeros: it has no direction to search")
    # normalised in float64: a tiny but non-zero row would underflow in float32
    return (query / np.linalg.norm(query, axis=1, keepdims=True)).astype(np.float32)


class Searcher:
    """An index with the bundle it was built with (checked to match)."""

    def __init__(self, index: GalleryIndex, bundle: Bundle) -> None:
        index.check_bundle(bundle)
        self.index, self.bundle, self.embedder = index, bundle, Embedder(bundle)

    @classmethod
    def open(cls, index_path: Path, bundle_path: Path | None = None) -> Searcher:
        index = GalleryIndex.open(index_path)
        return cls(index, load_bundle(bundle_path or index.bundle_path()))

    def _check(self, k: int, against: str) -> None:
        if not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise QueryError("bad_k", f"k must be an integer from 1 to {MAX_K}, got {k!r}")
        if against not in MODALITIES:
            raise QueryError("bad_against", f"against must be one of {list(MODALITIES)}, got {against!r}")
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
