"""What a ``Train`` (and the tasks that embed its pairs: Evaluate, Cocos, SearchIndex) reads and builds its run
from: the pairs and their tokens, the tasks they come from, the model record, the warm start's parent, the epoch
cap a run trains to, and the run itself (:func:`training_run`: those inputs handed to the one factory of a training
run, ``models.training.run``). Plain functions over the required tasks; the Train task keeps Luigi's identity and
the dispatch (``pipeline/tasks/training.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from common.hashing import file_sha256
from common.tokenizer import TOKENIZER_VERSION
from data_recipes.manifest import image_ids, integer_group_ids
from models.config import ModelConfig
from models.devices import pick_device
from models.distributed import SINGLE_PROCESS, Distributed
from models.record_check import ModelRecordError
from models.record_settings import settings_disagreement, trunk_training_record
from models.registry import needs_spatial_features
from models.settings import TrainSettings
from models.trained import (
    ModelRecord,
    load_trained,
    read_record,
    record_for,
    vocabulary_entry,
)
from models.training import PairData, TrainingData
from models.training.run import TrainingRun, WarmStart, build_training_run
from models.training.validation import validation_order
from pipeline.config.variant_spec import merge_overrides
from pipeline.steps.selection import ValidationScorer
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
        vocabulary=vocabulary_entry(vocab_file, VOCABULARY_FILE, len(vocab) + 2),
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


def warm_start_of(parent: HashedTask) -> WarmStart:
    """What a warm-started run starts from: the best model of ``parent`` (a frozen-trunk run of the same variant),
    its record read and checked against the copy its metadata keeps."""
    record = read_record(parent.output_path("model"), parent.meta()["summary"].get("model_record"))
    return WarmStart(record, parent.output_path("checkpoint"), str(parent.output_dir()))


def training_data(task: PipelineTask, inputs: Mapping[str, HashedTask]) -> tuple[TrainingData, ValidationScorer | None]:
    """What a Train trains and validates on, from the tasks it requires: its split's train and validation pairs,
    the train pairs' neighbor pools (for a variant that samples neighbors) and, when it selects by a retrieval
    metric, the scorer of its validation split (also returned: it describes itself and ranks pairs)."""
    t = task.train_settings()
    pairs, manifest = load_pair_data(inputs, t.max_text_tokens)
    split = manifest["split"].to_numpy()
    train_positions, val_positions = np.flatnonzero(split == "train"), np.flatnonzero(split == "val")
    neighbors = (
        inputs["neighbors"].sampling_pool(train_positions, task.settings.neighbors.sample_k) if "neighbors" in inputs else None
    )
    scorer = None
    if t.selection_metric.ranks_pairs:
        val_order = validation_order(val_positions, pairs.group_ids)
        scorer = ValidationScorer(
            pairs.group_ids[val_order],
            image_ids(manifest)[val_order],
            manifest["text"].to_numpy()[val_order],
            t.selection_max_pairs,
            t.selection_n_way,
        )
        scorer.check(t.selection)
    return TrainingData(pairs, train_positions, val_positions, neighbors, scorer), scorer


def training_run(
    task: PipelineTask, work_dir: Path, distributed: Distributed = SINGLE_PROCESS
) -> tuple[TrainingRun, ValidationScorer | None]:
    """The run of a Train (its model record, data, neighbors, losses, warm start) ready to fit, and the scorer of
    its validation split (None when it selects by the validation loss); nothing trained yet."""
    inputs = task.requires()
    data, scorer = training_data(task, inputs)
    _, word_vectors = inputs["words"].vocabulary()
    run = build_training_run(
        model_record(task, inputs, data.pairs),
        data,
        task.train_settings(),
        task.variant_spec().build_losses(),
        seed=task.seed,
        work_dir=work_dir,
        word_vectors=word_vectors,
        warm_start=warm_start_of(inputs["parent"]) if "parent" in inputs else None,
        # a data-parallel process takes the GPU of its local rank; one process, this task's device
        device=pick_device() if distributed.active else task_device(),
        distributed=distributed,
        # no bar per epoch: two workers' bars would interleave on one terminal; FullRun's display shows each
        # running training's epoch and validation score (pipeline.run.progress)
        progress=False,
    )
    return run, scorer


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
