"""The fault table (issue 46), what the run derives and reads back, and a plan that agrees with the run:

* a damaged or edited run plan file (``runs/RunPlan/<id>/run_plan.json``) is written anew by the process that
  schedules the run, before any task reads it: a rerun whose network tasks run in processes of their own (which
  read nothing but the file) ends with the undamaged run's outputs; ``plan`` says what is wrong with the file;
  a process given only the plan's id refuses it in one line saying how to recover;
* an output deleted under a finished report is made again with everything made from it, exactly as ``plan``
  says beforehand, and the metrics come back the same;
* a task's staleness reason compares it with its own earlier output;
* a run whose forked worker is killed names the tasks it left undone.

``before`` is what each probe did at 7285da5. The two-runs-never-rewrite-in-place row is
``tests/test_run_plan.py::test_a_setting_only_the_tuned_runs_evaluations_use_gives_them_their_own_outputs``; the
shared parts are tests/fault_table.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import luigi
import numpy as np
import pytest

from pipeline import FullRun
from pipeline.__main__ import main
from pipeline.config.plan_file import forget_plans, plan_file_problem, plan_path, read_plan, write_plan
from pipeline.run.status import DONE, task_plan
from task_engine.task import HashedTask
from tests.fault_table import Fault, assert_refused, run_command
from tests.luigi_runs import build, copied_root

ROOT = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
SUCCESS = luigi.execution_summary.LuigiStatusCode.SUCCESS
#: a FullRun of one variant and seed on the smoke run root: its outputs are there but its Report
SMALL = {"profile": "smoke", "variants": ["ang_np_sym"], "seeds": [0], "protocol": "shared"}
SMALL_FLAGS = ["--profile", "smoke", "--variants", '["ang_np_sym"]', "--seeds", "[0]", "--protocol", "shared"]
BEFORE_PLAN = (
    "plan: '75 done, 2 will run', the file not mentioned; a spawned rerun: 'ERROR: Evaluate failed: ... cannot be "
    "read as a run plan ... start the run again', and every rerun the same (the file never rewritten)"
)

#: ``said``: what ``plan`` reports of the file; the run then writes it anew (exit 0)
DAMAGED_PLAN_ROWS = [
    Fault("a run plan file that is not JSON", "derived", "not JSON", 0, "not JSON, or cut off", before=BEFORE_PLAN),
    Fault("a run plan file cut in half", "derived", "cut in half", 0, "not JSON, or cut off", before=BEFORE_PLAN),
    Fault("an empty run plan file", "derived", "empty", 0, "not JSON, or cut off", before=BEFORE_PLAN),
    Fault("a run plan file holding []", "derived", "[]", 0, "not a run plan", before=BEFORE_PLAN),
    Fault("a run plan file with neighbors.k edited", "derived", "neighbors.k", 0, "edited", before=BEFORE_PLAN),
    Fault("a run plan file with eval.n_way edited", "derived", "eval.n_way", 0, "edited", before=BEFORE_PLAN),
    Fault("a run plan file deleted", "derived", "deleted", 0, "missing", before="the run wrote it again (no fault)"),
]


def damage(path: Path, how: str) -> None:
    """Damage a run plan file the way a row says."""
    text = path.read_text()
    if how == "deleted":
        path.unlink()
    elif how in ("neighbors.k", "eval.n_way"):
        record = json.loads(text)
        section, name = how.split(".")
        record["settings"][section][name] += 1
        path.write_text(json.dumps(record))
    else:
        path.write_text({"not JSON": "{not json", "cut in half": text[: len(text) // 2], "empty": "", "[]": "[]"}[how])


def output_files(task: HashedTask) -> dict[str, object]:
    """Every declared output of ``task``, read back (arrays as arrays: an ``.npz`` zip records its own time)."""
    read: dict[str, object] = {}
    for name, file in task.outputs.items():
        path = task.output_dir() / file
        if path.suffix == ".npz":
            read[name] = {key: value for key, value in np.load(path).items()}
        elif path.suffix == ".npy":
            read[name] = np.load(path)
        elif path.exists():
            read[name] = path.read_bytes()
    return read


def assert_same_outputs(made: dict[str, object], kept: dict[str, object]) -> None:
    assert made.keys() == kept.keys()
    for name, value in kept.items():
        if isinstance(value, dict):
            assert value.keys() == made[name].keys() and all(np.array_equal(value[k], made[name][k]) for k in value), name
        elif isinstance(value, np.ndarray):
            assert np.array_equal(value, made[name]), name
        else:
            assert value == made[name], name


def compare_run_roots() -> object:
    spec = importlib.util.spec_from_file_location("compare_run_roots", ROOT / "benchmarks" / "compare_run_roots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snapshot(tasks: list[HashedTask], folder: Path) -> Path:
    """The outputs of ``tasks`` copied into a run root of their own (what benchmarks/compare_run_roots.py reads)."""
    for task in tasks:
        shutil.copytree(task.output_dir(), folder / task.get_task_family() / task.signature())
    return folder


@pytest.mark.slow
def test_a_damaged_run_plan_is_written_anew_and_a_spawned_rerun_gives_the_undamaged_outputs(smoke_run, tmp_path, spawn_mode):
    """On a finished root, the run plan file damaged each way in turn and one Evaluate output deleted (a network
    task the rerun must make, in a process of its own that reads the plan from the file alone): ``plan`` names
    what is wrong with the file, the rerun writes it anew before any task reads it and completes, and the
    Evaluate and the Report equal the undamaged run's."""
    root = copied_root(smoke_run, tmp_path)
    run = FullRun(run_root=str(root), **SMALL)
    assert build([run])[0].status == SUCCESS
    report = run.report()
    (evaluate,) = report.evaluations()
    undamaged = output_files(evaluate)
    reference = snapshot([evaluate, report], tmp_path / "undamaged")
    path = plan_path(root, run.plan_id)
    compare = compare_run_roots()
    for fault in DAMAGED_PLAN_ROWS:
        shutil.rmtree(evaluate.output_dir())
        damage(path, fault.args)
        forget_plans()  # this process holds no plan: the next command resolves it from its flags, as a user's would
        luigi.task_register.Register.clear_instance_cache()
        shown = run_command(main, ["plan", *SMALL_FLAGS, "--run-root", str(root)])
        assert shown.status == 0, (fault.name, shown.stderr)
        assert f"run plan file {path}: {fault.said}" in shown.stdout and "the run writes it anew" in shown.stdout, fault.name
        assert fault.args == "deleted" or plan_file_problem(root, run.plan_id) is not None, "planning writes nothing"
        result, ran = build([FullRun(run_root=str(root), **SMALL)])
        assert result.status == SUCCESS, (fault.name, result.summary_text)
        assert plan_file_problem(root, run.plan_id) is None, f"{fault.name}: the file was written anew"
        assert {"Evaluate", "Report"} <= set(ran.families()), fault.name
        assert_same_outputs(output_files(evaluate), undamaged)
        after = snapshot([evaluate, report], tmp_path / fault.id())
        assert compare.main([str(reference), str(after)]) == 0, f"{fault.name}: the outputs differ from the undamaged run's"


