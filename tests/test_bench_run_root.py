"""The benchmark scripts that read a run root, in their quick modes, on the session's smoke run (issue 47,
item 7; the list of cited scripts and their tests is tests/test_bench_quick.py's ``QUICK_TESTS``).

Those that only read (the audit, the evaluation and run-root comparisons, the neighbor recall) read the smoke
root itself; the studies that train (angular, selection metric, tuning stability, trunk stages) share one copy
of it, so their new Trains never reach the root the other tests read, and each reuses what the smoke FullRun
already made (the profile's own Trains and Tunes). Each runs through its ``main`` in this process. What is
checked is the path and the output's shape and invariants, never a figure of the study.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.luigi_runs import copied_root

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
# the scripts import one another by bare name, as they do when run as ``python benchmarks/x.py``
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

pytestmark = pytest.mark.slow


def script(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.{name}")


@pytest.fixture(autouse=True)
def torch_threads():
    """A study's training sets one torch thread in the process that trains: this one."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def study_root(smoke_run, tmp_path_factory) -> Path:
    """One copy of the smoke run root for the studies that train."""
    return copied_root(smoke_run, tmp_path_factory.mktemp("study"))


def test_bench_audit_quick(smoke_run, tmp_path):
    out = tmp_path / "audit.json"
    payload = script("bench_audit").main(["--quick", "--run-root", str(smoke_run[3]), "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(payload))
    assert payload["seeds"] == [0, 1, 2] and set(payload["shares"]) == {"0.05", "0.1"} and payload["n_pairs"] > 0
    for entry in payload["shares"].values():
        assert len(entry["swapped"]) == 3 and min(entry["swapped"]) >= 2
        for name in ("audit (LEMoN-style)", "cross-modal cosine only", "random"):
            auroc = entry[name]["auroc"]
            assert 0 <= auroc["min"] <= auroc["mean"] <= auroc["max"] <= 1


def test_compare_evaluations_quick(smoke_run):
    main = script("compare_evaluations").main
    root = str(smoke_run[3])
    results = main(["--quick", "--run-root", root, "--a", "ours", "{}", "--b", "ang_np_sym", "{}"])
    assert set(results) == {"i2t", "t2i", "NP image", "NP text"}
    for r in results.values():
        assert r["difference"] == pytest.approx(r["method_mean"] - r["baseline_mean"])
        assert r["ci_low"] <= r["difference"] <= r["ci_high"]
    same = main(["--quick", "--run-root", root, "--a", "ours", "{}", "--b", "ours", "{}"])
    assert all(r["difference"] == 0 and r["ci_low"] == r["ci_high"] == 0 for r in same.values())
    with pytest.raises(SystemExit, match="no Evaluate output of nonsense"):
        main(["--quick", "--run-root", root, "--a", "nonsense", "{}", "--b", "ours", "{}"])


def copy_results(root: Path, to: Path) -> Path:
    """What compare_run_roots reads of ``root``: every Evaluate's ``_meta.json`` and ``metrics.json``, and
    the Reports' ``report.json``."""
    for pattern in ("Evaluate/*/_meta.json", "Evaluate/*/metrics.json", "Report/*/report.json"):
        for path in root.glob(pattern):
            target = to / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return to


def test_compare_run_roots_finds_a_changed_number_and_nothing_else(smoke_run, tmp_path, capsys):
    main = script("compare_run_roots").main
    root = smoke_run[3]
    after = copy_results(root, tmp_path / "after")
    metrics = sorted(after.glob("Evaluate/*/metrics.json"))[0]
    values = json.loads(metrics.read_text())
    values["wall_time_s"] = 12345.0  # volatile: never a difference
    metrics.write_text(json.dumps(values))
    assert main([str(root), str(after)]) == 0
    assert " equal" in capsys.readouterr().out
    values["retrieval"]["i2t"] += 0.01
    metrics.write_text(json.dumps(values))
    assert main([str(root), str(after)]) == 1
    assert "/retrieval/i2t:" in capsys.readouterr().out


def test_bench_neighbor_recall_quick(smoke_run):
    (table,) = [
        meta.parent
        for meta in smoke_run[3].glob("NeighborTables/*/_meta.json")
        if json.loads(meta.read_text())["params"]["space"] == "text"
    ]
    rows = script("bench_neighbor_recall").main(["--quick", str(table / "index.ann")])
    assert [(row["n_trees"], row["search_k"]) for row in rows] == [(5, 100), (5, 400), (10, 200), (10, 800)]
    for fewer, more in zip(rows[::2], rows[1::2], strict=True):
        # the same trees searched deeper see a superset of candidates, ranked by exact distance
        assert 0 < fewer["recall@20"] <= more["recall@20"] <= 1
        assert fewer["recall@10"] <= more["recall@10"]


def test_angular_study_quick(smoke_run, study_root, tmp_path):
    out = tmp_path / "angular.json"
    assert script("angular_study").main(["--quick", "--root", str(study_root), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    runs = {(run["factor"], run["variant"]): run for run in result["runs"]}
    assert set(runs) == {("profile", "ang_np_sym"), ("profile", "trip_np_sym"), ("angular form", "ang_np_sym")}
    assert [row["factor"] for row in result["summary"]] == ["profile", "angular form"]
    assert "ang_minus_trip" in result["summary"][0]
    for run in runs.values():
        assert run["seed"] == 0 and 0 <= run["val_5way_i2t"] <= 1 and run["val_medr_t2i"] >= 1
    # the profile's own settings are the smoke FullRun's Trains, reused, not trained again
    made = {path.name for path in (smoke_run[3] / "Train").iterdir()}
    assert Path(runs[("profile", "ang_np_sym")]["train_dir"]).name in made
    assert Path(runs[("angular form", "ang_np_sym")]["train_dir"]).name not in made


def test_selection_metric_study_quick(study_root, tmp_path):
    module = script("selection_metric_study")
    payload = module.main(["--quick", "--root", str(study_root), "--json", str(tmp_path / "selection.json")])
    assert payload["profile"] == "smoke" and payload["seeds"] == [0, 1] and payload["epochs"] == 2
    report = payload["variants"]["ang_np_sym"]
    assert len(report["settings"]) == 2 and set(report["metrics"]) == set(module.METRICS)
    for metric in report["metrics"].values():
        assert all(score is not None for scores in metric["scores"].values() for score in scores)
        assert 1 <= metric["mean_best_epoch"] <= 2 and metric["setting_pairs"] == 1
        assert set(metric["choice_agreement"]) == {"1_seed"}  # two seeds: one-seed tunings only
    saved = sorted(path.name for path in (study_root / "_selection_study_quick").glob("*.npz"))
    assert len(saved) == 4  # two settings x two seeds, kept for a rerun


def test_tuning_stability_quick(study_root, tmp_path):
    out = tmp_path / "tuning.json"
    result = script("tuning_stability").main(
        ["--quick", "--root", str(study_root), "--trial-seeds", "2", "--json", str(out)]
    )
    assert json.loads(out.read_text()) == result
    assert result["repeat"] == "trial seeds [2] instead of [0, 1]"
    (row,) = result["variants"]
    assert row["variant"] == "ang_np_sym" and row["same"] == (row["profile_choice"] == row["repeat_choice"])
    assert result["same"] == int(row["same"]) and row["repeat_trials"]


def test_trunk_stages_study_quick(study_root, tmp_path, monkeypatch):
    """The study as its docstring runs it (``--quick``: the smoke profile, k 0 and 1; its ``main`` reads
    ``sys.argv``), with one Luigi worker: a second would be forked from this process, whose torch threads
    earlier tests started, and hang."""
    out = tmp_path / "trunk_stages.json"
    argv = ["trunk_stages_study.py", "--quick", "--workers", "1", "--root", str(study_root), "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    script("trunk_stages_study").main()
    result = json.loads(out.read_text())
    assert result["profile"] == "smoke" and [row["stages"] for row in result["rows"]] == [0, 1]
    assert [row["trunk"] for row in result["rows"]] == ["frozen", "top1"]
    for row in result["rows"]:
        assert row["epoch_seconds"] > 0 and len(row["scores"]) == 2
    assert all(epoch in (1, 2) for epoch in result["rows"][0]["best_epochs"]), "the frozen parents: smoke's two epochs"
    # the learning tower starts from its parent, which competes as epoch 0: it never scores below it on validation
    assert all(difference >= 0 for difference in result["rows"][1]["vs_frozen"])
    assert result["choice"]["stages"] in (0, 1) and result["choice"]["why"]
