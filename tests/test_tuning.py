"""The tuned protocol: one trial budget for every tuned variant, choices made on the validation split only,
reruns that train nothing, and the report's side-by-side headline (issue "a fair comparison")."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest

from pipeline import FullRun, Train, TrainDoc2Vec
from pipeline.profiles import PROFILES, SMOKE
from pipeline.steps.tuning import choose
from pipeline.tasks.tuning import Tune
from pipeline.validation import RunConfigurationError
from pipeline.variants import VARIANTS
from tests.luigi_runs import build

pytestmark = pytest.mark.slow

TUNED = ("ang_np_sym", "ours", "trip_np_sym", "ours_trip")


def tune_task(root: Path, variant: str) -> Tune:
    return Tune(profile="smoke", variant=variant, run_root=str(root))


def test_every_tuned_variant_gets_the_same_budget_of_trials_and_chooses_by_validation_rsum(smoke_run):
    _, result, _, root = smoke_run
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    for variant in TUNED:
        selection = tune_task(root, variant).load("selection")
        trials = selection["trials"]
        assert len(trials) == selection["budget"] == SMOKE.tuning.budget
        assert all(t["settings"] in VARIANTS[variant].search_space.points() for t in trials)
        assert selection["chosen"] == choose(trials)
        assert trials[selection["chosen"]]["val_rsum"] == max(t["val_rsum"] for t in trials)
        # each trial's score is its Train's own validation summary
        for trial, train in zip(trials, tune_task(root, variant).requires()["trials"], strict=True):
            assert train.meta()["summary"]["best_val_rsum"] == pytest.approx(trial["val_rsum"])


def test_the_report_shows_the_headline_under_both_protocols_and_the_sensitivity_figure(smoke_run):
    task, _, _, _ = smoke_run
    report = task.report_path()
    markdown = report.read_text()
    assert markdown.index("under each protocol") < markdown.index("Table 1")
    assert "| Metric | Δ shared [95% CI] | Δ tuned [95% CI] |" in markdown
    assert "The tuned protocol is the fair comparison" in markdown
    payload = json.loads(report.with_name("report.json").read_text())
    protocols = payload["protocols"]
    assert set(protocols["headlines"]) == {"shared", "tuned"} and protocols["fair"] == "tuned"
    assert protocols["headlines"]["shared"] == payload["headline"]
    assert protocols["strongest_baseline"] in ("ang_np_sym", "trip_np_sym")
    assert set(protocols["tuned_comparisons"]) >= {"ours_trip_vs_trip"}
    assert (report.parent / payload["figures"]["tuning_sensitivity"]["file"]).is_file()
    # every smoke run stops at its 2-epoch cap: each is flagged
    assert protocols["capped_runs"] and "Runs stopped by the epoch cap" in markdown


def test_a_rerun_with_the_same_space_retrains_nothing(smoke_run):
    _, _, _, root = smoke_run
    result, ran = build([tune_task(root, variant) for variant in TUNED])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert ran.families() == []


def test_a_trial_at_the_shared_settings_is_the_shared_run(smoke_run):
    _, _, _, root = smoke_run
    trials = tune_task(root, "ours").requires()["trials"]
    shared = Train(profile="smoke", variant="ours", seed=SMOKE.tuning.trial_seed, run_root=str(root))
    at_shared = [t for t in trials if t.train_settings() == shared.train_settings()]
    assert all(t.output_dir() == shared.output_dir() for t in at_shared)


def test_a_budget_above_a_search_space_is_refused_before_any_work(monkeypatch, tmp_path):
    monkeypatch.setitem(PROFILES, "smoke", replace(SMOKE, tuning=replace(SMOKE.tuning, budget=4)))
    with pytest.raises(RunConfigurationError, match="tuning budget is 4 trials per variant but the search space"):
        FullRun(profile="smoke", run_root=str(tmp_path))
    with pytest.raises(RunConfigurationError, match="unknown protocol 'tunned'"):
        FullRun(profile="smoke", run_root=str(tmp_path), protocol="tunned")


def test_tuning_never_reads_the_test_split(smoke_run, tmp_path):
    """Poison every test pair (its text, its image pixels, its trunk features and its Doc2Vec vector) in a
    copy of the run root and tune again: every trial trains to the same weights and scores, and the same
    trial is chosen."""
    _, _, _, root = smoke_run
    copy = tmp_path / "runs"
    shutil.copytree(root, copy)
    original = tune_task(root, "ang_np_sym")
    poisoned = tune_task(copy, "ang_np_sym")
    for train in poisoned.requires()["trials"]:
        shutil.rmtree(train.output_dir())
    shutil.rmtree(poisoned.output_dir())
    _poison_test_rows(poisoned.requires()["trials"][0])

    result, ran = build([poisoned])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert sorted(set(ran.families())) == ["Train", "Tune"]
    assert poisoned.load("selection")["trials"] == original.load("selection")["trials"]
    assert poisoned.load("selection")["chosen"] == original.load("selection")["chosen"]
    for before, after in zip(original.requires()["trials"], poisoned.requires()["trials"], strict=True):
        assert (after.output_path("checkpoint")).read_bytes() == before.output_path("checkpoint").read_bytes()


def _poison_test_rows(train: Train) -> None:
    """Overwrite, in place, every stored trace of the test pairs a Train could read."""
    inputs = train.requires()
    split = inputs["split"]
    manifest = split.manifest()
    test = (manifest["split"] == "test").to_numpy()
    rows = manifest.loc[test, "cache_row"].to_numpy()
    assert not set(rows) & set(manifest.loc[~test, "cache_row"]), "a test image is shared with another split"
    rng = np.random.default_rng(7)
    manifest.loc[test, "text"] = [f"poisoned {i} " + " ".join(rng.choice(list("qxzjv"), 6)) for i in range(test.sum())]
    manifest.to_parquet(split.output_path("manifest"), index=False)
    for shard in inputs["prepared"].requires():
        cache = np.load(shard.output_path("images"), mmap_mode="r+")
        cache[rows] = rng.integers(0, 255, cache[rows].shape, dtype=np.uint8)
        cache.flush()
    features = np.load(inputs["features"].output_path("features"), mmap_mode="r+")
    features[rows] = rng.normal(size=features[rows].shape).astype(features.dtype)
    features.flush()
    doc2vec = train.clone(TrainDoc2Vec)
    vectors = np.load(doc2vec.output_path("doc_vectors"), mmap_mode="r+")
    vectors[np.flatnonzero(test)] = rng.normal(size=vectors[np.flatnonzero(test)].shape)
    vectors.flush()
    assert pd.read_parquet(split.output_path("manifest"))["text"][test].str.startswith("poisoned").all()


def test_export_takes_the_shared_run_or_the_tuned_choice(smoke_run, tmp_path):
    from serving.cli import main

    _, _, _, root = smoke_run
    chosen = tune_task(root, "ours").load("selection")["chosen_settings"]["train"]["learning_rate"]
    for protocol, expected in (("shared", SMOKE.train.learning_rate), ("tuned", chosen)):
        out = tmp_path / protocol
        assert main(["export", str(root), str(out), "--variant", "ours", "--protocol", protocol]) == 0
        assert json.loads((out / "bundle.json").read_text())["train"]["learning_rate"] == expected
