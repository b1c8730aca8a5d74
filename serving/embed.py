"""Embeddings of new images and texts with a loaded bundle, preprocessed exactly as in training: images
decoded and validated by ``data_recipes.validate.load_image_rgb``, cropped to the image cache's square
(``data_recipes.image_cache.centre_square``), resized to the trunk's input and normalised; texts tokenised by
``common.tokenizer`` (the version the bundle was trained with). Every embedding is ``float32 [N, K, D]`` (K = 1 except PVSE), L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from common.tokenizer import encode_texts, tokenizer_for
from data_recipes.image_cache import centre_square
from data_recipes.validate import DEFAULT_MAX_PIXELS, load_image_rgb
from models.config import trunk_mode
from models.encoders import frozen_trunk_features
from models.inference import embed_pairs
from models.registry import needs_spatial_features
from models.training import PairData
from serving.bundle import Bundle

BATCH_SIZE = 64


class QueryError(ValueError):
    """A query the model cannot answer (empty text, no known word, ...); ``reason`` is a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _per_item(embeddings: np.ndarray) -> np.ndarray:
    """``[B, D]`` or ``[B, K, D]`` -> float32 ``[B, K, D]``."""
    return embeddings[:, None, :] if embeddings.ndim == 2 else embeddings


class TrunkThenModel(nn.Module):
    """A bundle's model with its frozen trunk (or the trunk's stages under the model's trained ones) in front, so
    it takes pixels as a fine-tuned model does: the trunk's features are computed exactly as the
    ``TrunkFeatures`` cache the model trained on holds them."""

    def __init__(
        self, model: nn.Module, trunk: nn.Module, mean: Tensor, std: Tensor, spatial: bool, trained_stages: int = 0
    ) -> None:
        super().__init__()
        self.model, self.trunk, self.spatial, self.trained_stages = model, trunk, spatial, trained_stages
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def encode_image(self, pixels: Tensor) -> Tensor:
        features = frozen_trunk_features(self.trunk, pixels, self.mean, self.std, self.spatial, self.trained_stages)
        return self.model.encode_image(features.float())

    def encode_text(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.model.encode_text(tokens, lengths)


class Embedder:
    """Text and image embeddings of one bundle's model, through the one inference path
    (:func:`models.inference.embed_pairs`), on ``device`` (CPU by default; the commands pass
    :func:`models.devices.pick_device`)."""

    def __init__(self, bundle: Bundle, device: torch.device | None = None) -> None:
        self.bundle = bundle
        image = bundle.image
        self.cache_size = int(image["cache_size"])
        self.image_size = int(image["image_size"])
        self.device = device or torch.device("cpu")
        model = bundle.model
        if bundle.trunk is not None:
            mean = torch.tensor(image["mean"]).view(1, 3, 1, 1)
            std = torch.tensor(image["std"]).view(1, 3, 1, 1)
            trained_stages = trunk_mode(image["trunk"]).trained_stages or 0
            spatial = needs_spatial_features(bundle.manifest["model"]["model"])  # checked against image.features
            model = TrunkThenModel(model, bundle.trunk, mean, std, spatial, trained_stages)
        self.model = model.to(self.device).eval()
        #: the tokenizer the model was trained with (a bundle records its version)
        self.tokenize = tokenizer_for(bundle.tokenizer_version)

    # ------------------------------------------------------------------ texts
    def query_tokens(self, text: str) -> list[str]:
        """The query's words, or a :class:`QueryError` when it is empty or the model knows none of them."""
        if not isinstance(text, str) or not text.strip():
            raise QueryError("empty_text", "the query text is empty; type a few words")
        words = self.tokenize(text)
        # quoted in the error, cut short: a whole article (up to 1 MiB by POST) would be the message
        shown = repr(text) if len(text) <= 80 else repr(text[:80]) + "…"
        if not words:
            raise QueryError(
                "no_words",
                f"the query {shown} holds no word this model's tokenizer (version "
                f"{self.bundle.tokenizer_version}: letters and digits of any script) reads",
            )
        if all(word not in self.bundle.vocab for word in words):
            raise QueryError(
                "no_known_word",
                f"none of the words of {shown} is in the model's vocabulary "
                f"({len(self.bundle.vocab)} words from its training texts); try other words",
            )
        return words

    def embed_texts(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Embeddings of gallery texts (unknown words become UNK, as in training)."""
        if not len(texts):
            return self.empty()
        tokens, lengths = encode_texts(
            (self.tokenize(t) for t in texts), self.bundle.vocab, int(self.bundle.text["max_tokens"])
        )
        source = PairData.of_texts(tokens, lengths)
        return self._embed(source, len(texts), "text", progress)

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

    def embed_pixels(self, pixels: np.ndarray, progress: bool = False) -> np.ndarray:
        """Embeddings of image-cache thumbnails uint8 ``[N, S, S, 3]``."""
        if not len(pixels):
            return self.empty()
        return self._embed(PairData.of_pixels(pixels), len(pixels), "image", progress)

    def _embed(self, source: PairData, n: int, modality: str, progress: bool) -> np.ndarray:
        embedded = embed_pairs(
            self.model,
            self.device,
            source,
            np.arange(n),
            self.image_size,
            batch_size=BATCH_SIZE,
            modalities=(modality,),
            progress=None if progress else False,
        )
        return _per_item(embedded[modality])

    def empty(self) -> np.ndarray:
        per_item = int(self.bundle.manifest["embedding"]["per_item"])
        return np.zeros((0, per_item, self.bundle.width), dtype=np.float32)
