"""Checkpoint selection and early stopping by a validation retrieval metric (expected n-way R@1, AUC, MRR,
median rank, rsum) or by the validation loss, against hand-worked examples and loop references."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from evaluation.retrieval import n_way_recall_at_1
from evaluation.selection_metrics import (
    SELECTION_METRICS,
    QueryRanks,
    ValidationRanking,
    both_directions,
    expected_n_way_hits,
    other_group_ranks,
    ranking_metrics,
)
from models.training import BEST_CHECKPOINT, TrainResult
from pipeline.steps.selection import ValidationScorer, load_ranks, sample_whole_groups, save_ranks
from tests.test_training import SETTINGS, ours_losses, tiny_trainer


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
    scorer = ValidationScorer(np.arange(3), np.arange(3), np.array(["a", "b", "c"]), max_pairs=10, n_way=2)
    scores = scorer(image, text)
    assert scores["val_rsum"] == pytest.approx(2 * 100 * (1 / 3 + 1 + 1))
    assert scores["val_i2t_r@1"] == pytest.approx(1 / 3) and scores["val_t2i_r@5"] == 1.0
    described = scorer.describe("val_rsum")
    assert described["pairs_ranked"] == 3 and not described["sampled"]
    # the same ranking by hand for the bulk metrics: per direction, above = (0, 1, 1) of eligible 2 each
    assert scores["val_nway_r1"] == pytest.approx(np.mean([1.0, 0.5, 0.5]))  # 2-way: 1 - above / 2
    assert scores["val_auc"] == pytest.approx(np.mean([1.0, 0.5, 0.5]))
    assert scores["val_mrr"] == pytest.approx(np.mean([1.0, 0.5, 0.5]))
    assert scores["val_medr"] == 2.0


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_expected_n_way_r1_by_hand():
    """A query whose positive has 2 of 5 other-group items above it wins a 3-way draw (2 distractors of 5)
    when both distractors come from the 3 below: C(3, 2) / C(5, 2) = 3 / 10; a query with 4 above cannot."""
    ranks = QueryRanks(above=np.array([0, 2, 4]), eligible=np.array([5, 5, 5]))
    assert expected_n_way_hits(ranks, 3) == pytest.approx([1.0, 0.3, 0.0])
    assert expected_n_way_hits(ranks, 2) == pytest.approx([1.0, 0.6, 0.2])
    with pytest.raises(ValueError, match="needs 6 items of other groups"):
        expected_n_way_hits(ranks, 7)


def test_expected_n_way_r1_is_the_mean_of_n_way_r1_over_many_distractor_draws():
    """The exact expectation against evaluation.retrieval's n-way R@1 averaged over 4,000 random draws (the
    metric the report gives on test), with groups of two pairs excluded from the distractors."""
    rng = np.random.default_rng(3)
    image, text = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
    text[:20] += 0.8 * image[:20]  # some signal
    image, text = unit(image), unit(text)
    groups = np.repeat(np.arange(20), 2)
    ranks = both_directions(image, text, groups)
    expected = {d: expected_n_way_hits(ranks[d], 5).mean() for d in ranks}
    drawn = n_way_recall_at_1(image, text, n_way=5, seed=0, redraws=4000, group_ids=groups)
    for direction in ("i2t", "t2i"):
        assert drawn[direction] == pytest.approx(expected[direction], abs=0.01)
    assert SELECTION_METRICS["val_nway_r1"].value(ValidationRanking(ranks, 5)) == pytest.approx(np.mean(list(expected.values())))


def test_other_group_ranks_against_a_loop_with_ties_counted_against_the_positive():
    rng = np.random.default_rng(0)
    unit_i = unit(np.round(rng.normal(size=(30, 4)), 0) + 0.01)  # rounded: scores tie
    unit_t = unit(np.round(rng.normal(size=(30, 4)), 0) + 0.01)
    unit_t[5] = unit_t[6]  # another group's text ties pair 5's positive
    groups = np.repeat(np.arange(10), 3)
    ranks = other_group_ranks(unit_i, unit_t, groups)
    for i in range(30):
        others = [j for j in range(30) if groups[j] != groups[i]]
        positive = unit_i[i] @ unit_t[i]
        assert ranks.above[i] == sum(unit_i[i] @ unit_t[j] >= positive for j in others)
        assert ranks.eligible[i] == 27


def test_every_candidate_has_per_query_values_that_average_to_it_except_the_median(tmp_path):
    rng = np.random.default_rng(1)
    ranks = both_directions(unit(rng.normal(size=(25, 6))), unit(rng.normal(size=(25, 6))))
    ranking = ValidationRanking(ranks, 5)
    for metric in ranking_metrics():
        if metric.per_query is None:
            assert metric.name == "val_medr"
            continue
        assert metric.per_query(ranking).shape == (25,)
        assert metric.per_query(ranking).mean() == pytest.approx(metric.value(ranking))
    save_ranks(tmp_path / "ranks.npz", ranks)
    loaded = load_ranks(tmp_path / "ranks.npz")
    assert all(np.array_equal(loaded[d].above, ranks[d].above) for d in ranks)


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
        tiny_trainer(tmp_path, replace(SETTINGS, selection="val_rsum"), ours_losses()[:1])


def test_a_validation_split_too_small_for_the_n_way_draw_is_refused_before_training_and_recorded_as_nan():
    groups = np.array([0, 0, 0, 1, 2])  # pair 0 has only 2 pairs of other groups
    scorer = ValidationScorer(groups, np.arange(5), np.array(list("abcde")), max_pairs=10, n_way=5)
    with pytest.raises(ValueError, match="needs 4 validation pairs of other groups per pair, but this validation split has 2"):
        scorer.check("val_nway_r1")
    scorer.check("val_rsum")  # the others are computable
    rng = np.random.default_rng(0)
    image, text = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in rng.normal(size=(2, 5, 4)))
    scores = scorer(image, text)
    assert np.isnan(scores["val_nway_r1"]) and np.isfinite(scores["val_auc"])


def test_each_selection_metric_is_one_entry_with_its_direction_needs_label_and_progress_format():
    """One registry holds what every part asks of a metric: the trainer its direction and whether it needs a
    scorer, the plan whether it needs an n-way task, the tuning its label, the progress display its format."""
    assert set(SELECTION_METRICS) == {"val_nway_r1", "val_auc", "val_mrr", "val_medr", "val_rsum", "val_loss"}
    lower = {name for name, metric in SELECTION_METRICS.items() if not metric.higher_is_better}
    assert lower == {"val_medr", "val_loss"}
    assert [m.name for m in SELECTION_METRICS.values() if m.n_way] == ["val_nway_r1"]
    assert not SELECTION_METRICS["val_loss"].ranks_pairs and all(m.ranks_pairs for m in ranking_metrics())
    n_way = SELECTION_METRICS["val_nway_r1"]
    assert n_way.label_for(7) == "expected 7-way R@1" and n_way.progress_label_for(7) == "val 7-way R@1"
    assert SELECTION_METRICS["val_loss"].progress_label_for(5) == "val loss"


def test_the_validation_rsum_is_the_full_ranking_s_where_the_ranking_knew_the_layout():
    """With several captions per image the rsum of the full ranking (an image's best caption) is not the mean of
    the per-pair values: the scorer's val_rsum is the full ranking's, the per-pair values stay for paired
    comparisons (which check that they reproduce the score first)."""
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(6), 3)
    image_ids = groups.copy()  # three captions of one image
    image = unit(rng.normal(size=(6, 5)))[groups]
    text = unit(image + 0.8 * rng.normal(size=image.shape))
    scorer = ValidationScorer(groups, image_ids, np.array([f"t{i}" for i in range(18)]), max_pairs=100, n_way=2)
    ranking = scorer.ranking(image, text)
    assert scorer(image, text)["val_rsum"] == ranking.full_ranking["rsum"]
    per_pair = SELECTION_METRICS["val_rsum"].per_query(ranking).mean()
    assert SELECTION_METRICS["val_rsum"].value(ValidationRanking(ranking.ranks, 2)) == pytest.approx(per_pair)
