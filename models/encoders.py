"""Two-stream encoders of Thomas & Kovashka §3.3: a torchvision ResNet for images and a GRU for text,
each followed by a linear projection to the joint space and L2 normalisation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

#: torchvision constructor name -> (weights enum name, pooled feature width)
BACKBONES: dict[str, tuple[str, int]] = {
    "resnet18": ("ResNet18_Weights", 512),
    "resnet34": ("ResNet34_Weights", 512),
    "resnet50": ("ResNet50_Weights", 2048),
    "resnet101": ("ResNet101_Weights", 2048),
}

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class EncoderConfig:
    backbone: str = "resnet50"
    pretrained: bool = True
    embed_dim: int = 256
    word_dim: int = 200
    gru_hidden: int = 512
    vocab_size: int = 2


def build_backbone(name: str, pretrained: bool) -> tuple[nn.Module, int, bool]:
    """A torchvision ResNet trunk with ``fc`` removed: (module, feature width, ImageNet weights loaded?).

    ImageNet weights are fetched by torchvision (cached under ``$TORCH_HOME``). When they cannot be had
    (offline, no cache) the trunk stays randomly initialised and a warning says so; nothing is faked.
    """
    import torchvision

    if name not in BACKBONES:
        raise KeyError(f"unknown backbone {name!r}; choose one of {sorted(BACKBONES)}")
    weights_enum_name, width = BACKBONES[name]
    constructor = getattr(torchvision.models, name)
    loaded = False
    model = None
    if pretrained:
        weights = getattr(torchvision.models, weights_enum_name).IMAGENET1K_V1
        try:
            model = constructor(weights=weights)
            loaded = True
        except Exception as error:  # noqa: BLE001 - any download/cache failure means: no weights
            warnings.warn(
                f"ImageNet weights for {name} could not be loaded ({type(error).__name__}: {error}); "
                f"the image trunk is RANDOMLY INITIALISED. Put the weights in $TORCH_HOME "
                f"(torchvision downloads them there when online) to train from ImageNet features.",
                RuntimeWarning,
                stacklevel=2,
            )
    if model is None:
        model = constructor(weights=None)
    model.fc = nn.Identity()
    return model, width, loaded


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


class ImageEncoder(nn.Module):
    """ResNet trunk -> global average pool -> linear -> L2 norm."""

    def __init__(self, backbone: str, pretrained: bool, embed_dim: int) -> None:
        super().__init__()
        self.trunk, self.feature_dim, self.pretrained_loaded = build_backbone(backbone, pretrained)
        self.project = xavier_linear(self.feature_dim, embed_dim)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def normalise_pixels(self, images: Tensor) -> Tensor:
        """uint8 ``[B, H, W, 3]`` or float ``[B, 3, H, W]`` in [0, 1] -> ImageNet-normalised float."""
        if images.dtype == torch.uint8:
            images = images.permute(0, 3, 1, 2).float().div_(255.0)
        return (images - self.mean) / self.std

    def feature_map(self, images: Tensor) -> Tensor:
        """``[B, C, h, w]`` map before pooling (7x7 at 224 px), for local-feature models such as PVSE."""
        t = self.trunk
        x = self.normalise_pixels(images)
        x = t.maxpool(t.relu(t.bn1(t.conv1(x))))
        return t.layer4(t.layer3(t.layer2(t.layer1(x))))

    def pooled_features(self, images: Tensor) -> Tensor:
        return self.feature_map(images).mean(dim=(2, 3))

    def forward(self, images: Tensor) -> Tensor:
        return F.normalize(self.project(self.pooled_features(images)), dim=-1)


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


class TextEncoder(nn.Module):
    """Word embeddings (initialised from dataset-trained vectors) -> GRU -> linear -> L2 norm."""

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        hidden: int,
        embed_dim: int,
        word_vectors: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.embedding = word_embedding(vocab_size, word_dim, word_vectors)
        self.gru = xavier_gru(word_dim, hidden, bidirectional=False)
        self.project = xavier_linear(hidden, embed_dim)

    def final_state(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(
            self.embedding(tokens), lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        _, hidden = self.gru(packed)
        return hidden[-1]

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return F.normalize(self.project(self.final_state(tokens, lengths)), dim=-1)


class VSEModel(nn.Module):
    """The paper's two-stream model; returns the embeddings the losses take by keyword."""

    def __init__(self, config: EncoderConfig, word_vectors: np.ndarray | None = None) -> None:
        super().__init__()
        self.config = config
        self.image_encoder = ImageEncoder(config.backbone, config.pretrained, config.embed_dim)
        self.text_encoder = TextEncoder(
            config.vocab_size, config.word_dim, config.gru_hidden, config.embed_dim, word_vectors
        )

    def encode_image(self, images: Tensor) -> Tensor:
        return self.image_encoder(images)

    def encode_text(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.text_encoder(tokens, lengths)

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor) -> dict[str, Tensor]:
        return {"image": self.encode_image(images), "text": self.encode_text(tokens, lengths)}


MODELS: dict[str, type[nn.Module]] = {"vse": VSEModel}


def register_model(name: str):
    """Class decorator: make a model selectable by name (``Variant.model``)."""

    def decorate(cls: type[nn.Module]) -> type[nn.Module]:
        MODELS[name] = cls
        return cls

    return decorate


def build_model(
    name: str, config: EncoderConfig, word_vectors: np.ndarray | None = None, **options
) -> nn.Module:
    if name == "pvse" and name not in MODELS:
        import models.pvse  # noqa: F401 - registers itself
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    return MODELS[name](config, word_vectors, **options)
