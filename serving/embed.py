"""Embeddings of new images and texts with a loaded bundle, preprocessed exactly as in training: images
decoded and validated by ``data_recipes.validate.load_image_rgb``, cropped to the image cache's square
(``data_recipes.image_cache.centre_square``), resized to the trunk's input and normalised; texts tokenised by
``common.tokenizer``. Every embedding is ``float32 [N, K, D]`` (K = 1 except PVSE), L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from common.tokenizer import encode_texts, tokenize
from data_recipes.image_cache import centre_square
from data_recipes.validate import DEFAULT_MAX_PIXELS, load_image_rgb
from models.encoders import frozen_trunk_features, resize_batch
from serving.bundle import Bundle

BATCH_SIZE = 64


class QueryError(ValueError):
    """A query the model cannot answer (empty text, no known word, ...); ``reason`` is a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _per_item(embeddings: torch.Tensor) -> np.ndarray:
    """``[B, D]`` or ``[B, K, D]`` -> float32 ``[B, K, D]``."""
    if embeddings.dim() == 2:
        embeddings = embeddings.unsqueeze(1)
    return embeddings.float().cpu().numpy()


class Embedder:
    """Text and image embeddings of one bundle's model (CPU)."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        image = bundle.image
        self.cache_size = int(image["cache_size"])
        self.image_size = int(image["image_size"])
        self.spatial = image["features"] == "spatial"
        if bundle.trunk is not None:
            self.mean = torch.tensor(image["mean"]).view(1, 3, 1, 1)
            self.std = torch.tensor(image["std"]).view(1, 3, 1, 1)

    # ------------------------------------------------------------------ texts
    def query_tokens(self, text: str) -> list[str]:
        """The query's words, or a :class:`QueryError` when it is empty or the model knows none of them."""
        if not isinstance(text, str) or not text.strip():
            raise QueryError("empty_text", "the query text is empty; type a few words")
        words = tokenize(text)
        if not words:
            raise QueryError("no_words", f"the query {text!r} holds no words (only punctuation or symbols)")
        if all(word not in self.bundle.vocab for word in words):
            raise QueryError(
                "no_known_word",
                f"none of the words of {text!r} is in the model's vocabulary "
                f"({len(self.bundle.vocab)} words from its training texts); try other words",
            )
        return words

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Embeddings of gallery texts (unknown words become UNK, as in training)."""
        out = []
        starts = range(0, len(texts), BATCH_SIZE)
        for start in tqdm(starts, desc="texts", unit="batch", disable=not progress or None):
            chunk = texts[start : start + BATCH_SIZE]
            tokens, lengths = encode_texts(
                (tokenize(t) for t in chunk), self.bundle.vocab, int(self.bundle.text["max_tokens"])
            )
            width = int(lengths.max())
            out.append(
                _per_item(
                    self.bundle.model.encode_text(
                        torch.from_numpy(tokens[:, :width]), torch.from_numpy(lengths)
                    )
                )
            )
        return np.concatenate(out) if out else self.empty()

    def embed_query_text(self, text: str) -> np.ndarray:
        """``[K, D]`` embedding of a query; raises :class:`QueryError` for text the model cannot read."""
        self.query_tokens(text)
        return self.embed_texts([text])[0]

    # ------------------------------------------------------------------ images
    def decode(self, path: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
        """uint8 ``[S, S, 3]`` thumbnail of the image at ``path`` as the image cache holds it; raises
        ``data_recipes.validate.ImageRejected`` (with its reason) for a file that is not a usable image."""
        image = load_image_rgb(path, max_pixels=max_pixels, draft_size=self.cache_size)
        return centre_square(image, self.cache_size)

    @torch.no_grad()
    def embed_pixels(self, pixels: np.ndarray, progress: bool = False) -> np.ndarray:
        """Embeddings of image-cache thumbnails uint8 ``[N, S, S, 3]``."""
        out = []
        starts = range(0, len(pixels), BATCH_SIZE)
        for start in tqdm(starts, desc="images", unit="batch", disable=not progress or None):
            # a copy: the rows may be a read-only memory map, which torch must not wrap
            batch = resize_batch(
                torch.from_numpy(np.array(pixels[start : start + BATCH_SIZE])), self.image_size
            )
            if self.bundle.trunk is None:  # the model holds its trunk and normalises pixels itself
                out.append(_per_item(self.bundle.model.encode_image(batch)))
                continue
            features = frozen_trunk_features(self.bundle.trunk, batch, self.mean, self.std, self.spatial)
            out.append(_per_item(self.bundle.model.encode_image(features.float())))
        return np.concatenate(out) if out else self.empty()

    def empty(self) -> np.ndarray:
        per_item = int(self.bundle.manifest["embedding"]["per_item"])
        return np.zeros((0, per_item, self.bundle.width), dtype=np.float32)
