"""What it costs to run a network task in a process of its own (issue 51), on the host at hand, in one run:

* ``interpreter``: a new interpreter importing torch and the project (``python -c "import torch, pipeline"``),
  what every network task paid before its process was forked from a server (the median of ``--repeats``);
* ``server start``: starting this run's server of network tasks, which imports them once (one per run);
* ``per task``: a network task that does nothing, produced in a child forked from the server (the worker's
  round trip: connect, fork, rebuild the task, produce, answer) and, as the baseline, in the worker itself
  (medians of ``--tasks`` tasks);
* ``smoke`` (unless ``--skip-smoke``): ``luigi --module pipeline FullRun --profile smoke --workers 2`` in fresh
  run roots, one after the other: every network task in its worker (``--network-tasks-process inline``, what a
  CPU host does) and every one in a child (``spawn``, what a GPU host does); the ratio of their wall times
  (issue 51's target: <= 1.3x).

    python benchmarks/bench_child_start.py                # writes benchmarks/results/child_start.{json,md}
    python benchmarks/bench_child_start.py --quick        # 3 tasks, no smoke runs, no file

Records the commit and the load (``os.getloadavg``) before and after each part: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import luigi  # noqa: E402
from result_files import commit, parse_with_quick, write_results  # noqa: E402

import pipeline  # noqa: E402, F401 - declares the code base every task's lineage reads
from common.run_folder import finished_outputs  # noqa: E402
from task_engine import fork_server, spawn  # noqa: E402
from task_engine.task import HashedTask  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "child_start.json"
NETWORK_FAMILIES = ("TrunkFeatures", "Train", "Evaluate", "Cocos", "SearchIndex")


class DoesNothing(HashedTask):
    """A network task whose work is nothing: what remains is the cost of where it runs."""

    runs_network = True
    index = luigi.IntParameter()

    def produce(self, work_dir: Path) -> dict[str, Any]:
        return {"device": "cpu"}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def interpreter_seconds(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, pipeline"], cwd=ROOT, check=True)
        times.append(time.perf_counter() - started)
    return times


def per_task_seconds(count: int, run_root: Path, in_child: bool) -> list[float]:
    times = []
    for index in range(count):
        task = DoesNothing(index=index, run_root=str(run_root))
        work = run_root / f"work{index}{'c' if in_child else 'i'}"
        work.mkdir(parents=True)
        started = time.perf_counter()
        if in_child:
            spawn.produce_in_own_process(task, work, 1)
        else:
            task.produce(work)
        times.append(time.perf_counter() - started)
    return times


def smoke_run(mode: str, run_root: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--profile", "smoke"]
    command += ["--workers", "2", "--network-tasks-process", mode, "--run-root", str(run_root), "--quiet"]
    before = load()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    network = sum(len(finished_outputs(run_root, family)) for family in NETWORK_FAMILIES)
    return {
        "command": " ".join(command[1:]),
        "exit_status": done.returncode,
        "seconds": round(seconds, 1),
        "network_tasks": network,
        "load_before": before,
        "load_after": load(),
        **({} if done.returncode == 0 else {"log_tail": (done.stdout + done.stderr)[-3000:]}),
    }


def median_ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 2)


def markdown(result: dict[str, Any]) -> str:
    start = result["start"]
    lines = [
        f"# Network tasks in a process of their own: the start cost (commit {result['commit']}, {result['host']})",
        "",
        "| what | median | note |",
        "|---|---|---|",
        f"| a new interpreter importing torch and the project | {start['interpreter_ms']:,.0f} ms | what each network task paid before (1.0) |",
        f"| this run's server start (imports once) | {start['server_start_ms']:,.0f} ms | once per run |",
        f"| a network task that does nothing, in a child forked from the server | {start['child_task_ms']:,.1f} ms | per task |",
        f"| the same task in its worker | {start['inline_task_ms']:,.2f} ms | the baseline |",
        "",
        f"Load (1 min) {start['load_before']} before, {start['load_after']} after.",
    ]
    smoke = result.get("smoke")
    if smoke:
        inline, child = smoke["inline"], smoke["spawn"]
        lines += [
            "",
            "| smoke FullRun, --workers 2, fresh run root | wall | network tasks | exit | load before / after |",
            "|---|---|---|---|---|",
            f"| every network task in its worker (inline) | {inline['seconds']:.1f} s | {inline['network_tasks']} | {inline['exit_status']} | {inline['load_before']} / {inline['load_after']} |",
            f"| every network task in a child (spawn) | {child['seconds']:.1f} s | {child['network_tasks']} | {child['exit_status']} | {child['load_before']} / {child['load_after']} |",
            "",
            f"Ratio child / in process: **{smoke['ratio']:.2f}x** (issue 51's target: <= 1.3x; 1.0's new interpreter per task: 3.1x, 254 s vs 81 s at 7295e00).",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="new interpreters timed")
    parser.add_argument("--tasks", type=int, default=20, help="no-op tasks timed per place")
    parser.add_argument("--skip-smoke", action="store_true", help="no smoke FullRuns (minutes each)")
    args, out = parse_with_quick(parser, argv, DEFAULT_OUT, {"repeats": 1, "tasks": 3, "skip_smoke": True}, "3 tasks, no smoke runs")
    result: dict[str, Any] = {"commit": commit(), "host": f"{os.cpu_count()} CPUs, no GPU used", "start": {}}
    start = result["start"]
    start["load_before"] = load()
    start["interpreter_ms"] = median_ms(interpreter_seconds(args.repeats))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        started = time.perf_counter()
        request = spawn.child_request(DoesNothing(index=-1, run_root=str(root)), root, 1, None)
        fork_server.ensure_server([*spawn.PRELOAD, __name__], request["environ"], request["cwd"])
        start["server_start_ms"] = round(1000 * (time.perf_counter() - started), 1)
        start["child_task_ms"] = median_ms(per_task_seconds(args.tasks, root / "child", True))
        start["inline_task_ms"] = median_ms(per_task_seconds(args.tasks, root / "inline", False))
    start["load_after"] = load()
    print(f"interpreter {start['interpreter_ms']:.0f} ms, server start {start['server_start_ms']:.0f} ms, "
          f"child task {start['child_task_ms']:.1f} ms, inline task {start['inline_task_ms']:.2f} ms", flush=True)  # fmt: skip
    if not args.skip_smoke:
        with tempfile.TemporaryDirectory() as scratch:
            runs = {mode: smoke_run(mode, Path(scratch) / mode) for mode in ("inline", "spawn")}
        runs["ratio"] = round(runs["spawn"]["seconds"] / runs["inline"]["seconds"], 3)
        result["smoke"] = runs
        print(f"smoke: inline {runs['inline']['seconds']:.1f} s, spawn {runs['spawn']['seconds']:.1f} s, ratio {runs['ratio']:.2f}x")
    write_results(result, markdown(result), out, out.with_suffix(".md") if out else None)
    return result


if __name__ == "__main__":
    # the task class must be importable by name in the server: this file as the module benchmarks.bench_child_start
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_child_start

    bench_child_start.main()
