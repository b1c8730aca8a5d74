"""One training run, assembled in one place and finished in one place, for the pipeline's ``Train``, the
benchmarks and the tests alike:

- :func:`build_training_run`: a model record, the training data, the settings, the built losses and the seed
  (an optional warm start, a device, the data-parallel group) -> a ready :class:`Trainer`, its model built from
  the record (:func:`models.trained.build_from_record`, the one model builder) and the record with its starting
  weights;
- :func:`finish_training_run`: after :meth:`Trainer.fit`, the record sealed with the best checkpoint and written
  beside it with its vocabulary, and the run's summary.

A record needs no vocabulary file: :func:`record_in_memory` makes one for models whose words are not in a file
(the benchmarks', the tests')."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common.files import atomic_path
from common.tokenizer import TOKENIZER_VERSION
from models.config import ModelConfig
from models.distributed import SINGLE_PROCESS, Distributed
from models.losses import Loss
from models.record import ModelRecord
from models.record_settings import trunk_training_record
from models.settings import TrainSettings
from models.trained import (
    RECORD_FILE,
    build_from_record,
    load_trained,
    load_warm_start,
    record_for,
    with_starting_weights,
    write_record,
)
from models.training.checkpoint import BEST_CHECKPOINT
from models.training.data import TrainingData
from models.training.history import TrainResult
from models.training.loop import Trainer

#: what a warm start's parent must share with the run it starts: every part of the record but the trunk's
WARM_START_SAME = ("model", "model_options", "image_size", "mean", "std", "max_text_tokens", "vocabulary")
WARM_START_SAME_ENCODER = ("backbone", "pretrained", "embed_dim", "word_dim", "gru_hidden", "vocab_size")


def run_settings_of(settings: TrainSettings) -> TrainSettings:
    """The settings the trainer runs with: a warm-started run trains ``trunk_epochs`` at its lower rate."""
    if not settings.warm_started:
        return settings
    return replace(
        settings,
        epochs=settings.trunk_epochs,
        learning_rate=settings.learning_rate * settings.warm_start_learning_rate_scale,
    )


@dataclass(frozen=True)
class WarmStart:
    """The run a warm-started run starts from (its parent: the same run with the frozen trunk): the parent's
    record, its best checkpoint and where it lies (named in every error)."""

    record: ModelRecord
    checkpoint: Path
    where: str

    def load_into(self, model: nn.Module, record: ModelRecord) -> None:
        """The parent's weights into ``model`` (built from ``record``): every weight but the trunk part's, which
        keeps its ImageNet start. The parent's record must build the same model with the same sizes but for the
        trunk, and its checkpoint must be the one it was sealed with."""
        differs = [name for name in WARM_START_SAME if getattr(self.record, name) != getattr(record, name)]
        differs += [
            f"encoder.{name}"
            for name in WARM_START_SAME_ENCODER
            if getattr(self.record.encoder, name) != getattr(record.encoder, name)
        ]
        if differs:
            raise RuntimeError(f"warm start: the parent run {self.where} differs in {', '.join(differs)}")
        parent_model, _ = load_trained(self.record, self.checkpoint)
        load_warm_start(model, parent_model.state_dict(), self.where)


@dataclass(frozen=True)
class TrainingRun:
    """A run ready to :meth:`Trainer.fit`: its trainer, the model's record with its starting weights (sealed with
    the best checkpoint by :func:`finish_training_run`) and the warm start it began from, if any."""

    trainer: Trainer
    record: ModelRecord
    warm_start: WarmStart | None = None

    @property
    def settings(self) -> TrainSettings:
        """The settings the run trains with (:func:`run_settings_of`)."""
        return self.trainer.settings


def build_training_run(
    record: ModelRecord,
    data: TrainingData,
    settings: TrainSettings,
    losses: list[Loss],
    *,
    seed: int,
    work_dir: Path,
    word_vectors: np.ndarray | None = None,
    warm_start: WarmStart | None = None,
    device: torch.device | None = None,
    distributed: Distributed = SINGLE_PROCESS,
    progress: bool | None = False,
    static_step: bool = False,
) -> TrainingRun:
    """The run of ``record``'s model with ``losses`` on ``data`` under ``settings``, seeded by ``seed``, into
    ``work_dir``: the model's first weights from the record (the trunk's ImageNet weights when it asks for them,
    the word embedding from ``word_vectors``); with ``warm_start``, then its parent's, which compete as epoch 0,
    and the warm-started run's own epochs and rate (:func:`run_settings_of`); without it the run starts from the
    record's weights at ``settings``' own epochs and rate whatever ``trunk_warm_start`` says (how the benchmarks
    time an epoch; :func:`record_in_memory` then records no warm start, which is what ran). Nothing trained yet. ``progress``:
    a bar per epoch (None: when on a terminal); ``static_step``: see :class:`Trainer`."""
    if warm_start is not None:
        if not settings.warm_started:
            raise ValueError(f"a warm start needs a trunk that trains from one (train.trunk={settings.trunk!r}, trunk_warm_start)")
        settings = run_settings_of(settings)
    torch.manual_seed(seed)
    model = build_from_record(record, initial_word_vectors=word_vectors, for_training=True)
    record = with_starting_weights(record, model)
    if warm_start is not None:
        warm_start.load_into(model, record)
    trainer = Trainer(
        model, losses, data, settings, seed=seed, work_dir=work_dir, device=device, progress=progress,
        distributed=distributed, static_step=static_step, starting_weights_compete=warm_start is not None,
    )  # fmt: skip
    return TrainingRun(trainer, record, warm_start)


def finish_training_run(
    run: TrainingRun,
    result: TrainResult,
    *,
    vocabulary: Path | None = None,
    selection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The end of a fitted run: on the main process its record sealed with the best checkpoint (that file's
    SHA-256 and its own) and written as ``model.json`` beside it, with a copy of ``vocabulary`` (the words file,
    under the name the record gives it) so the folder stands alone; and on every process the run's summary.
    ``selection``: how the best checkpoint was chosen (default: the settings' metric)."""
    trainer, settings = run.trainer, run.settings
    record = None
    if trainer.distributed.is_main:
        record = run.record.sealed(trainer.work_dir / BEST_CHECKPOINT)
        if vocabulary is not None:
            with atomic_path(trainer.work_dir / record.vocabulary["file"]) as tmp:
                tmp.write_bytes(Path(vocabulary).read_bytes())
        write_record(record, trainer.work_dir / RECORD_FILE)
    epoch_seconds = [row["train_seconds"] for row in result.trained_rows]
    best = next((row for row in result.history if row["epoch"] == result.best_epoch), {})
    warm = run.warm_start
    return {
        "best_epoch": result.best_epoch,
        "selection": selection if selection is not None else {"metric": settings.selection},
        "best_score": result.best_score,
        "best_val_loss": best.get("val_loss"),
        "best_val_rsum": best.get("val_rsum"),
        # every validation metric at the best checkpoint (history.csv has them for every epoch)
        "best_validation": {key: value for key, value in best.items() if key.startswith("val_")},
        "max_epochs": settings.epochs,
        "epochs": len(result.trained_rows),
        "resumed_from_epoch": result.resumed_from_epoch,
        "mean_epoch_seconds": float(np.mean(epoch_seconds)) if epoch_seconds else None,
        "stopped_early_at": result.stopped_early_at,
        "device": str(trainer.device),
        "processes": trainer.distributed.world_size,
        "trunk": settings.trunk,
        # a warm start: the parent's folder, and whether its model stayed the best (epoch 0)
        **({"warm_start": {"parent": warm.where, "kept_parent": result.best_epoch == 0}} if warm is not None else {}),
        "imagenet_weights_loaded": imagenet_weights_loaded(trainer.model, run.record),
        # what model.json held when written: a reader names the fields of an edited record
        **({"model_record": record.to_json()} if record is not None else {}),
    }


