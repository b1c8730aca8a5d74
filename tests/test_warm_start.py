"""A learning image tower that starts where the frozen one ends (issue 50): with the learned part at its starting
weights the model embeds as its frozen parent does; cached views are seeded; the study can choose the frozen
trunk."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.backbones import build_trunk
from models.cached_views import CachedViews
from models.config import ModelConfig
from models.encoders import frozen_trunk_features, resize_batch
from models.registry import build_model
from models.trained import ModelRecordError, load_warm_start
from models.training.history import TrainResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trunk_stages_study import choose  # noqa: E402

BACKBONE, SIZE = "efficientnet_lite0", 64


def _pixels(n: int = 12, side: int = 48) -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, 256, (n, side, side, 3), generator=generator, dtype=torch.uint8)


def _models(batchnorm_frozen: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A frozen-trunk VSE model (the parent, its head at a random init) and a top-1 model warm-started from it."""
    torch.manual_seed(0)
    parent = build_model("vse", ModelConfig(backbone=BACKBONE, embed_dim=32, word_dim=8, gru_hidden=16, vocab_size=20, trunk="frozen", feature_dim=1280), None)
    child = build_model("vse", ModelConfig(backbone=BACKBONE, embed_dim=32, word_dim=8, gru_hidden=16, vocab_size=20, trunk="top1"), None)
    child.image_encoder.frozen_batchnorm = batchnorm_frozen
    load_warm_start(child, parent.state_dict(), "the parent")
    return parent.eval(), child.train()


