"""A trained model that describes itself: the construction record ``Train`` writes beside its checkpoints
(``model.json``), and the one loader that builds the model from that record alone.

Why a record and not the settings that made it: rebuilding a model from today's profile and code (as the
pipeline once did) is right only while nothing the architecture depends on has changed since; a record
written at training time is right forever, as vsepp keeps its ``opt`` in the checkpoint and timm keeps a
pretrained config beside the weights. Evaluate, COCOS, the search index, ``crossmodal export`` and bundle
loading all build a trained model through :func:`build_from_record` (and load a checkpoint through
:func:`load_trained`), so there is one model builder.

The record (``RECORD_FORMAT`` 1)::

    model, model_options   the registered model (models.registry) and its options
    encoder                EncoderConfig: backbone, embed_dim, word_dim, gru_hidden, vocab_size, trunk, feature_dim
    image                  the trunk's input side, pooled or spatial features, normalisation mean and std, and
                           for a frozen trunk how its cached features were made (pretrained, seed)
    text                   tokenizer version, max tokens, and the vocabulary: its file (relative to the folder
                           the record's reader names), size and SHA-256
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common.hashing import file_sha256
from models.backbones import build_trunk
from models.encoders import EncoderConfig
from models.registry import build_model, model_class
from models.settings import TRUNK_MODES

RECORD_FILE = "model.json"
RECORD_FORMAT = 1


class ModelRecordError(ValueError):
    """A construction record that is missing, of another format, or does not fit its checkpoint."""


@dataclass(frozen=True)
class ModelRecord:
    """Everything a trained model's network is built from (its weights come from a checkpoint)."""

    model: str
    model_options: dict[str, Any]
    encoder: EncoderConfig
    image_size: int
    #: "pooled" (a vector per image) or "spatial" (the trunk's map: PVSE attends over it)
    features: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    max_text_tokens: int
    tokenizer_version: int
    #: ``{"file", "size", "sha256"}`` of the vocabulary (token -> row of the word embedding)
    vocabulary: dict[str, Any]
    #: a frozen trunk's cached features: ``{"pretrained", "seed", "weights_loaded"}`` — asked for ImageNet
    #: weights, the seed of a random init, and whether the weights were there (a bundle must rebuild the same)
    frozen_trunk: dict[str, Any] | None = None
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["encoder"] = asdict(self.encoder)
        out["mean"], out["std"] = list(self.mean), list(self.std)
        return out

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> ModelRecord:
        if payload.get("format") != RECORD_FORMAT:
            raise ModelRecordError(
                f"model record format {payload.get('format')!r}; this version reads format {RECORD_FORMAT}: train the "
                "model again with this version"
            )
        encoder = EncoderConfig(**payload["encoder"])
        return cls(**{**payload, "encoder": encoder, "mean": tuple(payload["mean"]), "std": tuple(payload["std"])})


def record_for(
    model: str,
    model_options: dict[str, Any],
    encoder: EncoderConfig,
    *,
    image_size: int,
    max_text_tokens: int,
    tokenizer_version: int,
    vocabulary_file: Path,
    vocabulary_name: str,
    vocabulary_size: int,
    frozen_trunk_seed: int | None = None,
    frozen_trunk_weights_loaded: bool | None = None,
) -> ModelRecord:
    """The record of a model about to be trained with these settings (its normalisation read off its trunk)."""
    mean, std = trunk_normalisation(encoder.backbone)
    spatial = bool(getattr(model_class(model), "needs_spatial_features", False))
    return ModelRecord(
        model=model,
        model_options=dict(model_options),
        encoder=encoder,
        image_size=image_size,
        features="spatial" if spatial else "pooled",
        mean=mean,
        std=std,
        max_text_tokens=max_text_tokens,
        tokenizer_version=tokenizer_version,
        vocabulary={"file": vocabulary_name, "size": vocabulary_size, "sha256": file_sha256(vocabulary_file)},
        frozen_trunk=(
            {"pretrained": encoder.pretrained, "seed": frozen_trunk_seed, "weights_loaded": frozen_trunk_weights_loaded}
            if TRUNK_MODES.get(encoder.trunk).cached_features
            else None
        ),
    )


def trunk_normalisation(backbone: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The pixel mean and std a trunk expects (read off a trunk built without downloading weights)."""
    trunk = build_trunk(backbone, False)
    return tuple(trunk.mean), tuple(trunk.std)


def write_record(record: ModelRecord, path: Path) -> None:
    Path(path).write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")


def read_record(path: Path) -> ModelRecord:
    path = Path(path)
    if not path.is_file():
        raise ModelRecordError(f"{path} is missing: the folder holds no trained model of this version (train it again)")
    try:
        return ModelRecord.from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as error:
        raise ModelRecordError(f"{path} is not a model record ({type(error).__name__}: {error})") from None


def build_from_record(record: ModelRecord, *, initial_word_vectors: np.ndarray | None = None, for_training: bool = False) -> nn.Module:
    """The model's network as the record describes it. To load a checkpoint or a bundle (the default) every
    weight is still to be set: no ImageNet download, no word vectors. ``for_training``: the first weights of a
    training run, the trunk's ImageNet weights when the record asks for them and the word embedding from
    ``initial_word_vectors``."""
    config = EncoderConfig(**{**asdict(record.encoder), "pretrained": record.encoder.pretrained and for_training})
    return build_model(record.model, config, initial_word_vectors if for_training else None, **record.model_options)


def load_trained(record: ModelRecord, checkpoint: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, int]:
    """The model of ``record`` with the weights of ``checkpoint`` (``{"epoch", "model"}``), in eval mode on
    ``device``, and the checkpoint's epoch."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model = build_from_record(record)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise ModelRecordError(f"{checkpoint} does not fit its model record: {str(error).splitlines()[0]}") from None
    return model.to(device).eval(), int(state.get("epoch", -1))
