"""A search index of a gallery: one folder with the items, their image and text embeddings (kept apart: an
item may have an image, a text or both), the thumbnails the page shows and a nearest-neighbor structure per
modality.

Layout (``INDEX_FORMAT_VERSION`` 1)::

    index.json           format, the bundle it was built with (id, width, backbone, ...), counts, the search
                         backend of each modality and why, what each ``crossmodal index`` call added
    items.parquet        item_id, path, text (None: image only), image_row, text_row (-1: none)
    image_vectors.npy    float32 [n_images, K, D]      text_vectors.npy   float32 [n_texts, K, D]
    thumbnails.npy       uint8 [n_images, S, S, 3]     rejects.csv        every row skipped, with its reason
    image.pq / text.pq       faiss 4-bit PQ codes + float vectors for the re-rank, for a modality above the
                             exact-search crossover (or asked for)
    image.hnsw / text.hnsw   faiss HNSW graphs, where ``backend`` asks for HNSW
    image.ann / text.ann     Annoy forests, where ``backend`` asks for Annoy

``index.json`` records the backend asked for (``auto``, ``exact``, ``annoy``, ``hnsw``, ``pq``; an index written
before this field is ``auto``) and, per modality, the one used with its settings. Indexes grow:
:meth:`GalleryIndex.add` appends new items' embeddings to the stored ones (old items are never embedded again)
and rebuilds only the codes, graph or forest, which are built for a fixed set of vectors.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common.bounded_json import RECORD, BoundedJsonError, read_bounded
from common.files import atomic_path, native_write
from serving.backends import APPROXIMATE_BACKENDS, SearchBackend, choose_backend
from serving.bundle import Bundle, BundleError
from serving.embed import Embedder
from serving.gallery import GalleryBatch
from serving.neighbors import EXACT_SEARCH_MAX_VECTORS, ExactSearch

INDEX_FORMAT = "crossmodal-index"
INDEX_FORMAT_VERSION = 1
INDEX_FILE = "index.json"
MODALITIES = ("image", "text")


class GalleryIndexError(ValueError):
    """An index that cannot be used (missing, another format version, inconsistent files)."""


def _save_array(path: Path, array: np.ndarray) -> None:
    # numpy writes the data with C's fwrite: a full disk is "OSError: N requested and M written", no errno;
    # native_write turns it into the ENOSPC error naming the file that a Python write gives
    with atomic_path(path) as tmp, native_write(path), open(tmp, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _damaged(path: Path, name: str, what: str) -> GalleryIndexError:
    return GalleryIndexError(
        f"{path}: {name} is {what}: the index is damaged; rebuild it with `crossmodal index` into a new folder"
    )


def _index_files(meta: dict[str, Any]) -> list[str]:
    """The files an index's last write left, by its ``index.json`` (``index.json`` itself aside)."""
    names = ["items.parquet", "thumbnails.npy", "rejects.csv", *(f"{m}_vectors.npy" for m in MODALITIES)]
    for modality, settings in meta.get("search", {}).items():
        spec = APPROXIMATE_BACKENDS.get(settings.get("backend"))
        if spec is not None:
            names.append(f"{modality}.{spec.suffix}")
    return names


def _check_recorded_files(path: Path, meta: dict[str, Any]) -> None:
    """Every file ``index.json`` recorded is there with its recorded size (indexes written before sizes were
    recorded are checked by their counts alone, in :meth:`GalleryIndex.open`)."""
    recorded = meta.get("files")
    if not isinstance(recorded, dict):
        return
    for name, size in recorded.items():
        file = path / name
        if not file.is_file():
            raise _damaged(path, name, "missing")
        actual = file.stat().st_size
        if actual != size:
            raise _damaged(path, name, f"{actual:,} bytes where the index recorded {size:,} (cut off or replaced)")