def _first_embeddings(batchnorm_frozen: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The parent's image embeddings (eval, on the cached pooled features) and the child's in training mode (on
    the cached map under its top stage), both from one trunk and the same pixels."""
    parent, child = _models(batchnorm_frozen)
    trunk = build_trunk(BACKBONE, True).eval()
    mean, std = torch.tensor(trunk.mean).view(1, 3, 1, 1), torch.tensor(trunk.std).view(1, 3, 1, 1)
    pixels = resize_batch(_pixels(), SIZE)
    with torch.no_grad():
        pooled = frozen_trunk_features(trunk, pixels, mean, std, spatial=False)
        below = frozen_trunk_features(trunk, pixels, mean, std, spatial=False, trained_stages=1)
        return parent.image_encoder(pooled), child.image_encoder(below)


def test_a_warm_started_tower_embeds_as_its_frozen_parent_at_step_0():
    frozen, learning = _first_embeddings(batchnorm_frozen=True)
    cosine = F.cosine_similarity(frozen, learning, dim=-1)
    assert cosine.min().item() == pytest.approx(1.0, abs=1e-5)


def test_batch_statistics_move_the_start_away_from_the_parent():
    """The reason BatchNorm keeps ImageNet's statistics by default: on batch statistics the same weights embed
    otherwise at step 0 (so the test above can fail)."""
    frozen, learning = _first_embeddings(batchnorm_frozen=False)
    assert F.cosine_similarity(frozen, learning, dim=-1).mean().item() < 0.99


def test_a_warm_start_refuses_a_parent_of_another_network():
    parent, child = _models(True)
    state = parent.state_dict()
    state["image_encoder.project.weight"] = torch.zeros(16, 1280)
    with pytest.raises(ModelRecordError, match="image_encoder.project.weight"):
        load_warm_start(child, state, "a parent")
    del state["image_encoder.project.weight"]
    with pytest.raises(ModelRecordError, match="is not in the parent"):
        load_warm_start(child, state, "a parent")


def test_cached_views_differ_by_view_and_repeat_with_the_seed():
    views = CachedViews(4, 0.35)
    images, rows = _pixels(6), np.arange(10, 16)
    first = views.views_of(images, rows, 40, seed=5)
    assert first.shape == (6, 4, 40, 40, 3) and first.dtype == torch.uint8
    assert torch.equal(first[:, 0], resize_batch(images, 40)), "view 0 is the image as a frozen cache resizes it"
    for a in range(4):
        for b in range(a + 1, 4):
            assert not torch.equal(first[:, a], first[:, b])
    assert torch.equal(first, views.views_of(images, rows, 40, seed=5))
    assert not torch.equal(first[:, 1:], views.views_of(images, rows, 40, seed=6)[:, 1:])
    # a row's views do not depend on the batch it is cached in
    assert torch.equal(first[2:4], views.views_of(images[2:4], rows[2:4], 40, seed=5))


def test_each_epoch_draws_an_augmented_view_per_image_from_its_seed():
    views = CachedViews(5, 0.5)
    draw = views.epoch_draw(seed=1, epoch=3, rows=1000)
    assert draw.min() >= 1 and draw.max() <= 4 and set(np.unique(draw)) == {1, 2, 3, 4}
    assert np.array_equal(draw, views.epoch_draw(1, 3, 1000)) and not np.array_equal(draw, views.epoch_draw(1, 4, 1000))
    assert CachedViews(1, 0.5).epoch_draw(1, 3, 10) is None


def test_a_crop_keeps_at_least_its_area_share_and_the_aspect_range():
    views, rng = CachedViews(2, 0.35), np.random.default_rng(0)
    for _ in range(300):
        top, left, h, w = views.crop_box(rng, 64, 64)
        assert 0 <= top <= 64 - h and 0 <= left <= 64 - w
        assert h * w >= 0.35 * 64 * 64 * 0.9  # rounding of the sides
        assert 3 / 4 * 0.85 <= w / h <= 4 / 3 * 1.15


def test_the_starting_weights_compete_as_epoch_0_and_early_stopping_counts_from_them():
    result = TrainResult(selection="val_nway_r1")
    assert result.record({"epoch": 0, "val_nway_r1": 0.5})
    for epoch in (1, 2, 3):
        assert not result.record({"epoch": epoch, "val_nway_r1": 0.4})
    assert result.best_epoch == 0 and result.plateaued(3, patience=3) and not result.plateaued(2, patience=3)
    assert [row["epoch"] for row in result.trained_rows] == [1, 2, 3]


def _row(stages: int, seconds: float, scores: list[float]) -> dict:
    return {
        "stages": stages,
        "epoch_seconds": seconds,
        "scores": {f"run/{i}": s for i, s in enumerate(scores)},
        "mean_score": float(np.mean(scores)),
    }


def test_the_study_can_choose_the_frozen_trunk():
    frozen = _row(0, 10.0, [0.50, 0.52, 0.51, 0.53])
    # a tower whose gain is within the runs' spread of its paired differences: the cheaper frozen trunk wins
    noisy = _row(1, 15.0, [0.50, 0.56, 0.51, 0.53])
    choice = choose([frozen, noisy], max_cost=4.0)
    assert choice["stages"] == 0 and choice["tower_stages"] == 1 and choice["best_stages"] == 1
    # a clear gain on every run is chosen
    clear = _row(1, 15.0, [0.55, 0.57, 0.56, 0.58])
    assert choose([frozen, clear], max_cost=4.0)["stages"] == 1
    # a clear gain over the cost cap is not affordable
    costly = _row(2, 50.0, [0.60, 0.62, 0.61, 0.63])
    chosen = choose([frozen, costly], max_cost=4.0)
    assert chosen["stages"] == 0 and chosen["tower_stages"] is None and chosen["unaffordable"] == [2]


@pytest.mark.slow
def test_a_tuned_learning_tower_is_tuned_as_frozen_and_reported_against_its_frozen_start(tmp_path):
    """Through FullRun (smoke, tuned protocol, top-1 with cached views): the trials are the frozen parents, each
    report seed's learning tower starts from its seed's final frozen run, both are evaluated, and the report
    compares them; a trial stopped at the rung is compared with the choice there."""
    import json

    from pipeline import FullRun
    from tests.luigi_runs import build

    changes = ("train.trunk=top1", "train.trunk_views=2", "tuning.protocol=tuned")
    task = FullRun(profile="smoke", run_root=str(tmp_path), set=changes, variants=("ang_np_sym", "ours"))
    result, _ = build([task])
    assert result
    tuned = task.report().tuned_runs()
    ours = next(t for t in tuned if t.variant == "ours")
    tune = ours.requires()["tune"]
    selection = tune.load("selection")
    trial_runs = [run["train"] for trial in selection["trials"] if "seeds" in trial for run in trial["seeds"].values()]
    assert trial_runs and all(json.loads((Path(run) / "_meta.json").read_text())["summary"]["trunk"] == "frozen" for run in trial_runs)
    stopped = [i for i, trial in enumerate(selection["trials"]) if trial["stopped_at_rung"] is not None]
    assert stopped and set(selection["rung_comparisons"]) == {str(i) for i in stopped}
    learning, starts = ours.final_trains(), ours.extended_trains()
    assert [t.train_settings().trunk for t in learning] == ["top1"] * len(starts)
    for tower, start in zip(learning, starts, strict=True):
        assert tower.requires()["parent"].output_dir() == start.output_dir()
    runs = ours.load("runs")
    assert set(runs["frozen_start"]["evaluations"]) == set(runs["evaluations"])
    report = task.report()
    md = report.output_path("markdown").read_text()
    assert "## Does the image tower learn? Each method against its own frozen start" in md
    payload = json.loads(report.output_path("json").read_text())
    assert {entry["variant"] for entry in payload["frozen_start"]} == {"ang_np_sym", "ours"}
