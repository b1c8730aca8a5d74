"""The run plan on real smoke runs: ``--set`` moves only the outputs that use a setting, a code change makes its
task and everything downstream stale (and nothing upstream), ``plan`` says so before running, sweeps."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import luigi
import pytest

from pipeline import FullRun
from pipeline.run.status import DONE, KEPT, STALE, task_plan
from task_engine import code_versions
from task_engine.task import META_FILE
from tests.luigi_runs import build, copied_root

#: Train's recorded code version (a test bumps it by one)
TRAIN = code_versions.version_of("Train")

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = {"PrepareShard", "PrepareDataset", "Deduplicate", "Split", "TrainDoc2Vec", "TrainWordVectors", "TrunkFeatures"}
SMALL_GRID = {"profile": "smoke", "variants": ["ang_np_sym"], "seeds": [0], "protocol": "shared"}


def folders(root: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for meta in root.glob(f"*/*/{META_FILE}"):
        out.setdefault(meta.parent.parent.name, set()).add(meta.parent.name)
    return out


def metas(root: Path) -> dict[Path, int]:
    return {meta: meta.stat().st_mtime_ns for meta in root.glob(f"*/*/{META_FILE}")}


def linked_plan(report) -> dict:
    """The run plan a Report links (``report.json``'s ``run_plan.file``, in the run root), as its summary."""
    link = report.load("json")["run_plan"]
    assert link["plan"] == report.plan_id and not report.output_path("json").with_name("run_plan.json").exists()
    return json.loads((Path(report.run_root) / link["file"]).read_text())["summary"]


@pytest.mark.slow
def test_set_changes_move_only_the_outputs_of_the_tasks_that_use_them(smoke_run, tmp_path):
    root = copied_root(smoke_run, tmp_path)
    before = folders(root)
    changes = ("neighbors.k=10", "variants.*.train.learning_rate=3e-4")
    run = FullRun(profile="smoke", run_root=str(root), set=changes)
    planned = task_plan(run.requires())
    assert {p.family for p in planned if p.status == DONE} >= UPSTREAM
    assert all(p.status == DONE for p in planned if p.family in UPSTREAM)
    result, _ = build([run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    after = folders(root)
    moved = {family for family in after if after[family] - before.get(family, set())}
    assert moved == {"NeighborTables", "Train", "Evaluate", "Cocos", "Tune", "TunedRuns", "SearchIndex", "Report"}
    assert len(after["NeighborTables"] - before["NeighborTables"]) == 2, "both spaces' tables use k"
    plan = linked_plan(run.report())
    assert plan["changes"] == list(changes)
    assert plan["settings"]["neighbors"]["k"] == 10
    assert plan["settings"]["variants"] == {"*": {"train": {"learning_rate": 3e-4}}}
    assert {v["train"]["learning_rate"] for v in plan["variants"].values()} == {3e-4}
    assert "neighbors.k=10" in run.report().output_path("markdown").read_text()


@pytest.mark.slow
def test_a_code_change_recomputes_its_task_and_everything_downstream_and_nothing_upstream(
    smoke_run, tmp_path, monkeypatch, capsys
):
    root = copied_root(smoke_run, tmp_path)
    result, _ = build([FullRun(run_root=str(root), **SMALL_GRID)])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    before = metas(root)
    # the maintainer's answer to a changed loss: python -m pipeline code-versions --bump Train
    bumped = copy.deepcopy(code_versions.recorded())
    bumped["families"]["Train"]["version"] += 1
    monkeypatch.setattr(code_versions, "recorded", lambda: bumped)
    luigi.task_register.Register.clear_instance_cache()
    run = FullRun(run_root=str(root), **SMALL_GRID)
    planned = task_plan(run.requires())
    stale = {p.family for p in planned if p.status == STALE}
    assert stale == {"Train", "Evaluate", "Cocos", "SearchIndex", "Report"}
    assert all(f"code: Train {TRAIN} -> {TRAIN + 1}" in p.reason for p in planned if p.status == STALE)
    assert {p.family for p in planned if p.status == DONE} == UPSTREAM | {"NeighborTables"}
    from pipeline.__main__ import show_plan

    show_plan(["--run-root", str(root), "--variants", '["ang_np_sym"]', "--seeds", "[0]", "--protocol", "shared", "--profile", "smoke"])
    shown = capsys.readouterr().out
    assert "stale Train" in shown and f"code: Train {TRAIN} -> {TRAIN + 1}" in shown and "done  Split" in shown

    result, ran = build([run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert set(ran.families()) == {"Train", "Evaluate", "Cocos", "SearchIndex", "Report", "FullRun"}
    after = metas(root)
    rebuilt = {meta.parent.parent.name for meta in before if after[meta] != before[meta]}
    assert rebuilt == stale, "rebuilt in place: the same paths, upstream untouched"
    train = next(t for t in ran.ran if t.get_task_family() == "Train")
    assert train.meta()["code"]["versions"]["Train"] == TRAIN + 1
    luigi.task_register.Register.clear_instance_cache()
    assert all(p.status == DONE for p in task_plan(FullRun(run_root=str(root), **SMALL_GRID).requires()))


@pytest.mark.slow
def test_keep_stale_takes_older_outputs_and_the_report_names_them(smoke_run, tmp_path, monkeypatch):
    root = copied_root(smoke_run, tmp_path)
    bumped = copy.deepcopy(code_versions.recorded())
    bumped["families"]["Train"]["version"] += 1
    monkeypatch.setattr(code_versions, "recorded", lambda: bumped)
    luigi.task_register.Register.clear_instance_cache()
    # a new evaluation setting: Evaluate and Report run, on the Train kept from the older code
    run = FullRun(run_root=str(root), keep_stale=True, set=("eval.redraws=3",), **SMALL_GRID)
    planned = task_plan(run.requires())
    assert {p.family for p in planned if p.status == KEPT} >= {"Train"}
    result, ran = build([run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert "Train" not in ran.families() and "Evaluate" in ran.families()
    kept = run.report().load("json")["run_plan"]["kept_stale_outputs"]
    assert any(k["task"].startswith("Train/") and f"Train {TRAIN} -> {TRAIN + 1}" in k["reason"] for k in kept)
    assert "kept with --keep-stale" in run.report().output_path("markdown").read_text()
    # what was made from a kept output is stale too, to a run without the flag
    luigi.task_register.Register.clear_instance_cache()
    again = {p.family: p for p in task_plan(FullRun(run_root=str(root), set=("eval.redraws=3",), **SMALL_GRID).requires())}
    assert again["Evaluate"].status == STALE and f"Train {TRAIN} -> {TRAIN + 1}" in again["Evaluate"].reason


@pytest.mark.slow
def test_a_setting_only_the_tuned_runs_evaluations_use_gives_them_their_own_outputs(smoke_run, tmp_path):
    """TunedRuns' Evaluates are chosen while it runs, so its hash holds what they hash besides the chosen Trains
    (their settings and other inputs): two runs that differ only in an evaluation setting get a TunedRuns output
    each, and neither rewrites an output of the other in place (issue 46: at 7285da5 the second run rewrote
    ``TunedRuns/<same hash>/_meta.json``, after which ``plan`` and FullRun of the first disagreed)."""
    root = copied_root(smoke_run, tmp_path)
    grid = {"profile": "smoke", "variants": ["ang_np_sym"], "seeds": [0], "protocol": "tuned", "run_root": str(root)}
    assert build([FullRun(**grid)])[0].status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    first = FullRun(**grid).report().requires()["tuned"][0]
    made = {meta: (meta.stat().st_mtime_ns, meta.read_bytes()) for meta in root.glob(f"*/*/{META_FILE}")}
    changed = FullRun(**grid, set=("eval.bootstrap_resamples=500",))
    tuned = changed.report().requires()["tuned"][0]
    assert tuned.signature() != first.signature() and tuned.requires()["tune"].signature() == first.requires()["tune"].signature()
    result, ran = build([changed])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert "TunedRuns" in ran.families() and "Tune" not in ran.families() and "Train" not in ran.families()
    assert {meta: (meta.stat().st_mtime_ns, meta.read_bytes()) for meta in made} == made, "nothing rewritten in place"
    evaluate = tuned.evaluations()[0]
    assert evaluate.meta()["config"]["eval"]["bootstrap_resamples"] == 500
    assert f"Evaluate/{evaluate.signature()}" in tuned.meta()["dynamic"]
    assert tuned.load("runs")["evaluations"]["0"] == str(evaluate.output_dir())
    luigi.task_register.Register.clear_instance_cache()
    for run in (FullRun(**grid), FullRun(**grid, set=("eval.bootstrap_resamples=500",))):
        assert all(p.status == DONE for p in task_plan(run.requires())), "both runs' plans: every task done"


@pytest.mark.slow
def test_a_sweep_writes_each_value_s_report_and_the_sweep_table_and_figure(smoke_run, tmp_path):
    root = copied_root(smoke_run, tmp_path)
    run = FullRun(
        profile="smoke", run_root=str(root), variants=["ang_np_sym", "ours"], protocol="shared", sweep="neighbors.k=20,10"
    )
    result, _ = build([run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    sweep = run.requires()
    data = sweep.load("json")
    assert data["path"] == "neighbors.k" and [row["value"] for row in data["rows"]] == [20, 10]
    assert data["paired"] is True, "k does not change the test items"
    second = data["rows"][1]["metrics"]
    assert all(m["ci_low"] is not None and m["ci_low"] <= m["difference"] <= m["ci_high"] for m in second.values())
    assert all(m["difference"] is None for m in data["rows"][0]["metrics"].values()), "the first value is the reference"
    assert data["rows"][0]["seeds"] == [0, 1]
    markdown = sweep.output_path("markdown").read_text()
    assert "| neighbors.k |" in markdown and "Δ" in markdown and "sweep.png" in markdown
    assert sweep.output_path("figure").stat().st_size > 10_000
    plans = [linked_plan(report) for report in sweep.reports()]
    assert [p["settings"]["neighbors"]["k"] for p in plans] == [20, 10]


def run_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("doc2vec.windw=5", "error: doc2vec has no setting 'windw' (did you mean 'window'?); valid: dm, epochs, hs, infer_epochs, min_count, negative, vector_size, window (python -m pipeline settings lists every path)"),
        ("neighbors.k=many", "error: --set neighbors.k: 'many' is not an integer"),
    ],
)
@pytest.mark.slow
def test_a_wrong_set_exits_2_with_one_line_before_any_work(tmp_path, change, expected):
    done = run_command("-m", "luigi", "--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", str(tmp_path), "--set", change)
    assert done.returncode == 2
    assert done.stderr.strip() == expected
    assert list(tmp_path.iterdir()) == [], "nothing was written"


@pytest.mark.slow
def test_any_task_run_from_the_command_line_refuses_a_wrong_set_in_one_line(tmp_path):
    done = run_command(
        "-m", "luigi", "--module", "pipeline", "WithinModalityTradeoff", "--profile", "smoke", "--run-root", str(tmp_path),
        "--set", "doc2vec.windw=5",
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().startswith("error: doc2vec has no setting 'windw'")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_plan_prints_the_resolved_plan_and_each_task_s_status_without_running(smoke_run, tmp_path):
    root = copied_root(smoke_run, tmp_path)
    before = metas(root)
    done = run_command("-m", "pipeline", "plan", "--profile", "smoke", "--run-root", str(root), "--set", "neighbors.k=10")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "changes: neighbors.k=10" in out
    assert "done  PrepareShard" in out and "done  TrainDoc2Vec" in out
    assert "run   NeighborTables" in out and "settings: neighbors.k 20 -> 10" in out
    assert "upstream: new NeighborTables" in out
    assert metas(root) == before and not list(root.glob("*/*.partial")), "nothing ran"
    as_json = run_command("-m", "pipeline", "plan", "--profile", "smoke", "--run-root", str(root), "--json")
    plan = json.loads(as_json.stdout)
    assert plan["settings"]["neighbors"]["k"] == 20 and all(t["status"] == "done" for t in plan["tasks"])
