"""Batching of neighbors, the training loop, checkpoints and resume — on tiny synthetic data."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.batching import BatchSampler
from models.config import ModelConfig
from models.inference import embed_pairs
from models.losses import build_loss
from models.settings import TrainSettings
from models.training import BEST_CHECKPOINT, HISTORY_FILE, LAST_CHECKPOINT, PairData, Trainer, TrainingData
from models.training.run import build_training_run, record_in_memory
from models.vse import VSEModel

#: a ResNet-18 from random weights on 16-pixel images, 8-d embeddings: trains end to end in seconds; its
#: BatchNorm on batch statistics (the paper's), as a trunk trained from scratch without a warm start
SETTINGS = TrainSettings(
    backbone="resnet18", pretrained=False, image_size=16, embed_dim=8, gru_hidden=8, max_text_tokens=6,
    batch_size=8, epochs=2, learning_rate=1e-3, lr_patience=1, trunk_batchnorm="batch",
)
#: the tiny model's 20 words of 8 dimensions
TINY_WORDS = np.zeros((20, 8), dtype=np.float32)


def tiny_data(n: int = 40) -> PairData:
    rng = np.random.default_rng(0)
    return PairData(
        images=rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, 20, (n, 6)),
        lengths=rng.integers(1, 7, n),
        group_ids=np.arange(n),
    )


def tiny_model(seed: int = 0) -> VSEModel:
    torch.manual_seed(seed)
    config = ModelConfig(
        backbone="resnet18", pretrained=False, embed_dim=8, word_dim=8, gru_hidden=8, vocab_size=20
    )
    return VSEModel(config)


def ours_losses():
    return [build_loss("angular"), build_loss("within_modality", form="angular", text_weight=0.2, image_weight=0.3)]


#: each of the 32 train pairs' neighbor table: the next three pairs
TINY_NEIGHBORS = np.stack([(np.arange(32) + s) % 32 for s in (1, 2, 3)], axis=1)


def tiny_trainer(work_dir, settings=SETTINGS, losses=None, *, seed=0, validation_score=None, **options) -> Trainer:
    """Ours on the tiny data, built as a Train builds its run: 32 train pairs with neighbors, 8 validation pairs."""
    data = TrainingData(tiny_data(), np.arange(32), np.arange(32, 40), TINY_NEIGHBORS, validation_score)
    record = record_in_memory("vse", settings, TINY_WORDS)
    options = {"progress": False, **options}
    run = build_training_run(record, data, settings, losses or ours_losses(), seed=seed, work_dir=work_dir, **options)
    return run.trainer


def test_in_batch_sampler_pairs_each_anchor_with_a_table_neighbor():
    train = np.arange(100, 164)
    table = np.stack([(np.arange(64) + shift) % 64 for shift in (1, 2, 3)], axis=1)
    sampler = BatchSampler(train, 16, np.random.default_rng(0), table, "in_batch")
    batches = list(sampler.epoch())
    assert len(batches) == sampler.batches_per_epoch == 4
    anchors_seen = []
    for batch in batches:
        assert len(batch.rows) == 16 and batch.n_main == 16
        anchors = batch.rows[batch.neighbor_of] - 100
        neighbors = batch.rows[batch.neighbor_rows] - 100
        assert all(n in table[a] for a, n in zip(anchors, neighbors, strict=True))
        anchors_seen += anchors.tolist()
    second = [a for b in sampler.epoch() for a in (b.rows[b.neighbor_of] - 100).tolist()]
    assert sorted(anchors_seen + second) == list(range(64)), "every pair is an anchor once every two epochs"


def test_extra_rows_sampler_encodes_neighbors_beyond_the_main_batch():
    table = np.stack([(np.arange(20) + 1) % 20] * 2, axis=1)
    sampler = BatchSampler(np.arange(20), 10, np.random.default_rng(0), table, "extra_rows")
    batch = next(iter(sampler.epoch()))
    assert batch.n_main == 10 and len(batch.rows) == 20
    assert np.array_equal(batch.rows[10:], (batch.rows[:10] + 1) % 20)


def test_sampler_guards():
    with pytest.raises(ValueError, match="at least 2"):
        BatchSampler(np.arange(10), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="one row per train pair"):
        BatchSampler(np.arange(10), 4, np.random.default_rng(0), np.zeros((3, 2), dtype=int))


def test_trainer_refuses_neighbor_losses_without_a_table(tmp_path):
    data = TrainingData(tiny_data(), np.arange(32), np.arange(32, 40))
    with pytest.raises(ValueError, match="neighbor_source"):
        Trainer(tiny_model(), ours_losses(), data, SETTINGS, seed=0, work_dir=tmp_path)


def _fit(work_dir, settings, seed=0):
    trainer = tiny_trainer(work_dir, settings, seed=seed)
    return trainer, trainer.fit()


def test_training_logs_every_sub_loss_and_saves_checkpoints(tmp_path):
    trainer, result = _fit(tmp_path, SETTINGS)
    assert len(result.history) == 2 and result.best_epoch in (1, 2)
    row = result.history[-1]
    for part in (
        "angular.image_to_text_loss",
        "angular.text_to_image_loss",
        "within_modality.within_text_loss",
        "within_modality.within_image_loss",
    ):
        assert np.isfinite(row[f"train_{part}"])
    assert {BEST_CHECKPOINT, LAST_CHECKPOINT, HISTORY_FILE} <= {p.name for p in tmp_path.iterdir()}
    embedded = embed_pairs(trainer.model, trainer.device, tiny_data(), np.arange(32, 40), 16)
    image, text = embedded["image"], embedded["text"]
    np.testing.assert_allclose(np.linalg.norm(image, axis=1), 1.0, rtol=1e-5)
    assert text.shape == (8, 8)


def test_killed_training_resumes_from_its_checkpoint_and_matches_an_uninterrupted_run(tmp_path):
    _, straight = _fit(tmp_path / "straight", SETTINGS)
    # "killed" after epoch 1: the same work folder is picked up by a new trainer
    _fit(tmp_path / "resumed", replace(SETTINGS, epochs=1))
    trainer, resumed = _fit(tmp_path / "resumed", SETTINGS)
    assert resumed.resumed_from_epoch == 1 and len(resumed.history) == 2
    for key in ("val_loss", "train_loss"):
        assert resumed.history[-1][key] == pytest.approx(straight.history[-1][key], rel=1e-5)
    straight_state = torch.load(tmp_path / "straight" / LAST_CHECKPOINT, weights_only=False)["model"]
    for name, value in trainer.model.state_dict().items():
        torch.testing.assert_close(value, straight_state[name], rtol=1e-5, atol=1e-6)
