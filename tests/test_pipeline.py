"""End to end: the smoke FullRun through luigi.build, reruns, ablations and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from pipeline import FullRun, PrepareDataset, Train
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import TABLE_1, TABLE_4, VARIANTS, paper_grid
from task_engine.task import META_FILE
from tests.luigi_runs import build
from tests.markdown_tables import section

SMOKE = PROFILES.get("smoke").settings()

pytestmark = pytest.mark.slow


def test_smoke_full_run_succeeds_and_reports_every_variant(smoke_run):
    task, result, ran, _ = smoke_run
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    report = task.report_path().read_text()
    assert "Table 1 — cross-modal retrieval (n-way Recall@1)" in report
    assert "Table 3 — neighbor preservation" in report
    table_1, table_4 = section(report, "Table 1"), section(report, "Table 4")
    for variant in TABLE_1:
        assert f"| {VARIANTS[variant].label} |" in table_1
    for variant in TABLE_4:
        assert f"| {VARIANTS[variant].label} |" in table_4
    assert "Ours − L_text" not in table_1, "the ablations have their own table"
    assert "Table 2" not in report, "the embedded dataset has one caption per image"
    payload = json.loads(task.report_path().with_name("report.json").read_text())
    assert set(payload["variants"]) == set(paper_grid(caption_groups=False))
    for variant in payload["variants"].values():
        for direction in ("i2t", "t2i"):
            assert 0.0 <= variant[direction]["mean"] <= 1.0
    assert task.report_path().with_name("report.html").exists()
    # every task of the graph ran once: one Train and one Evaluate per variant and seed, one table per space
    families = ran.families()
    n_runs = sum(len(SMOKE.seeds_for(variant)) for variant in paper_grid(caption_groups=False))
    assert n_runs > len(paper_grid(caption_groups=False)), "the headline rows run several seeds"
    shared = [t for t in ran.ran if t.get_task_family() == "Evaluate" and not t.point]
    assert len(shared) == n_runs
    # the tuned protocol: a Tune and TunedRuns per tuned variant; no Train or Evaluate ran twice
    tuned = [variant for variant in paper_grid(caption_groups=False) if VARIANTS[variant].search_space]
    assert families.count("Tune") == families.count("TunedRuns") == len(tuned) == 4
    for family in ("Train", "Evaluate"):
        ids = [task.task_id for task in ran.ran if task.get_task_family() == family]
        assert len(ids) == len(set(ids))
    assert families.count("NeighborTables") == 2
    assert families.count("PrepareDataset") == 1


def test_frozen_trunk_features_are_computed_once_and_shared(smoke_run):
    """The pooled trunk features serve every VSE variant and seed and the image-neighbor table; PVSE,
    which attends over the map, has one spatial feature task of its own."""
    _, _, ran, _ = smoke_run
    features = [task for task in ran.ran if task.get_task_family() == "TrunkFeatures"]
    assert sorted(task.spatial for task in features) == [False, True]
    pooled = next(task for task in features if not task.spatial)
    trains = [task for task in ran.ran if task.get_task_family() == "Train"]
    vse_trains = [task for task in trains if task.variant_spec().model == "vse"]
    assert len(vse_trains) >= 2
    for train in vse_trains:
        assert train.requires()["features"].output_dir() == pooled.output_dir()
    image_tables = [
        task for task in ran.ran if task.get_task_family() == "NeighborTables" and task.space == "image"
    ]
    assert [table.requires()["vectors"].output_dir() for table in image_tables] == [pooled.output_dir()]
    meta = json.loads((pooled.output_dir() / META_FILE).read_text())
    assert meta["summary"]["imagenet_weights_loaded"] is True
    for train in trains:
        summary = json.loads((train.output_dir() / META_FILE).read_text())["summary"]
        assert summary["trunk"] == "frozen" and summary["imagenet_weights_loaded"] is True


def test_every_output_has_metadata_with_seed_versions_and_wall_time(smoke_run):
    _, _, _, root = smoke_run
    metas = list(Path(root).glob(f"*/*/{META_FILE}"))
    assert len(metas) >= 12
    for path in metas:
        meta = json.loads(path.read_text())
        assert meta["signature"] == path.parent.name
        assert "torch" in meta["versions"] and meta["wall_time_s"] >= 0
    train_meta = [json.loads(p.read_text()) for p in Path(root).glob(f"Train/*/{META_FILE}")]
    planned = {
        (variant, seed) for variant in paper_grid(caption_groups=False) for seed in SMOKE.seeds_for(variant)
    }
    assert {(m["params"]["variant"], m["config"]["seed"]) for m in train_meta} >= planned
    assert not list(Path(root).glob("*/*.partial")), "no partial output may stay behind"


def test_rerun_with_nothing_changed_runs_nothing(smoke_run):
    task, _, _, root = smoke_run
    result, ran = build([FullRun(profile="smoke", run_root=str(root))])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert ran.families() == []


def test_changing_a_loss_weight_reruns_only_that_variant(smoke_run):
    task, _, _, root = smoke_run
    before = {p.parent for p in Path(root).glob(f"*/*/{META_FILE}")}
    changed = FullRun(
        profile="smoke", run_root=str(root), variant_overrides={"ours": {"within_modality": {"text_weight": 0.5}}}
    )
    result, ran = build([changed])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    per_seed = len(SMOKE.seeds_for("ours"))
    families = ran.families()
    # the shared protocol's runs of Ours, its tuning (its trials carry the new weight too) and what reads them
    assert families.count("Cocos") == per_seed and families.count("Tune") == families.count("TunedRuns") == 1
    assert set(families) == {"Cocos", "Evaluate", "FullRun", "Report", "SearchIndex", "Train", "Tune", "TunedRuns"}
    assert {t.variant for t in ran.ran if hasattr(t, "variant")} == {"ours"}
    after = {p.parent for p in Path(root).glob(f"*/*/{META_FILE}")}
    assert before <= after, "an ablation never overwrites an earlier result"
    new_train = [t for t in ran.ran if isinstance(t, Train)][0]
    assert new_train.meta()["config"]["variant"]["losses"][1]["params"]["alpha"] == 0.5, "hashed as the paper's α"


def test_finetuned_trunk_trains_end_to_end_on_pixels(smoke_run):
    """The paper's mode (one flag away from the CPU profiles' frozen trunk): the trunk is part of the model,
    trains on flipped pixels and no cached features are read; it starts from its frozen-trunk parent (a warm start,
    the default), which trained on the cached features without flips."""
    _, _, _, root = smoke_run
    finetune = {"trunk": "finetune", "backbone": "resnet18", "pretrained": False, "horizontal_flip": True}
    task = FullRun(
        profile="smoke",
        run_root=str(root),
        variants=["ang_np_sym"],
        seeds=[0],
        variant_overrides={"ang_np_sym": {"train": finetune}},
        protocol="shared",
    )
    result, ran = build([task])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    (train,) = [t for t in ran.ran if isinstance(t, Train) and t.train_settings().trunk == "finetune"]
    assert "features" not in train.requires()
    assert train.meta()["summary"]["trunk"] == "finetune"
    parent = train.requires()["parent"]
    assert parent in ran.ran and parent.train_settings().trunk == "frozen" and not parent.train_settings().horizontal_flip
    state = torch.load(train.output_dir() / "model_best.pt", weights_only=False)["model"]
    assert any(name.startswith("image_encoder.trunk.net.layer4") for name in state)


def _write_pairs(folder: Path, n_good: int) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n_good):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(path)
        rows.append({"pair_id": f"p{i}", "image_path": path.name, "text": f"story number {i} about things"})
    (folder / "broken.jpg").write_text("<html>not an image</html>")
    rows += [
        {"pair_id": "missing", "image_path": "nowhere.jpg", "text": "a text whose image is missing"},
        {"pair_id": "html", "image_path": "broken.jpg", "text": "a text whose image is an html page"},
        {"pair_id": "empty", "image_path": "img0.png", "text": ""},
        {"pair_id": "blank", "image_path": "img1.png", "text": "   \t "},
        {"pair_id": "p2", "image_path": "img3.png", "text": "a second row with an existing pair id"},
    ]
    table = folder / "pairs.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    return table


def test_bad_input_is_rejected_with_reasons_and_nothing_is_lost(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _write_pairs(raw, n_good=40)
    task = PrepareDataset(profile="smoke", run_root=str(tmp_path / "runs"), dataset="pairs", raw_dir=str(raw))
    result, _ = build([task])
    # 5 bad rows of 45 exceed the smoke budget (5%): the run stops with a clear message
    assert result.status == luigi.execution_summary.LuigiStatusCode.FAILED
    assert not task.complete()
    # the same input goes through once the user raises the budget
    lenient = PrepareDataset(
        profile="smoke", run_root=str(tmp_path / "runs"), dataset="pairs", raw_dir=str(raw), reject_budget=0.2
    )
    result, _ = build([lenient])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS


def test_bad_input_below_budget_goes_on_and_counts_each_reason(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _write_pairs(raw, n_good=200)
    task = PrepareDataset(profile="smoke", run_root=str(tmp_path / "runs"), dataset="pairs", raw_dir=str(raw))
    result, _ = build([task])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    out = task.output_dir()
    report = json.loads((out / "dataset_report.json").read_text())
    assert report["n_input"] == 205 and report["n_kept"] == 200
    assert report["rejects_by_reason"] == {
        "missing_image": 1,
        "not_an_image": 1,
        "empty_text": 1,
        "whitespace_text": 1,
        "duplicate_pair_id": 1,
    }
    rejects = pd.read_csv(out / "rejects.csv")
    assert sorted(rejects["pair_id"]) == sorted(["missing", "html", "empty", "blank", "p2"])
    manifest = pd.read_parquet(out / "manifest.parquet")
    images = task.images()
    # every surviving pair keeps its own text and image
    p5 = manifest.set_index("pair_id").loc["p5"]
    assert p5["text"] == "story number 5 about things"
    original = np.asarray(Image.open(raw / "img5.png").convert("RGB"))
    assert images[p5["cache_row"]].shape == (32, 32, 3)
    assert abs(float(images[p5["cache_row"]].mean()) - float(original.mean())) < 3.0