def imagenet_weights_loaded(model: nn.Module, record: ModelRecord) -> bool:
    """Whether the image trunk started from ImageNet weights: the cached features' record for a cached trunk,
    the trunk the model holds otherwise."""
    if record.frozen_trunk is not None:
        return bool(record.frozen_trunk["weights_loaded"])
    encoder = model.image_encoder
    return bool(getattr(getattr(encoder, "cnn", encoder), "pretrained_loaded", False))


def record_in_memory(
    model: str,
    settings: TrainSettings,
    word_vectors: np.ndarray,
    *,
    feature_dim: int | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelRecord:
    """The record of a ``model`` trained with ``settings`` whose words are no file (benchmarks, tests): sizes
    from ``settings`` and the word vectors (``[vocabulary size, word dim]``), ``feature_dim`` the width of a
    cached trunk's features; the vocabulary's SHA-256 is that of the word vectors' bytes, what stands for it. A
    trunk that trains starts from its first weights (no parent to name)."""
    encoder = ModelConfig.from_settings(settings, word_vectors, feature_dim)
    return record_for(
        model,
        dict(model_options or {}),
        encoder,
        image_size=settings.image_size,
        max_text_tokens=settings.max_text_tokens,
        tokenizer_version=TOKENIZER_VERSION,
        vocabulary={
            "file": "vocab.json",
            "size": int(word_vectors.shape[0]),
            "sha256": hashlib.sha256(np.ascontiguousarray(word_vectors).tobytes()).hexdigest(),
        },
        trunk_training=trunk_training_record(replace(settings, trunk_warm_start=False)),
    )
