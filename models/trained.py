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
                           for a cached trunk how its cached features were made (pretrained, seed, weights file)
    trunk_training         for a trunk that trains (its top stages, or all of it): which stages, their starting
                           weights, BatchNorm, learning-rate scale and augmentation (absent for a frozen trunk)
    text                   tokenizer version, max tokens, and the vocabulary: its file (relative to the folder
                           the record's reader names), size and SHA-256
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common.hashing import file_sha256
from models.backbones import build_trunk
from models.encoders import EncoderConfig
from models.registry import build_model, model_class
from models.settings import BATCHNORM_MODES, TrainSettings, trunk_mode

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
    #: a cached trunk's features (frozen, or the map under its trained top stages): ``{"pretrained", "seed",
    #: "weights_loaded", "weights"}`` — asked for ImageNet weights, the seed of a random init, whether the weights
    #: were there (a bundle must rebuild the same) and the file they came from (``{"file", "sha256"}``, when known)
    frozen_trunk: dict[str, Any] | None = None
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)
    #: a trunk that trains: ``{"trained_stages", "stages", "starting_weights", "batchnorm",
    #: "learning_rate_scale", "horizontal_flip"}`` — how many of its stages trained ("all" when fine-tuned end
    #: to end) of how many, where their first weights came from (ImageNet's file and SHA-256, or a random init),
    #: the BatchNorm mode and learning-rate scale of ``TrainSettings`` and whether pixels were flipped
    trunk_training: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["encoder"] = asdict(self.encoder)
        out["mean"], out["std"] = list(self.mean), list(self.std)
        if self.trunk_training is None:
            del out["trunk_training"]  # a frozen trunk's record reads as it did before trunks could train
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
    frozen_trunk_weights: dict[str, str] | None = None,
    trunk_training: dict[str, Any] | None = None,
) -> ModelRecord:
    """The record of a model about to be trained with these settings (its normalisation read off its trunk)."""
    mean, std = trunk_normalisation(encoder.backbone)
    spatial = bool(getattr(model_class(model), "needs_spatial_features", False))
    cached = {"pretrained": encoder.pretrained, "seed": frozen_trunk_seed, "weights_loaded": frozen_trunk_weights_loaded}
    if frozen_trunk_weights is not None:
        cached["weights"] = dict(frozen_trunk_weights)
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
        frozen_trunk=cached if trunk_mode(encoder.trunk).cached_features else None,
        trunk_training=trunk_training,
    )


def trunk_training_record(settings: TrainSettings) -> dict[str, Any] | None:
    """What ``trunk_training`` records of a run with ``settings`` before its model is built (None for a frozen
    trunk); :func:`with_starting_weights` adds where the trained stages' first weights came from."""
    mode = settings.trunk_mode
    if not mode.trains_trunk:
        return None
    return {
        "trained_stages": "all" if mode.trained_stages is None else mode.trained_stages,
        "stages": build_trunk(settings.backbone, False).stage_count,
        "batchnorm": settings.trunk_batchnorm,
        "learning_rate_scale": settings.trunk_learning_rate_scale,
        "horizontal_flip": settings.horizontal_flip,
    }


def with_starting_weights(record: ModelRecord, model: nn.Module) -> ModelRecord:
    """``record`` with the trained trunk stages' starting weights of the freshly built ``model``: ImageNet's
    (the file and its SHA-256 when known) or a random init (when asked for, or when the weights were missing)."""
    if record.trunk_training is None:
        return record
    encoder = next(module for module in model.modules() if hasattr(module, "trunk_parameters"))
    source = getattr(encoder, "weights_source", None)
    starting = {"imagenet": bool(encoder.pretrained_loaded), **(source or {})}
    return replace(record, trunk_training={**record.trunk_training, "starting_weights": starting})


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
    model = build_model(record.model, config, initial_word_vectors if for_training else None, **record.model_options)
    if record.trunk_training is not None and record.trunk_training.get("batchnorm") is not None:
        frozen = not BATCHNORM_MODES.get(record.trunk_training["batchnorm"]).batch_statistics
        for module in model.modules():
            if hasattr(module, "frozen_batchnorm"):
                module.frozen_batchnorm = frozen
    return model


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
