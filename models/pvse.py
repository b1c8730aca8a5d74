"""Polysemous Visual-Semantic Embedding (PVSE; Song & Soleymani, CVPR 2019), the model of the "PVSE" and
"PVSE+Ours" rows of Thomas & Kovashka Table 1.

Each modality gives K embeddings per instance instead of one. A global feature (image: average-pooled
ResNet map -> linear; text: final states of a bidirectional GRU -> linear) is combined with K
attention-pooled local features (image: the h x w cells of the ResNet map; text: the word embeddings)
by the PIE-Net (Polysemous Instance Embedding network):

    attention_k = softmax over positions of  w2_k . tanh(W1 x_n)           (K heads, Lin et al. 2017)
    residual_k  = dropout(sigmoid(W_fc  sum_n attention_kn x_n))
    embedding_k = l2norm(LayerNorm(global + residual_k))

The losses that use these K embeddings (multiple-instance similarity, diversity, MMD) are in
``models/losses/pvse_mil.py``. Reference code: github.com/yalesong/pvse (``model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.settings import between, check_declared, setting
from models.config import ModelConfig
from models.encoders import ImageEncoder, TextTower, xavier_linear
from models.losses.checks import value_checks_enabled
from models.registry import register_model

PieOutput = tuple[Tensor, Tensor, Tensor]  # (embeddings [B, K, D], residuals [B, K, D], attention [B, K, N])


class PolysemousInstanceEmbedding(nn.Module):
    """PIE-Net: K-head self-attention over local features, added as a gated residual to a global feature.

    ``forward(global_feature [B, D], local_features [B, N, C], padding_mask [B, N] | None)`` returns
    L2-normalised embeddings ``[B, K, D]``, the residuals ``[B, K, D]`` the diversity loss reads, and the
    attention ``[B, K, N]`` (each head sums to 1 over the unmasked positions; masked positions get 0).
    """

    def __init__(
        self, num_embeds: int, local_dim: int, embed_dim: int, hidden_dim: int, dropout: float
    ) -> None:
        super().__init__()
        if num_embeds < 1:
            raise ValueError(f"num_embeds must be >= 1 (PVSE uses 2 on COCO), got {num_embeds}")
        self.num_embeds = num_embeds
        self.attention_hidden = nn.Linear(local_dim, hidden_dim, bias=False)
        self.attention_heads = nn.Linear(hidden_dim, num_embeds, bias=False)
        nn.init.xavier_uniform_(self.attention_hidden.weight)
        nn.init.xavier_uniform_(self.attention_heads.weight)
        self.residual_project = xavier_linear(local_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(embed_dim)

    def attention(self, local_features: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """``[B, K, N]`` softmax over the N positions of ``w2 . tanh(W1 x)``; padded positions get exactly 0."""
        logits = self.attention_heads(torch.tanh(self.attention_hidden(local_features))).transpose(1, 2)
        if padding_mask is not None:
            # a read-back: with the losses' value checks (first training step only, never in a CUDA graph)
            if value_checks_enabled() and bool(padding_mask.all(dim=-1).any()):
                raise ValueError(
                    "a row of padding_mask masks every position; keep at least one (length >= 1)"
                )
            logits = logits.masked_fill(padding_mask.unsqueeze(1), float("-inf"))
        return torch.softmax(logits, dim=-1)

    def forward(
        self, global_feature: Tensor, local_features: Tensor, padding_mask: Tensor | None = None
    ) -> PieOutput:
        if local_features.dim() != 3 or global_feature.dim() != 2:
            raise ValueError(
                f"PIE-Net takes global [B, D] and local [B, N, C] features, got {tuple(global_feature.shape)} "
                f"and {tuple(local_features.shape)}; flatten a feature map to [B, h*w, C] first"
            )
        attention = self.attention(local_features, padding_mask)
        residual = self.dropout(torch.sigmoid(self.residual_project(attention @ local_features)))
        embeddings = F.normalize(self.layer_norm(global_feature.unsqueeze(1) + residual), dim=-1)
        return embeddings, residual, attention


class PvseImageEncoder(nn.Module):
    """ResNet trunk -> (global: average pool -> linear -> dropout) + PIE-Net over the h*w map cells.

    The trunk, pixel normalisation and global projection are those of ``ImageEncoder``; only the PIE-Net
    branch is new.
    """

    def __init__(self, config: ModelConfig, num_embeds: int, dropout: float) -> None:
        super().__init__()
        self.cnn = ImageEncoder(config)
        feature_dim = self.cnn.feature_dim
        self.dropout = nn.Dropout(dropout)
        self.pie = PolysemousInstanceEmbedding(
            num_embeds, feature_dim, config.embed_dim, max(feature_dim // 2, 1), dropout
        )

    def forward(self, images: Tensor) -> PieOutput:
        """Embeddings and residuals ``[B, K, D]`` and attention maps ``[B, K, h, w]``."""
        feature_map = self.cnn.feature_map(images)
        batch, _, height, width = feature_map.shape
        global_feature = self.dropout(self.cnn.project(feature_map.mean(dim=(2, 3))))
        local_features = feature_map.flatten(2).transpose(1, 2)  # [B, h*w, C]
        embeddings, residual, attention = self.pie(global_feature, local_features)
        return embeddings, residual, attention.view(batch, -1, height, width)


def text_padding_mask(lengths: Tensor, max_length: int) -> Tensor:
    """``[B, max_length]`` bool, True at padded positions (index >= length; an empty text keeps token 0)."""
    positions = torch.arange(max_length, device=lengths.device)
    return positions.unsqueeze(0) >= lengths.clamp(min=1).unsqueeze(1)


@dataclass(frozen=True)
class PvseOptions:
    """PVSE's options (a variant's ``model_options``), declared once."""

    num_embeds: int = setting(2, "K, the embeddings per image and per text (PVSE uses 2 on COCO)", between(1, 64, low_open=False))
    dropout: float = setting(
        0.1, "dropout of the global features, the word embeddings and PIE-Net's residuals", between(0, 1, low_open=False, high_open=True)
    )

    def __post_init__(self) -> None:
        check_declared(self)


class PvseTextEncoder(TextTower):
    """Word embeddings -> (global: bidirectional GRU final states -> linear -> dropout) + PIE-Net over the
    word embeddings with padded positions masked out of the attention."""

    def __init__(self, config: ModelConfig, options: PvseOptions, word_vectors: np.ndarray | None = None) -> None:
        super().__init__(config, word_vectors, bidirectional=True)
        self.dropout = nn.Dropout(options.dropout)
        word_dim = config.word_dim
        self.pie = PolysemousInstanceEmbedding(options.num_embeds, word_dim, config.embed_dim, max(word_dim // 2, 1), options.dropout)

    def forward(self, tokens: Tensor, lengths: Tensor) -> PieOutput:
        """Embeddings and residuals ``[B, K, D]`` and word attention ``[B, K, L]`` (0 on padding)."""
        if tokens.dim() != 2 or lengths.shape != tokens.shape[:1]:
            raise ValueError(
                f"tokens must be [B, L] and lengths [B], got {tuple(tokens.shape)} and {tuple(lengths.shape)}"
            )
        words = self.dropout(self.embedding(tokens))
        final_states = self.final_states(words, lengths)  # [2, B, H]
        global_feature = self.dropout(self.project(torch.cat([final_states[0], final_states[1]], dim=-1)))
        return self.pie(global_feature, words, text_padding_mask(lengths.to(tokens.device), tokens.shape[1]))


@register_model("pvse")
class PVSEModel(nn.Module):
    """PVSE two-stream model; ``forward`` returns the keywords the PVSE losses take.

    ``image``/``text`` are ``[B, K, D]`` L2-normalised; compare them with
    ``models.losses.pvse_mil.mil_similarity`` (max over the K x K embedding pairs), not a plain dot product.
    With ``num_embeds=1`` this is a single-embedding VSE model whose embedding is
    ``l2norm(LayerNorm(global + residual))`` and whose similarity is the plain dot product.
    """

    #: PIE-Net attends over the cells of the trunk's feature map, so a frozen trunk must cache the map
    needs_spatial_features = True
    options_class = PvseOptions

    def __init__(self, config: ModelConfig, word_vectors: np.ndarray | None = None, options: PvseOptions | None = None) -> None:
        super().__init__()
        options = options or PvseOptions()
        self.config = config
        self.num_embeds = options.num_embeds
        self.image_encoder = PvseImageEncoder(config, options.num_embeds, options.dropout)
        self.text_encoder = PvseTextEncoder(config, options, word_vectors)

    def encode_image(self, images: Tensor) -> Tensor:
        return self.image_encoder(images)[0]

    def encode_text(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.text_encoder(tokens, lengths)[0]

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        image, image_residual, image_attention = self.image_encoder(images)
        text, text_residual, text_attention = self.text_encoder(tokens, lengths)
        return {
            "image": image,
            "text": text,
            "image_residual": image_residual,
            "text_residual": text_residual,
            "image_attention": image_attention,
            "text_attention": text_attention,
        }
