"""The paper's two-stream model (Thomas & Kovashka §3.3): one embedding per image and per text."""

from __future__ import annotations

import numpy as np
from torch import Tensor, nn

from models.config import ModelConfig
from models.encoders import ImageEncoder, TextEncoder
from models.registry import register_model


@register_model("vse")
class VSEModel(nn.Module):
    """The paper's two-stream model; returns the embeddings the losses take by keyword. It takes no options
    (``options``: ``models.registry.NoOptions``)."""

    #: trains on the trunk's pooled vector (a frozen trunk caches that, not the map)
    needs_spatial_features = False

    def __init__(self, config: ModelConfig, word_vectors: np.ndarray | None = None, options: object = None) -> None:
        super().__init__()
        self.config = config
        self.image_encoder = ImageEncoder(config)
        self.text_encoder = TextEncoder(config, word_vectors)

    def encode_image(self, images: Tensor) -> Tensor:
        return self.image_encoder(images)

    def encode_text(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.text_encoder(tokens, lengths)

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        return {"image": self.encode_image(images), "text": self.encode_text(tokens, lengths)}
