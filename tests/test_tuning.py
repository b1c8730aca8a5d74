"""The tuned protocol: one trial budget for every tuned variant, choices made on the validation split only,
reruns that train nothing, and the report's side-by-side headline (issues "a fair comparison" and 30)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest

from pipeline import FullRun, Train, TrainDoc2Vec
from pipeline.config.checks import RunConfigurationError
from pipeline.config.profiles import PROFILES
from pipeline.config.variant_spec import SearchSpace
from pipeline.config.variants import VARIANTS
from pipeline.steps.tuning import choose
from pipeline.tasks.tuning import Tune
from tests.luigi_runs import build

SMOKE = PROFILES.get("smoke").settings()

pytestmark = pytest.mark.slow

TUNED = ("ang_np_sym", "ours", "trip_np_sym", "ours_trip")


def tune_task(root: Path, variant: str) -> Tune:
    return Tune(profile="smoke", variant=variant, run_root=str(root))


def test_every_tuned_variant_gets_the_same_budget_of_trials_and_chooses_by_the_seed_mean(smoke_run):
    _, result, _, root = smoke_run
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    for variant in TUNED:
        tune = tune_task(root, variant)
        selection = tune.load("selection")
        trials = selection["trials"]
        assert len(trials) == selection["budget"] == SMOKE.tuning.budget
        assert all(t["point"] in VARIANTS[variant].search_space.grid() for t in trials)
        assert selection["metric"]["name"] == SMOKE.train.selection == "val_nway_r1"
        finished = {i: t["score"] for i, t in enumerate(trials) if "score" in t}
        # halving: every trial ran the first rung with both seeds; the best two of three finished
        assert all(len(t["rungs"][0]["scores"]) == len(SMOKE.tuning.trial_seeds) for t in trials)
        assert len(finished) == 2 and sum(t["stopped_at_rung"] == 0 for t in trials) == 1
        assert (selection["chosen"], selection["runner_up"]) == choose(finished, True)
        # each finished trial's score is the mean of its seeds' Train summaries
        for trial in finished:
            seeds = trials[trial]["seeds"]
            assert trials[trial]["score"] == pytest.approx(np.mean([r["score"] for r in seeds.values()]))
            for record in seeds.values():
                summary = json.loads((Path(record["train"]) / "_meta.json").read_text())["summary"]
                assert summary["best_score"] == record["score"]
        comparison = selection["comparison"]
        assert comparison["method_seeds"] == comparison["paired_seeds"] == list(SMOKE.tuning.trial_seeds)
        assert selection["tie"] == (not comparison["resolved"])
        assert selection["chosen_settings"] == SearchSpace.overrides(selection["chosen_point"])


def test_the_report_shows_the_headline_under_both_protocols_and_the_sensitivity_figure(smoke_run):
    task, _, _, _ = smoke_run
    report = task.report_path()
    markdown = report.read_text()
    sections = ["Against the paper's own effect", "Did the models learn?", "under each protocol", "## Table 1"]
    positions = [markdown.index(heading) for heading in sections]
    assert positions == sorted(positions), "the report's sections in this order: " + ", ".join(sections)
    # the first table reads each headline comparison against the paper's effect, under both protocols; the
    # next is the headline, tuned beside shared
    tables = markdown.split("\n|")
    assert tables[1].startswith(" Protocol | Comparison | Metric | Δ [95% CI] |")
    headline = markdown[markdown.index("under each protocol") :]
    assert headline.split("\n|")[1].startswith(" Metric | Δ tuned [95% CI] | Δ shared [95% CI] |")
    assert "Read the tuned protocol" in markdown
    payload = json.loads(report.with_name("report.json").read_text())
    protocols = payload["protocols"]
    assert set(protocols["headlines"]) == {"shared", "tuned"} and protocols["fair"] == "tuned"
    assert protocols["headlines"]["tuned"] == payload["headline"]
    assert protocols["strongest_baseline"] in ("ang_np_sym", "trip_np_sym")
    assert set(protocols["tuned_comparisons"]) >= {"ours_trip_vs_trip"}
    assert (report.parent / payload["figures"]["tuning_sensitivity"]["file"]).is_file()
    assert {row["variant"] for row in payload["chance"]["tuned"]} == set(TUNED)
    # smoke runs end at their 2-epoch cap: the shared ones are flagged; a tuned one was continued first
    capped = protocols["capped_runs"]
    assert capped and "Runs stopped by the epoch cap" in markdown
    assert all(c["cap"] == SMOKE.tuning.extended_cap(SMOKE.train.epochs) for c in capped if c["protocol"] != "shared")
    for variant in TUNED:
        for seed, record in tune_task(task.run_root, variant).load("selection")["trials"][0].get("seeds", {}).items():
            if record["max_epochs"] > SMOKE.train.epochs:
                assert json.loads((Path(record["train"]) / "_meta.json").read_text())["summary"]["continued_from"], seed


def test_a_rerun_with_the_same_space_retrains_nothing(smoke_run):
    _, _, _, root = smoke_run
    result, ran = build([tune_task(root, variant) for variant in TUNED])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert ran.families() == []


def test_a_trial_at_the_shared_settings_is_the_shared_run(smoke_run):
    _, _, _, root = smoke_run
    tune = tune_task(root, "ours")
    at_defaults = {"train.learning_rate": SMOKE.train.learning_rate, "angular.alpha_degrees+within_modality.alpha_degrees": 45.0, "within_modality.weight_scale": 1.0}
    assert at_defaults in VARIANTS["ours"].search_space.grid()
    shared = Train(profile="smoke", variant="ours", seed=SMOKE.tuning.trial_seeds[0], run_root=str(root))
    assert tune.trial_train(at_defaults, SMOKE.tuning.trial_seeds[0]).output_dir() == shared.output_dir()


def test_a_budget_above_a_search_space_is_refused_before_any_work(tmp_path):
    with pytest.raises(RunConfigurationError, match="tuning budget is 10 trials per variant but the search space"):
        FullRun(profile="smoke", run_root=str(tmp_path), set=("tuning.budget=10",))
    with pytest.raises(RunConfigurationError, match=r"^--protocol: must be one of shared, tuned, both, got 'tunned'$"):
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
    schedule = [poisoned.train_of(key) for key in poisoned.schedule().visited]
    assert any(train.continue_from_epochs for train in schedule), "the schedule continues runs"
    for train in schedule:
        shutil.rmtree(train.output_dir(), ignore_errors=True)
    shutil.rmtree(poisoned.output_dir())
    _poison_test_rows(schedule[0])

    result, ran = build([poisoned])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert sorted(set(ran.families())) == ["Train", "Tune"]

    def without_paths(selection: dict) -> dict:
        return json.loads(json.dumps(selection).replace(str(copy), str(root)))

    assert without_paths(poisoned.load("selection")) == original.load("selection")
    for key in original.schedule().visited:
        before, after = original.train_of(key), poisoned.train_of(key)
        assert after.output_path("checkpoint").read_bytes() == before.output_path("checkpoint").read_bytes()
        assert after.output_path("validation_ranks").read_bytes() == before.output_path("validation_ranks").read_bytes()


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

    task, _, _, root = smoke_run
    chosen = tune_task(root, "ours").load("selection")["chosen_settings"]["train"]["learning_rate"]
    # other tests add reports to this run root: name the smoke run's own (export would take the newest)
    report = task.requires().signature()
    for protocol, expected in (("shared", SMOKE.train.learning_rate), ("tuned", chosen)):
        out = tmp_path / protocol
        assert main(["export", str(root), str(out), "--variant", "ours", "--protocol", protocol, "--report", report]) == 0
        assert json.loads((out / "bundle.json").read_text())["train"]["learning_rate"] == expected


def test_the_within_modality_tradeoff_scores_every_scale_against_zero(smoke_run):
    """Ours at the tuned choice with its within-modality weights scaled 0 and 1: a row per scale, the
    intervals against scale 0, a figure; scale 1 at the chosen point is a run the tuned protocol made."""
    from pipeline import WithinModalityTradeoff

    _, _, _, root = smoke_run
    task = WithinModalityTradeoff(profile="smoke", run_root=str(root), scales=[0.0, 1.0], seeds=[0])
    result, ran = build([task])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    table = task.load("json")
    assert [row["scale"] for row in table["rows"]] == [0.0, 1.0]
    zero, one = (row["metrics"] for row in table["rows"])
    assert set(one) >= {"i2t", "t2i"} and zero["i2t"]["difference"] == 0.0
    assert one["i2t"]["ci_low"] <= one["i2t"]["difference"] <= one["i2t"]["ci_high"]
    assert task.output_path("figure").stat().st_size > 0 and "| scale |" in task.output_path("markdown").read_text()
    with pytest.raises(ValueError, match="must include 0"):
        WithinModalityTradeoff(profile="smoke", run_root=str(root), scales=[1.0, 2.0])
