"""Tiny trainers on cached "frozen trunk" features, shared by the tests that compare two ways of taking a step
(data-parallel against one process, the fixed-shape step against the plain one, CUDA against CPU): each builds
in milliseconds and trains one of the paper's variants with its real losses, so the compared runs differ only in
the way under test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.settings import TrainSettings
from models.training import PairData, Trainer, TrainingData
from models.training.run import build_training_run, record_in_memory
from pipeline.config.variants import VARIANTS

FEATURE_DIM, VOCAB = 12, 20

#: the tiny models' settings: 8-d embeddings, batches of 8, the trunk frozen (random features stand for images)
FROZEN_SETTINGS = TrainSettings(
    trunk="frozen", horizontal_flip=False, embed_dim=8, gru_hidden=8, max_text_tokens=6, batch_size=8,
    epochs=2, learning_rate=1e-3, lr_patience=1,
)


def frozen_pairs(n_pairs: int, width: int, longest: int, spatial: bool) -> PairData:
    """``n_pairs`` random pairs: token rows ``width`` wide holding 1 to ``longest`` tokens, image features pooled
    (``[n, FEATURE_DIM]``) or ``spatial`` (a 2x2 map, what PVSE attends over); every seventh pair shares the
    group of the one before it, so masked negatives occur."""
    rng = np.random.default_rng(0)
    group_ids = np.arange(n_pairs)
    group_ids[1::7] = group_ids[0::7][: len(group_ids[1::7])]
    return PairData(
        images=np.zeros((n_pairs, 1, 1, 3), dtype=np.uint8),
        image_rows=np.arange(n_pairs),
        tokens=rng.integers(2, VOCAB, (n_pairs, width)),
        lengths=rng.integers(1, longest + 1, n_pairs),
        group_ids=group_ids,
        image_features=rng.normal(size=(n_pairs, FEATURE_DIM, 2, 2) if spatial else (n_pairs, FEATURE_DIM)).astype(
            np.float32
        ),
    )


def trainer_on_features(
    variant: str,
    settings: TrainSettings,
    work_dir: Path,
    pairs: Callable[[bool], PairData],
    n_train: int,
    **run_options: Any,
) -> Trainer:
    """A :class:`Trainer` of ``variant`` (its model and losses from the variant table) on ``pairs(spatial)``, built
    as a Train builds its run: the first ``n_train`` pairs train, the rest validate; each train pair's neighbors
    are the next three. Seeded, so two calls build the same weights; ``run_options`` (device, static step,
    distributed) override."""
    spec = VARIANTS[variant]
    model_options = {"dropout": 0.0} if spec.model == "pvse" else {}  # masks differ between the compared layouts
    word_vectors = np.zeros((VOCAB, 8), dtype=np.float32)
    record = record_in_memory(
        spec.model, replace(settings, pretrained=False), word_vectors, feature_dim=FEATURE_DIM, model_options=model_options
    )
    data = pairs(spec.model == "pvse")
    neighbors = np.stack([(np.arange(n_train) + shift) % n_train for shift in (1, 2, 3)], axis=1)
    positions = (np.arange(n_train), np.arange(n_train, len(data.group_ids)))
    options = {"device": torch.device("cpu"), **run_options}
    run = build_training_run(
        record, TrainingData(data, *positions, neighbors=neighbors if spec.neighbor_source else None), settings,
        spec.build_losses(), seed=0, work_dir=work_dir, **options,
    )
    return run.trainer