def test_a_process_given_only_a_damaged_plan_s_id_refuses_it_in_one_line(tmp_path):
    """A task started with ``--plan <id>`` (as a network task's own process is) cannot resolve the plan again:
    a damaged or missing file is refused at the start, in one line saying how to recover, and nothing is
    written."""
    root = tmp_path / "runs"
    plan = FullRun(run_root=str(root), **SMALL).run_plan
    write_plan(root, plan)
    damage(plan_path(root, plan.id), "cut in half")
    forget_plans()  # as in a process of its own: it never resolved the plan
    before = sorted(root.rglob("*"))
    fault = Fault(
        "a task started with the id of a damaged plan", "derived", ["Evaluate", "--plan", plan.id, "--variant", "ang_np_sym"],
        2, "cannot resolve the plan again", before="exit 35, a traceback ending in RunConfigurationError",
    )  # fmt: skip
    done = run_command(main, [*fault.args, "--run-root", str(root)])
    assert_refused(done, fault)
    assert "is not JSON, or cut off" in done.stderr and "start the run again from the command that made it" in done.stderr
    assert sorted(root.rglob("*")) == before


def test_the_plan_file_keeps_the_plan_s_order_and_a_sorted_one_is_written_anew(tmp_path):
    """Some readers iterate a mapping of the plan in order (a search space's knobs; the split fractions, a pair's
    split being where its hash falls among them, now fixed by their settings class), which the id (a hash of
    sorted JSON) cannot see: the file keeps the plan's order, and a file an older version wrote with sorted keys,
    intact by its id, is written anew by the run."""
    root = tmp_path / "runs"
    plan = FullRun(run_root=str(root), **SMALL).run_plan
    order = list(plan.settings.split.fractions())
    assert order != sorted(order), "the split's order is not alphabetical (the test would prove nothing)"
    assert write_plan(root, plan) == "missing"
    forget_plans()
    assert list(read_plan(root, plan.id).settings.split.fractions()) == order
    path = plan_path(root, plan.id)
    path.write_text(json.dumps(json.loads(path.read_text()), sort_keys=True))
    forget_plans()
    assert plan_file_problem(root, plan.id) is None and list(read_plan(root, plan.id).settings.split.fractions()) == order
    assert "another key order" in write_plan(root, plan)
    forget_plans()
    assert list(read_plan(root, plan.id).settings.split.fractions()) == order


AGREEMENT_ROW = Fault(
    "an Evaluate output deleted under a finished report",
    "plan",
    "delete Evaluate",
    0,
    "will be made again",
    before="plan: Evaluate and Report will run; FullRun exit 0 and nothing rebuilt (the Report exists), its inputs gone",
)


