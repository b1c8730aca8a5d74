"""What a ``Train`` (and the tasks that embed its pairs: Evaluate, Cocos, SearchIndex) reads and builds its run
from: the pairs and their tokens, the tasks they come from, the model record, the warm start's parent, and the
epoch cap and rate a run trains with. Plain functions over the required tasks; the Train task keeps Luigi's
identity and the dispatch (``pipeline/tasks/training.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd
from torch import nn

from common.hashing import file_sha256
from common.tokenizer import TOKENIZER_VERSION
from data_recipes.manifest import integer_group_ids
from models.config import ModelConfig
from models.record_check import ModelRecordError
from models.record_settings import settings_disagreement, trunk_training_record
from models.registry import needs_spatial_features
from models.settings import TrainSettings
from models.trained import (
    ModelRecord,
    load_trained,
    load_warm_start,
    read_record,
    record_for,
)
from models.training import PairData
from pipeline.config.variant_spec import merge_overrides
from pipeline.steps.text import encode_texts, tokenize
from pipeline.tasks.base import PipelineTask
from pipeline.tasks.data import PrepareDataset, Split
from pipeline.tasks.representations import TrainWordVectors, trunk_features_task
from task_engine.gpus import task_device
from task_engine.task import HashedTask

#: the name of the vocabulary file in a Train's folder (``Train.outputs["vocab"]``)
VOCABULARY_FILE = "vocab.json"


def load_pair_data(inputs: Mapping[str, HashedTask], max_tokens: int) -> tuple[PairData, pd.DataFrame]:
    """Tokenised texts, the image cache and, for a frozen trunk, its cached features, from the tasks a Train,
    Evaluate or Cocos requires (``split``, ``prepared``, ``words`` and, when frozen, ``features``)."""
    manifest = inputs["split"].manifest()
    vocab, _ = inputs["words"].vocabulary()
    tokens, lengths = encode_texts((tokenize(t) for t in manifest["text"]), vocab, max_tokens)
    data = PairData(
        images=inputs["prepared"].images(),
        image_rows=manifest["cache_row"].to_numpy(),
        tokens=tokens,
        lengths=lengths,
        group_ids=integer_group_ids(manifest).to_numpy(),
        image_features=inputs["features"].features() if "features" in inputs else None,
    )
    return data, manifest


def pair_inputs(task: PipelineTask) -> dict[str, HashedTask]:
    """What a task that embeds the pairs reads them from: the split manifest, the prepared images, the vocabulary."""
    return {"split": task.clone(Split), "prepared": task.clone(PrepareDataset), "words": task.clone(TrainWordVectors)}


def trunk_inputs(task: PipelineTask, t: TrainSettings) -> dict[str, HashedTask]:
    """The cached trunk features a frozen-trunk variant trains and is evaluated on (nothing when fine-tuned)."""
    if not t.trunk_mode.cached_features:
        return {}
    spatial = needs_spatial_features(task.variant_spec().model) and not t.trunk_mode.trains_trunk
    return {"features": trunk_features_task(task, t, spatial=spatial, trained_stages=t.trunk_mode.trained_stages)}


def model_record(task: PipelineTask, inputs: Mapping[str, HashedTask], data: PairData) -> ModelRecord:
    """What the variant's model is built from (``model.json`` beside the Train's checkpoints): the model and
    its options, the encoder's sizes, the trunk's input and normalisation, the tokenizer and the vocabulary
    (a copy beside the record in the Train's folder, so the folder stands alone)."""
    spec, t = task.variant_spec(), task.train_settings()
    vocab, word_vectors = inputs["words"].vocabulary()
    vocab_file = inputs["words"].output_path("vocab")
    encoder = ModelConfig.from_settings(t, word_vectors, feature_width(data, t))
    return record_for(
        spec.model,
        dict(spec.model_options),
        encoder,
        image_size=t.image_size,
        max_text_tokens=t.max_text_tokens,
        tokenizer_version=TOKENIZER_VERSION,
        vocabulary_file=vocab_file,
        vocabulary_name=VOCABULARY_FILE,
        vocabulary_size=len(vocab) + 2,
        frozen_trunk_seed=task.run_plan.data_seed if t.trunk_mode.cached_features else None,
        frozen_trunk_weights_loaded=(
            bool(inputs["features"].meta()["summary"]["imagenet_weights_loaded"]) if "features" in inputs else None
        ),
        # the weights file the cache was computed with (TrunkFeatures records it since trunks could train)
        frozen_trunk_weights=inputs["features"].meta()["summary"].get("weights_source") if "features" in inputs else None,
        trunk_training=trunk_training_record(t, warm_start_record(inputs.get("parent"))),
    )


def warm_start_record(parent: HashedTask | None) -> dict[str, Any] | None:
    """What a warm-started run's record says of its parent: its folder's signature, the SHA-256 of the best
    checkpoint it starts from and that checkpoint's epoch."""
    if parent is None:
        return None
    summary = parent.meta()["summary"]
    return {
        "parent": parent.signature(),
        "checkpoint_sha256": file_sha256(parent.output_path("checkpoint")),
        "epoch": int(summary["best_epoch"]),
    }


def feature_width(data: PairData, settings: TrainSettings) -> int | None:
    """The width of a frozen trunk's cached features (None when the trunk trains: the encoder reads its trunk's)."""
    if data.image_features is None or settings.trunk_mode.trains_trunk:
        return None
    return int(data.image_features.shape[1])


def load_trained_model(inputs: Mapping[str, HashedTask]) -> tuple[nn.Module, int]:
    """The trained model of the required ``train`` task, built from its construction record alone (checked
    against the copy its metadata keeps, and against the training settings its run plan gives it) and loaded with
    its best checkpoint on this task's device, and the epoch of that checkpoint."""
    train = inputs["train"]
    record = read_record(train.output_path("model"), train.meta()["summary"].get("model_record"))
    problem = settings_disagreement(record, train.train_settings())  # as its run plan resolves them
    if problem:
        raise ModelRecordError(f"{train.output_path('model')}: {problem} (its run plan): the record contradicts what the model was trained with")
    return load_trained(record, train.output_path("checkpoint"), task_device())


def warm_start(model: nn.Module, parent: HashedTask, record: ModelRecord) -> None:
    """Load the best checkpoint of ``parent`` (a frozen-trunk run of the same variant) into ``model``: every
    weight but the trunk part's, which keeps its ImageNet start. The parent's record must build the same model
    with the same sizes but for the trunk, and its checkpoint must be the one it was sealed with."""
    parent_record = read_record(parent.output_path("model"), parent.meta()["summary"].get("model_record"))
    differs = [
        name
        for name in ("model", "model_options", "image_size", "mean", "std", "max_text_tokens", "vocabulary")
        if getattr(parent_record, name) != getattr(record, name)
    ]
    differs += [
        f"encoder.{name}"
        for name in ("backbone", "pretrained", "embed_dim", "word_dim", "gru_hidden", "vocab_size")
        if getattr(parent_record.encoder, name) != getattr(record.encoder, name)
    ]
    if differs:
        raise RuntimeError(f"warm start: the parent run {parent.output_dir()} differs in {', '.join(differs)}")
    parent_model, _ = load_trained(parent_record, parent.output_path("checkpoint"))
    load_warm_start(model, parent_model.state_dict(), str(parent.output_dir()))


def imagenet_weights_loaded(model: nn.Module, features: HashedTask | None) -> bool:
    """Whether the image trunk started from ImageNet weights: the cached features' record when frozen."""
    if features is not None:
        return bool(features.meta()["summary"]["imagenet_weights_loaded"])
    encoder = model.image_encoder
    return bool(getattr(getattr(encoder, "cnn", encoder), "pretrained_loaded", False))


def without_train_setting(overrides: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``overrides`` without a change of the ``train`` setting ``name``."""
    train = {key: value for key, value in dict(overrides.get("train", {})).items() if key != name}
    unchanged = {key: value for key, value in overrides.items() if key != "train"}
    return {**unchanged, "train": train} if train else unchanged


def with_epoch_cap(overrides: Mapping[str, Any], epochs: int, default_cap: int, cap: str = "epochs") -> dict[str, Any]:
    """``overrides`` with the run's epoch cap (the ``train`` setting ``cap``) set to ``epochs`` (no key at the
    default cap, so a run at the variant's own cap is one task whatever asked for it)."""
    base = without_train_setting(overrides, cap)
    return base if epochs == default_cap else merge_overrides(base, {"train": {cap: epochs}})


def epoch_cap_setting(settings: TrainSettings) -> str:
    """The setting that caps a run's epochs: ``trunk_epochs`` for a warm-started run (its parent trained
    ``epochs``), ``epochs`` otherwise."""
    return "trunk_epochs" if settings.warm_started else "epochs"


def run_settings_of(settings: TrainSettings) -> TrainSettings:
    """The settings the trainer runs with: a warm-started run trains ``trunk_epochs`` at its lower rate."""
    if not settings.warm_started:
        return settings
    return replace(
        settings,
        epochs=settings.trunk_epochs,
        learning_rate=settings.learning_rate * settings.warm_start_learning_rate_scale,
    )


