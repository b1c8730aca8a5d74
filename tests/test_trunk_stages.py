"""An image tower that learns its top stages (issue 45): the cache under the trained stages is the trunk's own
forward, a top-stages model trains through the pipeline, records what trained and from which weights, and
exports to a bundle that embeds from pixels exactly as its Evaluate did; the settings are checked when planned."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import luigi
import numpy as np
import pytest
import torch

from common.hashing import file_sha256
from common.settings import significant
from models.backbones import build_trunk
from models.config import ModelConfig, trunk_mode
from models.encoders import ImageEncoder, frozen_trunk_features, normalised_pixels, resize_batch
from models.settings import TrainSettings
from models.training.setup import parameter_groups
from pipeline import Evaluate
from pipeline.config.checks import RunConfigurationError
from pipeline.config.plan import resolve_plan
from pipeline.steps.features import trunk_feature_batches
from serving.bundle import export_bundle, load_bundle
from serving.embed import Embedder
from serving.runs import bundle_parts


# resnet18's ImageNet weights are not on PyPI: a random init (asked for) is cut the same way
@pytest.mark.parametrize(("backbone", "pretrained"), [("efficientnet_lite0", True), ("resnet18", False)])
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_cache_under_the_trained_stages_is_the_trunks_own_forward(backbone, pretrained, stages):
    """What TrunkFeatures stores for ``top<k>`` equals stem and stages run one by one on the same pixels, and the
    model's top stages on it give the whole trunk's feature map."""
    size = 64
    images = np.random.default_rng(0).integers(0, 256, (10, size, size, 3), dtype=np.uint8)
    batches, trunk = trunk_feature_batches(
        images, backbone, pretrained, size, False, seed=0, batch_size=4, trained_stages=stages
    )
    cache = np.concatenate(list(batches))
    trunk = trunk.eval()
    mean, std = torch.tensor(trunk.mean).view(1, 3, 1, 1), torch.tensor(trunk.std).view(1, 3, 1, 1)
    pixels = normalised_pixels(torch.from_numpy(images), mean, std).contiguous(memory_format=torch.channels_last)
    parts = trunk.stages()
    with torch.no_grad():
        expected = parts.stem(pixels)
        for stage in parts.stages[: len(parts.stages) - stages]:
            expected = stage(expected)
        whole = trunk(pixels)
        again = trunk.top(stages)(torch.from_numpy(cache))
    assert cache.dtype == np.float32 and np.array_equal(cache, expected.numpy())
    np.testing.assert_allclose(again.numpy(), whole.numpy(), atol=1e-4, rtol=1e-4)
    assert trunk.stage_count == (7 if backbone == "efficientnet_lite0" else 4)


def test_a_top_stages_tower_holds_only_its_stages_and_their_imagenet_weights():
    torch.manual_seed(0)
    tower = ImageEncoder(ModelConfig("efficientnet_lite0", True, 16, trunk="top2"))
    imagenet = build_trunk("efficientnet_lite0", True)
    assert tower.pretrained_loaded and tower.weights_source["file"].startswith("efficientnet-lite0")
    top = dict(imagenet.top(2).named_parameters())
    assert {name: p.shape for name, p in tower.trunk.named_parameters()} == {name: p.shape for name, p in top.items()}
    assert all(torch.equal(p, top[name]) for name, p in tower.trunk.named_parameters()), "starts from ImageNet"
    assert len(tower.trunk_parameters()) == len(top)
    # frozen BatchNorm keeps its running statistics in training; batch statistics otherwise
    tower.frozen_batchnorm = True
    tower.train()
    norms = [m for m in tower.trunk.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms and not any(m.training for m in norms) and tower.project.training
    tower.frozen_batchnorm = False
    tower.train()
    assert all(m.training for m in norms)


def test_the_trunk_learning_rate_scale_puts_the_trunk_in_a_group_of_its_own():
    torch.manual_seed(0)
    tower = ImageEncoder(ModelConfig("efficientnet_lite0", False, 16, trunk="top1"))
    settings = TrainSettings(trunk="top1", horizontal_flip=False, learning_rate=1e-3, trunk_learning_rate_scale=0.1)
    rest, trunk = parameter_groups(tower, settings)
    assert trunk["lr"] == pytest.approx(1e-4) and rest["lr"] == 1e-3
    assert len(trunk["params"]) == len(tower.trunk_parameters()) and len(rest["params"]) == 2  # the projection
    assert parameter_groups(tower, replace(settings, trunk_learning_rate_scale=1.0)) == list(tower.parameters())


def test_trunk_settings_act_only_when_the_trunk_trains():
    """Under a frozen trunk the trunk's own settings change nothing, so no hash holds them at any value; when it
    trains, every value of them is hashed (issue 53: a setting with no effect changes no hash)."""
    frozen = TrainSettings(trunk="frozen", horizontal_flip=False)
    trunk_only = ("trunk_batchnorm", "trunk_learning_rate_scale", "trunk_warm_start", "trunk_epochs",
                  "warm_start_learning_rate_scale", "trunk_views", "trunk_crop_scale")
    changed = replace(frozen, trunk_learning_rate_scale=0.1, trunk_batchnorm="batch", trunk_views=4, trunk_epochs=3)
    assert significant(changed) == significant(frozen) and not set(trunk_only) & set(significant(frozen))
    top = replace(frozen, trunk="top1")
    assert {"trunk_batchnorm", "trunk_learning_rate_scale", "trunk_warm_start", "trunk_epochs", "trunk_views"} <= set(significant(top))
    assert "trunk_crop_scale" not in significant(top), "one view: no crops, so their scale does not act"
    assert significant(replace(top, trunk_views=3))["trunk_crop_scale"] == 0.35
    assert "trunk_epochs" not in significant(replace(top, trunk_warm_start=False))
    assert trunk_mode("top3").trained_stages == 3 and trunk_mode("finetune").trained_stages is None
    for bad in ("top0", "top", "top-1", "top02", "topx"):
        with pytest.raises(ValueError, match="top<k>"):
            trunk_mode(bad)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (("train.trunk=top8",), "has 7 stages"),
        (("train.trunk=top2", "train.backbone=timm:convnext_atto"), "not cut into stages"),
        (("train.trunk=top2", "train.horizontal_flip=true"), "horizontal_flip needs pixels"),
        (("train.trunk_batchnorm=sometimes",), "trunk batchnorm mode"),
        (("train.trunk_learning_rate_scale=0",), "trunk_learning_rate_scale"),
    ],
)
def test_a_trunk_setting_the_run_cannot_train_is_refused_when_planned(changes, said):
    with pytest.raises(RunConfigurationError, match=said):
        resolve_plan("smoke", changes)


def test_the_finetune_profile_changes_only_the_trunk_its_resolution_and_the_grid():
    plan, demo = resolve_plan("demo-finetune"), resolve_plan("demo")
    assert plan.grid == ("ang_np_sym", "ours", "trip_np_sym", "ours_trip") and plan.protocols() == ("tuned",)
    t = plan.settings.train
    assert (t.trunk, t.image_size, t.trunk_views, t.trunk_epochs) == ("top1", 160, 5, 6)
    assert t.trunk_warm_start and t.trunk_batchnorm == "frozen" and t.trunk_learning_rate_scale == 1.0
    assert replace(t, trunk="frozen", image_size=96, trunk_views=1, trunk_epochs=10) == demo.settings.train
    assert plan.settings.data.image_cache_size == 160 and plan.settings.data.generated_options["image_size"] == 160
    assert plan.settings.tuning == replace(demo.settings.tuning, protocol="tuned")
    assert all(plan.seeds_for(v) == (0, 1, 2) for v in plan.grid)
    assert resolve_plan("paper").settings.train.trunk == "finetune", "the paper profile keeps the whole trunk training"


@pytest.mark.slow
def test_a_top_stages_model_trains_exports_and_reloads_to_the_same_embeddings(tmp_path):
    """Through the pipeline: a smoke Evaluate of a top-1 model warm-started from its frozen parent, with cached views,
    its Train folder exported as a bundle that embeds the test split from pixels (stages under the trained one from
    the bundle's trunk) into Evaluate's vectors."""
    root = tmp_path / "runs"
    changes = ("train.trunk=top1", "train.trunk_learning_rate_scale=0.5", "train.trunk_views=3")
    task = Evaluate(profile="smoke", set=changes, variant="ang_np_sym", seed=0, run_root=str(root))
    assert luigi.build([task], local_scheduler=True, workers=1, log_level="WARNING")
    train, features = task.requires()["train"], task.requires()["features"]
    record = json.loads(train.output_path("model").read_text())
    assert record["encoder"]["trunk"] == "top1" and record["frozen_trunk"]["weights_loaded"] is True
    training = record["trunk_training"]
    assert training["trained_stages"] == 1 and training["stages"] == 7 and training["batchnorm"] == "frozen"
    assert training["learning_rate_scale"] == 0.5 and training["horizontal_flip"] is False
    assert training["starting_weights"]["imagenet"] is True
    assert training["starting_weights"]["sha256"] == record["frozen_trunk"]["weights"]["sha256"]
    assert training["views"] == {"count": 3, "crop_scale": 0.35, "crop_ratio": [0.75, 4 / 3], "flip": 0.5}
    assert features.meta()["config"]["trained_stages"] == 1 and features.features().dtype == np.float32
    assert features.features().shape[1] == 3, "a map per cached view"
    assert train.meta()["summary"]["trunk"] == "top1"

    # the warm start: the parent is the same run with the frozen trunk, named by the record and the hash, and its
    # best model is what the run validates as epoch 0
    parent = train.requires()["parent"]
    assert parent.train_settings().trunk == "frozen" and parent.signature() in {task.signature() for task in train.upstream()}
    assert training["warm_start"] == {
        "parent": parent.signature(),
        "checkpoint_sha256": file_sha256(parent.output_path("checkpoint")),
        "epoch": parent.meta()["summary"]["best_epoch"],
    }
    first = next(csv.DictReader(train.output_path("history").open()))
    assert int(first["epoch"]) == 0 and float(first["val_nway_r1"]) == pytest.approx(parent.meta()["summary"]["best_score"], abs=1e-6)

    bundle_dir = tmp_path / "bundle"
    export_bundle(bundle_parts(train.output_dir(), task.output_dir()), bundle_dir)
    bundle = load_bundle(bundle_dir)
    manifest = task.requires()["split"].manifest()
    test = manifest.iloc[task.load("test_rows")]
    embedder = Embedder(bundle)
    images = embedder.embed_pixels(task.requires()["prepared"].images()[test["cache_row"].to_numpy()])
    texts = embedder.embed_texts(test["text"].tolist())
    np.testing.assert_allclose(images[:, 0], task.load("test_image"), atol=1e-5)
    np.testing.assert_allclose(texts[:, 0], task.load("test_text"), atol=1e-6)
    assert bundle.manifest["image"]["trunk"] == "top1"

    # the same pixels through the bundle's trunk and the trained stages by hand
    pixels = torch.from_numpy(np.asarray(task.requires()["prepared"].images()[test["cache_row"].to_numpy()[:4]]))
    mean, std = torch.tensor(bundle.image["mean"]).view(1, 3, 1, 1), torch.tensor(bundle.image["std"]).view(1, 3, 1, 1)
    with torch.no_grad():
        cached = frozen_trunk_features(bundle.trunk, resize_batch(pixels, 32), mean, std, False, 1)
        by_hand = bundle.model.encode_image(cached)
    np.testing.assert_allclose(by_hand.numpy(), task.load("test_image")[:4], atol=1e-5)


@pytest.mark.parametrize(
    "no_op",
    ["train.trunk_learning_rate_scale=0.5", "train.trunk_batchnorm=batch", "train.trunk_views=4", "train.trunk_epochs=3",
     "train.trunk_warm_start=false", "train.warm_start_learning_rate_scale=0.5"],
)
def test_a_trunk_setting_under_the_frozen_trunk_reruns_nothing(no_op, tmp_path):
    """A setting that does not act under the chosen mode changes no hash: with the frozen trunk (smoke's), the
    plan's every task keeps its output path, so nothing reruns (issue 53)."""
    from pipeline import FullRun
    from pipeline.run.status import walk

    before = FullRun(profile="smoke", run_root=str(tmp_path))
    after = FullRun(profile="smoke", run_root=str(tmp_path), set=(no_op,))
    paths = [sorted(str(task.output_dir().relative_to(tmp_path)) for task in walk(run)) for run in (before, after)]
    assert paths[0] == paths[1] and sum(path.startswith("Train/") for path in paths[0]) > 5


def test_the_tradeoff_trains_a_learning_tower_from_its_frozen_parents_as_the_tuned_runs_do(tmp_path):
    """Under a warm-started profile the within-modality trade-off first trains each scale's frozen parent (the run
    TunedRuns continues to the extended cap when capped) and the learning tower from it, not a tower whose
    parent stopped at the plain cap."""
    from pipeline import WithinModalityTradeoff

    task = WithinModalityTradeoff(
        profile="smoke", set=("train.trunk=top1",), settings_from="shared", scales=[0.0, 1.0], seeds=[0],
        run_root=str(tmp_path),
    )
    towers = [t for group in task.trains().values() for t in group]
    first = [t for group in task.first_trains().values() for t in group]
    assert all(t.train_settings().warm_started for t in towers)
    assert not any(t.train_settings().warm_started for t in first)
    assert [t.output_dir() for t in first] == [t.parent().output_dir() for t in towers]