@pytest.mark.slow
def test_an_output_deleted_under_a_finished_report_is_made_again_with_what_it_feeds_as_plan_says(smoke_run, tmp_path):
    """Delete one Evaluate output of the finished smoke run: ``plan`` says it and the Report will run, and FullRun
    with the same arguments runs exactly those; the metrics come back byte for byte."""
    root = copied_root(smoke_run, tmp_path)
    run = FullRun(profile="smoke", run_root=str(root))
    report = run.report()
    evaluate = next(e for e in report.evaluations() if e.variant != report.search_index().variant)
    deleted = output_files(evaluate)
    shutil.rmtree(evaluate.output_dir())
    luigi.task_register.Register.clear_instance_cache()
    run = FullRun(profile="smoke", run_root=str(root))
    planned = {p.task.task_id: p for p in task_plan(run.requires()) if p.status != DONE}
    assert set(planned) == {evaluate.task_id, report.task_id}
    assert AGREEMENT_ROW.said in planned[report.task_id].reason and evaluate.signature() in planned[report.task_id].reason
    result, ran = build([run])
    assert result.status == SUCCESS, result.summary_text
    assert {task.task_id for task in ran.ran if isinstance(task, HashedTask)} == set(planned), "what plan said ran, and no more"
    assert_same_outputs(output_files(evaluate), deleted)
    luigi.task_register.Register.clear_instance_cache()
    assert all(p.status == DONE for p in task_plan(FullRun(profile="smoke", run_root=str(root)).requires()))


STALENESS_ROW = Fault(
    "a Train's reason under plan --set neighbors.k=10",
    "plan",
    ["--set", "neighbors.k=10"],
    0,
    "upstream: new NeighborTables",
    before="'settings: train.learning_rate 0.0003 -> 0.001', compared against a tuning trial's output",
)


def test_a_task_s_reason_compares_it_with_its_own_earlier_output(tmp_path):
    """Outputs of one family for several trials in the run root: a task's reason is read against the output made
    for the same variant, seed and point, not against whichever output differs least."""
    from pipeline import Train
    from pipeline.run.status import settings_difference
    from task_engine.outputs import write_json

    task = Train(profile="smoke", run_root=str(tmp_path), variant="ours", seed=0)
    mine = json.loads(json.dumps(task.config(), default=str))
    other_trial = Train(profile="smoke", run_root=str(tmp_path), variant="ours", seed=0, point={"train": {"learning_rate": 0.001}})
    # the trial's output has this task's config but for one setting; this task's own earlier output two
    family = tmp_path / "Train"
    write_json(family / "aaaaaaaaaaaa" / "_meta.json", {"config": other_trial.config(), "params": other_trial.process_params()})
    own = json.loads(json.dumps(mine))
    own["train"]["epochs"] += 1
    own["neighbor_sample_k"] = 99
    write_json(family / "bbbbbbbbbbbb" / "_meta.json", {"config": own, "params": task.process_params()})
    reason = settings_difference(task)
    assert reason is not None and "learning_rate" not in reason and "neighbor_sample_k 99 -> " in reason
    assert settings_difference(Train(profile="smoke", run_root=str(tmp_path), variant="ours", seed=3)) == "new output (none of this task yet)"


def test_plan_gives_each_train_the_reason_of_its_own_earlier_output(smoke_run, tmp_path):
    """The issue's probe on the smoke run: under ``--set neighbors.k=10`` every Train that runs does so because its
    NeighborTables is new, never for a setting read off another Train."""
    root = copied_root(smoke_run, tmp_path)
    done = run_command(main, ["plan", "--profile", "smoke", "--run-root", str(root), *STALENESS_ROW.args])
    assert done.status == 0, done.stderr
    trains = [line for line in done.stdout.splitlines() if line.startswith("  run   Train ")]
    assert trains and all(line.endswith(f"— {STALENESS_ROW.said}") for line in trains), trains


KILLED_WORKER_ROW = Fault(
    "a forked worker killed mid-training",
    "progress",
    ["--variants", '["ang_np_sym"]', "--seeds", "[0]", "--protocol", "shared", "--set", "train.epochs=40"],
    30,
    "not finished: Train ang_np_sym seed 0 (was running)",
    before="exit 30, 'stopped: 7 of 11 tasks done' naming no task",
)


def children(pid: int) -> list[int]:
    """The processes ``pid`` forked (Luigi's workers: one per running task)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


@pytest.mark.slow
def test_a_killed_worker_s_task_is_named_when_the_run_stops(smoke_run, tmp_path):
    """A FullRun from the command line (two forked workers, luigi.cfg), its worker killed while it trains: the run
    exits 30 and its last line names the training it left, and what could not run after it."""
    if not Path(f"/proc/{os.getpid()}/task").exists():
        pytest.skip("needs /proc to find Luigi's forked workers")
    root = copied_root(smoke_run, tmp_path)
    log = tmp_path / "run.log"
    command = [LUIGI, "--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", str(root), *KILLED_WORKER_ROW.args]
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any((partial / "history.csv").exists() for partial in (root / "Train").glob("*.partial")):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        for worker in children(process.pid):
            os.kill(worker, signal.SIGKILL)
        status = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    lines = log.read_text().splitlines()
    assert status == KILLED_WORKER_ROW.status, lines[-20:]
    assert "stopped: 0 of 5 tasks done" in lines[-1] and KILLED_WORKER_ROW.said in lines[-1], lines[-5:]
