"""The ``luigi --module pipeline FullRun`` command line: a typo in a name stops it at once, with one line and
a non-zero exit status, before any task runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import FullRun
from pipeline.config.checks import RunConfigurationError

ROOT = Path(__file__).resolve().parents[1]
LUIGI = Path(sys.executable).with_name("luigi")


def run_luigi(*args: str, run_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LUIGI), "--module", "pipeline", "FullRun", "--run-root", str(run_root), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "fast"], "error: unknown profile 'fast'; available: demo, demo-finetune, demo-gpu, paper, smoke"),
        (["--variants", '["ours","ourz"]'], "error: unknown variant 'ourz'; did you mean 'ours'? available: "),
    ],
)
@pytest.mark.slow
def test_a_bad_name_exits_2_with_one_line_before_any_work(tmp_path, args, message):
    result = run_luigi(*args, run_root=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    # one line from us; a runtime may add its own warnings (e.g. libgomp on a bad OMP_NUM_THREADS)
    ours = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(ours) == 1 and ours[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "nothing ran"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"profile": "fast"}, "unknown profile 'fast'; available: demo, demo-finetune, demo-gpu, paper, smoke"),
        ({"dataset": "cocoa"}, r"unknown dataset 'cocoa'; did you mean 'coco'\? available: coco, conceptual_captions, "),
        ({"variants": ["ours", "ourz"]}, r"unknown variant 'ourz'; did you mean 'ours'\? available: "),
        ({"variant_overrides": {"nope": {}}}, r"--variant-overrides: unknown variant 'nope'"),
        ({"variant_overrides": {"ours": {"tripletz": {"margin": 1}}}}, r"--set variants.ours: override 'tripletz' does not match variant 'ours'"),
    ],
)
def test_called_from_code_the_error_is_raised(params, message):
    with pytest.raises(RunConfigurationError, match=message):
        FullRun(**params)


def test_network_tasks_take_a_gpu_only_on_a_gpu_host(monkeypatch, tmp_path):
    from pipeline import Cocos, Evaluate, SearchIndex, Split, Train, TrunkFeatures
    from task_engine import task

    for gpus, expected in ((0, {}), (2, {"gpu": 1})):
        monkeypatch.setattr(task, "host_gpu_count", lambda gpus=gpus: gpus)
        for cls in (Train, Evaluate, Cocos, SearchIndex):
            assert cls(profile="smoke", run_root=str(tmp_path)).resources == expected
        features = TrunkFeatures(profile="smoke", run_root=str(tmp_path), backbone="efficientnet_lite0", image_size=32)
        assert features.resources == expected
        assert Split(profile="smoke", run_root=str(tmp_path)).resources == {}
    two = Train(profile="smoke", run_root=str(tmp_path), set=("train.nproc_per_node=2",))
    assert two.resources == {"gpu": 2}, "a data-parallel Train takes a GPU per process"


@pytest.mark.slow
def test_python_m_pipeline_is_the_luigi_command_with_the_same_early_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "FullRun", "--profile", "fast", "--run-root", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "error: unknown profile 'fast'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("code", [10, 25])
def test_a_cooperative_exit_status_stays_when_the_run_is_not_finished(tmp_path, code):
    """``python -m pipeline`` turns 10/25 into 0 only when the root task is complete (tests/test_luigid.py
    covers the finished case); with nothing built the status stays, and other statuses are never touched."""
    from pipeline.__main__ import judged_by_result

    argv = ["--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", str(tmp_path / "runs")]
    assert judged_by_result(code, argv) == code
    assert judged_by_result(30, argv) == 30


@pytest.mark.parametrize(
    ("processes", "host_gpus", "scheduler_gpus", "message"),
    [
        ({"ours": 1, "ang_np_sym": 1}, 0, 1, None),
        ({"ours": 8}, 8, 8, None),
        (
            {"ours": 8, "ang_np_sym": 2},
            4,
            4,
            "variant 'ours' asks for nproc_per_node=8 GPUs, this host has 4",
        ),
        ({"ours": 4}, 8, 1, "luigi.cfg hands out [resources] gpu = 1; set it to this host's GPU count (8)"),
    ],
)
def test_a_ddp_train_that_cannot_fit_the_host_is_refused_before_any_work(
    processes, host_gpus, scheduler_gpus, message
):
    """Luigi never schedules a task needing more of a resource than it hands out, and says only 'not run';
    FullRun refuses such a grid at once on a CUDA host instead."""
    from pipeline.config.checks import gpu_shortfall

    problem = gpu_shortfall(processes, host_gpus, scheduler_gpus)
    assert problem == message if message is None else message in problem
