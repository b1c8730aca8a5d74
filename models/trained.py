"""A trained model that describes itself: the construction record ``Train`` writes beside its checkpoints
(``model.json``), and the one loader that builds the model from that record alone.

Why a record and not the settings that made it: rebuilding a model from today's profile and code (as the
pipeline once did) is right only while nothing the architecture depends on has changed since; a record
written at training time is right forever, as vsepp keeps its ``opt`` in the checkpoint and timm keeps a
pretrained config beside the weights. Evaluate, COCOS, the search index, ``crossmodal export`` and bundle
loading all build a trained model through :func:`build_from_record` (and load a checkpoint through
:func:`load_trained`), so there is one model builder.

The record (:class:`models.record.ModelRecord`, declared there; format 2, 1 still read)::

    model, model_options   the registered model (models.registry) and its declared options
    encoder                models.config.ModelConfig: backbone, pretrained, embed_dim, word_dim, gru_hidden,
                           vocab_size, trunk, feature_dim
    image                  the trunk's input side, pooled or spatial features, normalisation mean and std, and
                           for a cached trunk how its cached features were made (pretrained, seed, weights file)
    trunk_training         for a trunk that trains (its top stages, or all of it): which stages, their starting
                           weights, BatchNorm, learning-rate scale and augmentation (absent for a frozen trunk)
    text                   tokenizer version, max tokens, and the vocabulary: its file (relative to the folder
                           the record's reader names), size and SHA-256
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common.bounded_json import BoundedJsonError, read_bounded_json
from common.hashing import file_sha256
from models.backbones import normalisation
from models.config import ModelConfig
from models.record import ModelRecord
from models.record_check import (
    MAX_RECORD_BYTES,
    MAX_RECORD_DEPTH,
    ModelRecordError,
    changed_fields,
)
from models.registry import build_model, needs_spatial_features
from models.settings import BATCHNORM_MODES

RECORD_FILE = "model.json"


def record_for(
    model: str,
    model_options: dict[str, Any],
    encoder: ModelConfig,
    *,
    image_size: int,
    max_text_tokens: int,
    tokenizer_version: int,
    vocabulary: dict[str, Any],
    frozen_trunk_seed: int | None = None,
    frozen_trunk_weights_loaded: bool | None = None,
    frozen_trunk_weights: dict[str, str] | None = None,
    trunk_training: dict[str, Any] | None = None,
) -> ModelRecord:
    """The record of a model about to be trained with these settings (its normalisation read off its trunk);
    ``vocabulary``: ``{"file", "size", "sha256"}`` (:func:`vocabulary_entry`)."""
    mean, std = normalisation(encoder.backbone)
    spatial = needs_spatial_features(model)
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
        vocabulary=dict(vocabulary),
        frozen_trunk=cached if encoder.trunk_mode.cached_features else None,
        trunk_training=trunk_training,
    )


def vocabulary_entry(file: Path, name: str, size: int) -> dict[str, Any]:
    """What a record says of the vocabulary in ``file``: the name of its copy beside the record, its size and SHA-256."""
    return {"file": name, "size": size, "sha256": file_sha256(file)}


def load_warm_start(model: nn.Module, parent_state: dict[str, torch.Tensor], where: str) -> None:
    """A warm start: the weights of a frozen-trunk model (``parent_state``) into ``model``, which holds the same
    network plus a trained trunk part. Every parent tensor must exist in ``model`` with its shape, and what the
    parent lacks must be the trunk part's alone (it keeps its starting weights); one line naming the first tensor
    that breaks this otherwise."""
    own = model.state_dict()
    trunk_prefixes = tuple(
        f"{name}.trunk." for name, module in model.named_modules() if hasattr(module, "trunk_parameters") and module.trunk is not None
    )
    missing = sorted(set(parent_state) - set(own))
    extra = sorted(name for name in set(own) - set(parent_state) if not name.startswith(trunk_prefixes))
    if missing or extra:
        first = f"the parent's {missing[0]} is not in this model" if missing else f"{extra[0]} is not in the parent"
        raise ModelRecordError(f"warm start from {where}: {first}")
    for name, tensor in parent_state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise ModelRecordError(f"warm start from {where}: {name} is {list(tensor.shape)} there, {list(own[name].shape)} here")
    model.load_state_dict(parent_state, strict=False)


def with_starting_weights(record: ModelRecord, model: nn.Module) -> ModelRecord:
    """``record`` with the trained trunk stages' starting weights of the freshly built ``model``: ImageNet's
    (the file and its SHA-256 when known) or a random init (when asked for, or when the weights were missing)."""
    if record.trunk_training is None:
        return record
    encoder = next(module for module in model.modules() if hasattr(module, "trunk_parameters"))
    source = getattr(encoder, "weights_source", None)
    starting = {"imagenet": bool(encoder.pretrained_loaded), **(source or {})}
    return replace(record, trunk_training={**record.trunk_training, "starting_weights": starting})


def write_record(record: ModelRecord, path: Path) -> None:
    Path(path).write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")


def read_record(path: Path, made: dict[str, Any] | None = None) -> ModelRecord:
    """The record in file ``path``, read within bounds and checked; ``made``: the record as it was written (the
    copy its Train's metadata keeps), so an edit is refused naming the fields that changed. Every problem is
    one :class:`ModelRecordError` line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ModelRecordError(f"{path} is missing: the folder holds no trained model of this version (train it again)")
    try:
        payload = read_bounded_json(path, MAX_RECORD_BYTES, MAX_RECORD_DEPTH)
    except (BoundedJsonError, OSError) as error:
        raise ModelRecordError(f"{path} is not a model record: {error}") from None
    return record_from(payload, made, str(path))


def record_from(payload: Any, made: dict[str, Any] | None, where: str) -> ModelRecord:
    """The record of ``payload`` (from a file or a bundle's manifest named by ``where``), refused when it differs
    from ``made`` (naming the fields) or fails its check."""
    if made is not None and payload != made:
        edited = changed_fields(payload, made)
        shown = ", ".join(edited[:5]) + (f" and {len(edited) - 5} more" if len(edited) > 5 else "")
        raise ModelRecordError(f"{where}: {shown} changed since the model was trained; restore the record or train again")
    try:
        return ModelRecord.from_json(payload)
    except ModelRecordError as error:
        raise ModelRecordError(f"{where}: {error}") from None


def build_from_record(record: ModelRecord, *, initial_word_vectors: np.ndarray | None = None, for_training: bool = False) -> nn.Module:
    """The model's network as the record describes it. To load a checkpoint or a bundle (the default) every
    weight is still to be set: no ImageNet download, no word vectors. ``for_training``: the first weights of a
    training run, the trunk's ImageNet weights when the record asks for them and the word embedding from
    ``initial_word_vectors``."""
    config = replace(record.encoder, pretrained=record.encoder.pretrained and for_training)
    model = build_model(record.model, config, initial_word_vectors if for_training else None, **record.model_options)
    if record.trunk_training is not None and record.trunk_training.get("batchnorm") is not None:
        frozen = not BATCHNORM_MODES.get(record.trunk_training["batchnorm"]).batch_statistics
        for module in model.modules():
            if hasattr(module, "frozen_batchnorm"):
                module.frozen_batchnorm = frozen
    return model


def read_model_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """A model checkpoint's ``{"epoch", "model"}`` (tensors only: ``weights_only``), the one reader of one."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise ModelRecordError(f"{checkpoint} is not a model checkpoint (no 'model' state)")
    return state


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """``state`` into ``model``, every tensor's name and shape checked first: a record that builds another network
    than the one trained is one line naming the first tensor that differs."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ModelRecordError(
            f"{where}: the record builds another network than the weights hold "
            f"({'missing ' + missing[0] if missing else 'unexpected ' + unexpected[0]}, {len(missing) + len(unexpected)} in all)"
        )
    for name, tensor in own.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise ModelRecordError(
                f"{where}: the record builds {name} as {list(tensor.shape)}, the weights hold {list(state[name].shape)}"
            )
    model.load_state_dict(state)


def load_trained(record: ModelRecord, checkpoint: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, int]:
    """The model of ``record`` with the weights of ``checkpoint`` (``{"epoch", "model"}``), in eval mode on
    ``device``, and the checkpoint's epoch. A sealed record's checkpoint must be the one it was sealed with."""
    if record.weights is not None and file_sha256(checkpoint) != record.weights["sha256"]:
        raise ModelRecordError(f"{checkpoint} is not the checkpoint its model record was sealed with (its SHA-256 differs)")
    state = read_model_checkpoint(checkpoint)
    model = build_from_record(record)
    load_weights(model, state["model"], str(checkpoint))
    return model.to(device).eval(), int(state.get("epoch", -1))