class GalleryIndex:
    """A loaded index; :meth:`search` answers with item positions and cosine scores."""

    def __init__(
        self,
        path: Path,
        meta: dict[str, Any],
        items: pd.DataFrame,
        vectors: dict[str, np.ndarray],
        thumbnails: np.ndarray,
        rejects: pd.DataFrame,
    ) -> None:
        self.path, self.meta, self.items = Path(path), meta, items
        self.vectors, self.thumbnails, self.rejects = vectors, thumbnails, rejects
        self.position_of = {item_id: position for position, item_id in enumerate(items["item_id"])}
        self._backends: dict[str, SearchBackend] = {}
        self._row_items: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(
        cls, path: Path, bundle: Bundle, exact_up_to: int = EXACT_SEARCH_MAX_VECTORS, backend: str = "auto"
    ) -> GalleryIndex:
        """A new, empty index for ``bundle``'s embeddings, searched with ``backend``; ``auto``: a modality with
        more than ``exact_up_to`` vectors is searched with HNSW (the default is the crossover measured by
        benchmarks/bench_search.py --backends), one with fewer exactly."""
        choose_backend(0, exact_up_to, backend)  # an unknown backend fails here, before any file is written
        path = Path(path)
        if (path / INDEX_FILE).exists():
            raise FileExistsError(f"{path} already holds an index; open it to add items")
        path.mkdir(parents=True, exist_ok=True)
        per_item, width, size = (
            int(bundle.manifest["embedding"]["per_item"]),
            bundle.width,
            int(bundle.image["cache_size"]),
        )
        meta = {
            "format": INDEX_FORMAT,
            "format_version": INDEX_FORMAT_VERSION,
            "bundle": bundle.identity(),
            # relative when it can be: an index and its bundle moved together keep working
            "bundle_path": os.path.relpath(bundle.path.resolve(), path.resolve()),
            "thumbnail_size": size,
            "exact_up_to": exact_up_to,
            "backend": backend,
            "search": {},
            "history": [],
        }
        empty = {m: np.zeros((0, per_item, width), dtype=np.float32) for m in MODALITIES}
        items = pd.DataFrame({"item_id": [], "path": [], "text": [], "image_row": [], "text_row": []})
        items = items.astype(
            {"item_id": object, "path": object, "text": object, "image_row": "int64", "text_row": "int64"}
        )
        rejects = pd.DataFrame(columns=["pair_id", "reason", "detail"])
        return cls(path, meta, items, empty, np.zeros((0, size, size, 3), dtype=np.uint8), rejects)

    @classmethod
    def open(cls, path: Path) -> GalleryIndex:
        """Open the index at ``path``, checking before anything is searched that every file it recorded is
        there, whole (the sizes ``index.json`` recorded at the last write) and readable; a damaged index is
        one :class:`GalleryIndexError` naming the file and saying to rebuild it."""
        path = Path(path)
        if not (path / INDEX_FILE).is_file():
            raise GalleryIndexError(
                f"{path} is not a search index (no {INDEX_FILE}); build one with `crossmodal index`"
            )
        try:
            meta = read_bounded(path / INDEX_FILE, RECORD)
        except BoundedJsonError as error:
            detail = error.detail
            raise _damaged(path, INDEX_FILE, detail[3:] if detail.startswith("is ") else f"JSON that {detail}") from None
        if not isinstance(meta, dict):
            raise _damaged(path, INDEX_FILE, "not a JSON object")
        if meta.get("format") != INDEX_FORMAT or meta.get("format_version") != INDEX_FORMAT_VERSION:
            raise GalleryIndexError(
                f"{path} is index format {meta.get('format')} version {meta.get('format_version')}; this version "
                f"of crossmodal reads {INDEX_FORMAT} version {INDEX_FORMAT_VERSION}: index the gallery again"
            )
        _check_recorded_files(path, meta)
        try:
            items = pd.read_parquet(path / "items.parquet")
            items["text"] = items["text"].astype(object).where(items["text"].notna(), None)
            vectors = {m: np.load(path / f"{m}_vectors.npy") for m in MODALITIES}
            thumbnails = np.load(path / "thumbnails.npy", mmap_mode="r")
            rejects = pd.read_csv(path / "rejects.csv", dtype=str, keep_default_na=False)
        except FileNotFoundError as error:
            raise _damaged(path, Path(error.filename or "a file").name, "missing") from None
        except (OSError, ValueError, EOFError, KeyError) as error:
            raise _damaged(
                path, "one of its files", f"unreadable ({type(error).__name__}: {error})"
            ) from None
        index = cls(path, meta, items, vectors, thumbnails, rejects)
        counts = {"image": int((items["image_row"] >= 0).sum()), "text": int((items["text_row"] >= 0).sum())}
        if any(len(vectors[m]) != counts[m] for m in MODALITIES) or len(thumbnails) != counts["image"]:
            raise GalleryIndexError(
                f"{path}: the items and the stored vectors disagree (a write was cut off?); index again"
            )
        return index

    def load_backends(self) -> None:
        """Read every modality's search structure now (a server checks them before it listens)."""
        for modality in MODALITIES:
            if len(self.vectors[modality]):
                self.backend(modality)

    def bundle_path(self) -> Path:
        return (self.path / self.meta["bundle_path"]).resolve()

    def check_bundle(self, bundle: Bundle) -> None:
        """A :class:`BundleError` when ``bundle`` is not the one this index was built with (its vectors and
        the bundle's queries would not be comparable), naming what differs."""
        recorded, offered = self.meta["bundle"], bundle.identity()
        if recorded["bundle_id"] == offered["bundle_id"]:
            return
        differ = [
            f"{key} {recorded[key]} != {offered[key]}"
            for key in ("width", "backbone", "trunk", "per_item", "label")
            if recorded[key] != offered[key]
        ]
        raise BundleError(
            f"bundle {bundle.path} ({offered['bundle_id']}) is not the one index {self.path} was built with "
            f"({recorded['bundle_id']}): {'; '.join(differ) or 'other weights'}. Use that bundle or index again"
        )

    # ------------------------------------------------------------------ growing
    def add(
        self, batch: GalleryBatch, image_vectors: np.ndarray, text_vectors: np.ndarray, source: str
    ) -> dict[str, Any]:
        """Append ``batch``'s items with their embeddings (images in item order, texts in item order of the
        items that have one), rebuild the search structures and write everything."""
        items = batch.items
        has_text = items["text"].notna().to_numpy()
        has_image = items["has_image"].to_numpy(dtype=bool)
        if len(image_vectors) != has_image.sum() or len(text_vectors) != has_text.sum():
            raise ValueError(
                "one image embedding per item with an image and one text embedding per text, please"
            )
        image_rows = np.full(len(items), -1, dtype=np.int64)
        image_rows[has_image] = len(self.vectors["image"]) + np.arange(has_image.sum())
        text_rows = np.full(len(items), -1, dtype=np.int64)
        text_rows[has_text] = len(self.vectors["text"]) + np.arange(has_text.sum())
        new = pd.DataFrame(
            {
                "item_id": items["item_id"].astype(object),
                "path": items["path"].astype(object),
                "text": items["text"].astype(object),
                "image_row": image_rows,
                "text_row": text_rows,
            }
        )
        self.items = pd.concat([self.items, new], ignore_index=True) if len(self.items) else new
        self.position_of = {item_id: position for position, item_id in enumerate(self.items["item_id"])}
        self.vectors = {
            "image": np.concatenate([self.vectors["image"], image_vectors.astype(np.float32)]),
            "text": np.concatenate([self.vectors["text"], text_vectors.astype(np.float32)]),
        }
        self.thumbnails = np.concatenate([np.asarray(self.thumbnails), batch.pixels])
        self.rejects = (
            pd.concat([self.rejects, batch.rejects], ignore_index=True)
            if len(self.rejects)
            else batch.rejects
        )
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "source": source,
            "added": len(items),
            **{k: v for k, v in batch.stats.items() if k != "image_cache"},
        }
        self.meta["history"].append(entry)
        self._write()
        return entry

    def use_backend(self, backend: str) -> None:
        """Search with ``backend`` from the next write on (``crossmodal index --backend`` on an existing index)."""
        choose_backend(0, self.meta["exact_up_to"], backend)
        self.meta["backend"] = backend

    def _write(self) -> None:
        self._backends, self._row_items = {}, {}
        for modality in MODALITIES:
            vectors = self.vectors[modality]
            asked = self.meta["backend"]
            backend = choose_backend(vectors.shape[0] * vectors.shape[1], self.meta["exact_up_to"], asked)
            settings: dict[str, Any] = {
                "backend": backend,
                "asked": asked,
                "vectors": int(vectors.shape[0] * vectors.shape[1]),
                "exact_up_to": self.meta["exact_up_to"],
            }
            if backend in APPROXIMATE_BACKENDS:
                with atomic_path(self.path / f"{modality}.{APPROXIMATE_BACKENDS[backend].suffix}") as tmp:
                    settings.update(APPROXIMATE_BACKENDS[backend].build(vectors, tmp).settings())
            for other, spec in APPROXIMATE_BACKENDS.items():
                if other != backend and (self.path / f"{modality}.{spec.suffix}").exists():
                    (self.path / f"{modality}.{spec.suffix}").unlink()
            self.meta["search"][modality] = settings
            _save_array(self.path / f"{modality}_vectors.npy", vectors)
        _save_array(self.path / "thumbnails.npy", self.thumbnails)
        with atomic_path(self.path / "items.parquet") as tmp, native_write(self.path / "items.parquet"):
            self.items.to_parquet(tmp, index=False)  # pyarrow's C++ writer: as numpy's
        _write_text(self.path / "rejects.csv", self.rejects.to_csv(index=False))
        self.meta.update(
            {
                "items": len(self.items),
                "images": len(self.vectors["image"]),
                "texts": len(self.vectors["text"]),
                # what open() checks: a file cut off or replaced since this write is refused there
                "files": {
                    name: (self.path / name).stat().st_size for name in sorted(_index_files(self.meta))
                },
            }
        )
        # written last: an index whose counts disagree with its files was cut off mid-write (open() says so)
        _write_text(self.path / INDEX_FILE, json.dumps(self.meta, indent=2, sort_keys=True) + "\n")

    # ------------------------------------------------------------------ searching
    def backend(self, modality: str) -> SearchBackend:
        if modality not in self._backends:
            vectors = self.vectors[modality]
            settings = self.meta["search"][modality]
            spec = APPROXIMATE_BACKENDS.get(settings["backend"])
            if spec is None:
                self._backends[modality] = ExactSearch(vectors)
            else:
                n, per_item, width = vectors.shape
                path = self.path / f"{modality}.{spec.suffix}"
                try:
                    self._backends[modality] = spec.load(
                        path, n, per_item, width, settings[spec.search_setting]
                    )
                except (OSError, RuntimeError, ValueError, EOFError) as error:
                    raise _damaged(
                        self.path, path.name, f"unreadable ({type(error).__name__}: {error})"
                    ) from None
        return self._backends[modality]

    def rows_to_items(self, modality: str) -> np.ndarray:
        """Item position of each stored vector row of ``modality``."""
        if modality not in self._row_items:
            column = self.items[f"{modality}_row"].to_numpy()
            positions = np.flatnonzero(column >= 0)
            out = np.empty(len(positions), dtype=np.int64)
            out[column[positions]] = positions
            self._row_items[modality] = out
        return self._row_items[modality]

    def search(
        self, against: str, query: np.ndarray, k: int, exclude_item: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` items whose ``against`` embedding is nearest ``query`` (``[K, D]``): (position, cosine)."""
        if query.shape[-1] != self.meta["bundle"]["width"]:
            raise BundleError(
                f"query embedding width {query.shape[-1]} != the index's {self.meta['bundle']['width']}"
            )
        exclude = []
        if exclude_item is not None and self.items.at[exclude_item, f"{against}_row"] >= 0:
            exclude = [int(self.items.at[exclude_item, f"{against}_row"])]
        rows, scores = self.backend(against).search(query, k, exclude)
        to_item = self.rows_to_items(against)
        return [(int(to_item[row]), float(score)) for row, score in zip(rows, scores, strict=True)]


def embed_into(
    index: GalleryIndex, embedder: Embedder, batch: GalleryBatch, source: str, progress: bool = False
) -> dict[str, Any]:
    """Embed ``batch``'s images and texts with ``embedder`` and add them to ``index`` (only these are embedded)."""
    image_vectors = embedder.embed_pixels(batch.pixels, progress=progress)
    text_vectors = embedder.embed_texts(batch.items["text"].dropna().tolist(), progress=progress)
    return index.add(batch, image_vectors, text_vectors, source)
