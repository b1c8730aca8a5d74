"""Checkpoint selection and early stopping by the validation rsum (the field's criterion) or by the
validation loss, against hand-worked examples."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.training import BEST_CHECKPOINT, Trainer, TrainResult
from pipeline.steps.selection import sample_whole_groups, validation_rsum
from tests.test_training import SETTINGS, ours_losses, tiny_data, tiny_model, tiny_trainer


def rows(selection: str, values: list[float]) -> TrainResult:
    result = TrainResult(selection=selection)
    for epoch, value in enumerate(values, start=1):
        result.record({"epoch": epoch, selection: value})
    return result


def test_rsum_selection_takes_the_highest_and_a_tie_keeps_the_earlier_epoch():
    result = rows("val_rsum", [10.0, 30.0, 30.0, 20.0, 25.0])
    assert (result.best_epoch, result.best_score) == (2, 30.0)
    assert result.plateaued(4, patience=2) and not result.plateaued(3, patience=2)


def test_loss_selection_takes_the_lowest():
    result = rows("val_loss", [1.0, 0.8, 0.9, 0.7])
    assert (result.best_epoch, result.best_score) == (4, 0.7)
    assert rows("val_loss", [float("nan"), 2.0]).best_epoch == 2


def test_validation_rsum_of_three_pairs_by_hand():
    # i2t: image 0 ranks its text first; images 1 and 2 each have another text scoring above theirs (rank 2);
    # t2i the same by symmetry: R@1 = 1/3, R@5 = R@10 = 1 both ways -> rsum = 2 * 100 * (1/3 + 1 + 1)
    image = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    text = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    score, described = validation_rsum(np.arange(3), np.arange(3), np.array(["a", "b", "c"]), max_pairs=10)
    scores = score(image, text)
    assert scores["val_rsum"] == pytest.approx(2 * 100 * (1 / 3 + 1 + 1))
    assert scores["val_i2t_r@1"] == pytest.approx(1 / 3) and scores["val_t2i_r@5"] == 1.0
    assert described["pairs_ranked"] == 3 and not described["sampled"]


def test_a_large_validation_split_is_ranked_on_a_fixed_sample_of_whole_groups():
    groups = np.repeat(np.arange(100), 5)  # 100 images x 5 captions
    kept = sample_whole_groups(groups, max_pairs=42)
    assert len(kept) == 40 and np.all(np.diff(kept) > 0)  # 8 whole groups, in order
    assert all(np.sum(groups[kept] == g) == 5 for g in np.unique(groups[kept]))
    assert np.array_equal(kept, sample_whole_groups(groups, max_pairs=42))
    assert np.array_equal(sample_whole_groups(groups, 500), np.arange(500))


def test_the_trainer_keeps_the_epoch_of_the_best_rsum_and_stops_after_patience_epochs(tmp_path):
    """A scripted rsum peaking at epoch 2 (the validation loss keeps falling): model_best.pt holds epoch 2,
    training stops after 2 epochs without a better rsum, and every row records both scores."""
    scripted = iter([50.0, 70.0, 60.0, 65.0, 90.0])
    seen_shapes = []

    def score(image: np.ndarray, text: np.ndarray) -> dict[str, float]:
        seen_shapes.append((image.shape, text.shape))
        return {"val_rsum": next(scripted)}

    settings = replace(SETTINGS, epochs=5, selection="val_rsum", early_stopping_patience=2, learning_rate=3e-3)
    trainer = tiny_trainer(tmp_path, settings, validation_score=score)
    result = trainer.fit()
    assert [row["val_rsum"] for row in result.history] == [50.0, 70.0, 60.0, 65.0]
    assert result.best_epoch == 2 and result.best_score == 70.0 and result.stopped_early_at == 4
    assert torch.load(tmp_path / BEST_CHECKPOINT, weights_only=True)["epoch"] == 2
    assert all(np.isfinite(row["val_loss"]) for row in result.history)
    assert seen_shapes == [((8, 8), (8, 8))] * 4  # every validation pair, embedded once per epoch


def test_selecting_by_rsum_without_a_scorer_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="selection 'val_rsum' needs validation_score"):
        Trainer(
            tiny_model(0),
            ours_losses()[:1],
            tiny_data(),
            np.arange(32),
            np.arange(32, 40),
            replace(SETTINGS, selection="val_rsum"),
            0,
            tmp_path,
        )
