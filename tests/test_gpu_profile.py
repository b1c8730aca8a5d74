"""The ``demo-gpu`` profile: the paper's regime (the whole trunk on pixels, flips and random resized crops, 224 px)
in the headline's tuned comparison, planned on a (pretended) GPU host and refused in one line on a CPU host."""

from __future__ import annotations

import subprocess
import sys

import luigi
import pytest

from pipeline.config.profiles import HEADLINE_GRID, NEEDS_A_GPU, PROFILES


def test_the_profile_is_the_finetune_comparison_with_the_whole_trunk_on_augmented_pixels():
    settings = PROFILES.get("demo-gpu").settings()
    train = settings.train
    assert (train.trunk, train.image_size, train.horizontal_flip, train.random_resized_crop) == ("finetune", 224, True, 0.5)
    assert train.backbone == "efficientnet_lite0" and train.pretrained, "ImageNet weights an offline host has"
    assert tuple(settings.grid) == HEADLINE_GRID and settings.tuning.protocol == "tuned"
    assert all(tuple(settings.seeds_by_variant[variant]) == (0, 1, 2) for variant in HEADLINE_GRID)
    assert settings.data.image_cache_size == 224
    assert "demo-gpu" in NEEDS_A_GPU


def test_a_gpu_host_plans_it(tmp_path, monkeypatch):
    from pipeline import FullRun
    from pipeline.run.status import task_plan
    from task_engine import gpus

    monkeypatch.setattr(gpus, "host_gpu_count", lambda: 1)
    config = luigi.configuration.get_config()
    had = config.get("resources", "gpu", None)
    try:
        run = FullRun(profile="demo-gpu", run_root=str(tmp_path / "runs"))
        families = {planned.family for planned in task_plan(run.requires())}
    finally:  # planning on a GPU host hands the scheduler its GPU slots: not the other tests' business
        if had is None and config.has_option("resources", "gpu"):
            config.remove_option("resources", "gpu")
    assert {"Tune", "TunedRuns", "Report"} <= families, "the tuned protocol: Evaluates follow the choices"
    assert run.run_plan.train_settings("ours").random_resized_crop == 0.5


@pytest.mark.parametrize("command", [["-m", "pipeline", "plan"], ["-m", "luigi", "--module", "pipeline", "FullRun"]])
def test_a_cpu_host_refuses_it_in_one_line_before_any_work(tmp_path, command):
    done = subprocess.run(
        [sys.executable, *command, "--profile", "demo-gpu", "--run-root", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "profile 'demo-gpu' needs a GPU and this host has none" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
