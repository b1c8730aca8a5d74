"""The layers the models share (Thomas & Kovashka §3.3): an image tower over a trunk of models/backbones.py (or
its cached features) and a GRU text tower, each followed by a linear projection to the joint space and L2
normalisation; the models that combine them are in models/vse.py and models/pvse.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from models.backbones import build_trunk
from models.config import ModelConfig
from models.recurrent import fixed_width_final_states, gru_final_states


def xavier_linear(in_features: int, out_features: int) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def resize_batch(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> uint8 [B, size, size, 3] (no-op when the cache already has that size)."""
    if images.shape[1] == size and images.shape[2] == size:
        return images
    as_float = images.permute(0, 3, 1, 2).float()
    resized = F.interpolate(as_float, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def normalised_pixels(images: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """uint8 ``[B, H, W, 3]`` or float ``[B, 3, H, W]`` in [0, 1] -> float ``[B, 3, H, W]`` normalised with the
    trunk's ``mean`` / ``std`` (``[1, 3, 1, 1]``), as its weights expect."""
    if images.dtype == torch.uint8:
        images = images.permute(0, 3, 1, 2).float().div_(255.0)
    return (images - mean) / std


def frozen_trunk_features(
    trunk: nn.Module, pixels: Tensor, mean: Tensor, std: Tensor, spatial: bool, trained_stages: int = 0
) -> Tensor:
    """What a model over a cached trunk takes for uint8 ``[B, S, S, 3]`` pixels (already at the trunk's input
    size) — the form the ``TrunkFeatures`` cache stores and a bundle computes: with ``trained_stages`` k >= 1 the
    float32 map under the trunk's top k stages (the model trains those); else the whole trunk's feature map in
    half precision when ``spatial`` (PVSE attends over its cells), or its spatial mean ``float32 [B, C]``."""
    # channels_last: measured 1.4-2.3x faster EfficientNet-Lite0 inference on CPU (same numbers)
    normalised = normalised_pixels(pixels, mean, std).contiguous(memory_format=torch.channels_last)
    if trained_stages:
        return trunk.below(normalised, trained_stages).float().contiguous()
    feature_map = trunk(normalised)
    return feature_map.half() if spatial else feature_map.mean(dim=(2, 3))


class ImageEncoder(nn.Module):
    """Image trunk -> global average pool -> linear -> L2 norm.

    How much of the trunk the model holds follows the config's trunk mode (:class:`models.config.TrunkMode`): all of it,
    taking pixels (``finetune``); none of it (``frozen``: inputs are its cached features, computed once per
    dataset, backbone and resolution by the ``TrunkFeatures`` task, as VSE++ and PVSE train on precomputed
    features, and only the projection and what a model adds on top train); or its top k stages and head
    (``top<k>``: inputs are the cached map under them, and those stages train from their ImageNet weights).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        mode = config.trunk_mode
        #: pixels (the whole trunk trains), not the trunk's cached output (its features, or the map under its
        #: trained stages)
        self.takes_pixels = not mode.cached_features
        #: BatchNorm layers of the trained trunk part use their running statistics in training too
        #: (``train.trunk_batchnorm="frozen"``; set by the model's builder)
        self.frozen_batchnorm = False
        if not mode.trains_trunk:
            self.trunk = None
            self.feature_dim = config.feature_dim  # a frozen config has it (ModelConfig's own check)
            #: frozen features record whether they came from ImageNet weights; the task reports that
            self.pretrained_loaded = False
        else:
            whole = build_trunk(config.backbone, config.pretrained)
            self.feature_dim = whole.feature_dim
            self.pretrained_loaded = whole.pretrained_loaded
            #: where the trained part's starting weights came from (``{"file", "sha256"}`` when known)
            self.weights_source = whole.weights_source
            if mode.trained_stages is None:
                self.trunk = whole
                self.register_buffer("mean", torch.tensor(whole.mean).view(1, 3, 1, 1), persistent=False)
                self.register_buffer("std", torch.tensor(whole.std).view(1, 3, 1, 1), persistent=False)
            else:
                # only the top stages and head are kept: the stages under them run once, into the cache
                self.trunk = whole.top(mode.trained_stages)
        self.project = xavier_linear(self.feature_dim, config.embed_dim)

    def train(self, mode: bool = True) -> ImageEncoder:
        super().train(mode)
        if mode and self.frozen_batchnorm and self.trunk is not None:
            for module in self.trunk.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
        return self

    def normalise_pixels(self, images: Tensor) -> Tensor:
        return normalised_pixels(images, self.mean, self.std)

    def feature_map(self, images: Tensor) -> Tensor:
        """``[B, C, h, w]`` map before pooling (7x7 at 224 px), for local-feature models such as PVSE."""
        if self.takes_pixels:
            return self.trunk(self.normalise_pixels(images))
        if images.dim() != 4:
            raise ValueError(
                f"a cached trunk gives feature maps [B, C, h, w] here, got {tuple(images.shape)}: "
                "cache spatial features (TrunkFeatures with spatial=True) for this model"
            )
        return images if self.trunk is None else self.trunk(images)

    def pooled_features(self, images: Tensor) -> Tensor:
        if self.trunk is None and images.dim() == 2:
            return images
        return self.feature_map(images).mean(dim=(2, 3))

    def forward(self, images: Tensor) -> Tensor:
        return F.normalize(self.project(self.pooled_features(images)), dim=-1)

    def trunk_parameters(self) -> list[nn.Parameter]:
        """The parameters of the trained trunk part (none when frozen)."""
        return [] if self.trunk is None else list(self.trunk.parameters())


def word_embedding(vocab_size: int, word_dim: int, word_vectors: np.ndarray | None) -> nn.Embedding:
    """Embedding table initialised from dataset-trained word vectors (Xavier without them); row 0 = padding."""
    embedding = nn.Embedding(vocab_size, word_dim, padding_idx=0)
    if word_vectors is not None:
        if word_vectors.shape != (vocab_size, word_dim):
            raise ValueError(
                f"word_vectors shape {word_vectors.shape} != (vocab_size, word_dim) = {(vocab_size, word_dim)}"
            )
        with torch.no_grad():
            embedding.weight.copy_(torch.from_numpy(np.asarray(word_vectors, dtype=np.float32)))
    else:
        nn.init.xavier_uniform_(embedding.weight)
    with torch.no_grad():
        embedding.weight[0].zero_()
    return embedding


def xavier_gru(input_size: int, hidden: int, bidirectional: bool) -> nn.GRU:
    """A batch-first GRU with Xavier weights and zero biases (paper §3.3: Xavier init of new layers)."""
    gru = nn.GRU(input_size, hidden, batch_first=True, bidirectional=bidirectional)
    for param_name, param in gru.named_parameters():
        if "weight" in param_name:
            nn.init.xavier_uniform_(param)
        else:
            nn.init.zeros_(param)
    return gru


class TextTower(nn.Module):
    """What the text encoders share: word embeddings (initialised from dataset-trained vectors), a GRU over them
    (one direction, or both for PVSE) and a linear projection of its final states to the joint space."""

    #: set by ``models.recurrent.fixed_width_text``: final states without packing (the CUDA-graph step)
    fixed_width = False

    def __init__(self, config: ModelConfig, word_vectors: np.ndarray | None, *, bidirectional: bool) -> None:
        super().__init__()
        self.embedding = word_embedding(config.vocab_size, config.word_dim, word_vectors)
        self.gru = xavier_gru(config.word_dim, config.gru_hidden, bidirectional=bidirectional)
        self.project = xavier_linear((2 if bidirectional else 1) * config.gru_hidden, config.embed_dim)

    def final_states(self, words: Tensor, lengths: Tensor) -> Tensor:
        """``[directions, B, H]``: the GRU's final states of the padded ``words`` (an empty text keeps one token),
        forward's last step and, bidirectional, backward's first."""
        lengths = lengths.clamp(min=1)
        if self.fixed_width:
            return fixed_width_final_states(self.gru, words, lengths)
        return gru_final_states(self.gru, pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False))


class TextEncoder(TextTower):
    """Word embeddings -> GRU -> linear -> L2 norm."""

    def __init__(self, config: ModelConfig, word_vectors: np.ndarray | None = None) -> None:
        super().__init__(config, word_vectors, bidirectional=False)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return F.normalize(self.project(self.final_states(self.embedding(tokens), lengths)[-1]), dim=-1)
