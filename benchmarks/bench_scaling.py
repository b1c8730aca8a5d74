"""How each pipeline stage's wall time and peak resident memory grow with the number of pairs (issue 22).

For each size the embedded generator makes that many pairs (``dataset_options={"n_pairs": N}``), and every
stage runs the pipeline's own Luigi task(s) at the demo profile's settings, one stage per child process, so
a stage's peak RSS is its own and its upstream is already on disk from the previous stage's process:

    validate_cache   PrepareShard + PrepareDataset: validation and the image cache; the embedded generator
                     renders its PNGs inside PrepareShard, timed apart and left out of the seconds
    dedup            Deduplicate (MinHash LSH) + Split
    doc2vec          TrainDoc2Vec
    word_vectors     TrainWordVectors
    text_neighbors   NeighborTables(space=text), in Doc2Vec space
    trunk_features   TrunkFeatures, frozen EfficientNet-Lite0 at the demo's 96 px
    image_neighbors  NeighborTables(space=image), in trunk-feature space
    train_epoch      Train of "ours" capped at one epoch (frozen trunk); its seconds are the epoch's own
                     (also per 1k train pairs), the whole task's are recorded beside them
    evaluate         Evaluate (n-way and full ranking, neighbor preservation at k = 10 ... 200)
    search_index     SearchIndex (bundle export + serving's GalleryIndex of the test split, exact search)

Cost is fitted as a * n^b per stage (least squares on log-log; with two sizes, the slope between them) for
seconds, and for the peak RSS above the process's RSS before the work (the imports, ~0.7 GB at every size:
peak = baseline + a * n^b), and projected to the paper's Politics (246k) and GoodNews (466k) sizes and 1M.

    python benchmarks/bench_scaling.py --quick --json benchmarks/results/bench_scaling_quick.json
    python benchmarks/bench_scaling.py --sizes 2000,8000,32000,128000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.bounded_json import read_bounded

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = (2_000, 8_000, 32_000, 128_000)
QUICK_SIZES = (2_000, 8_000)
#: Politics, GoodNews (the paper's datasets) and a million-pair crawl
PROJECTION_SIZES = (246_000, 466_000, 1_000_000)
STAGES = (
    "validate_cache",
    "dedup",
    "doc2vec",
    "word_vectors",
    "text_neighbors",
    "trunk_features",
    "image_neighbors",
    "train_epoch",
    "evaluate",
    "search_index",
)
#: the variant trained, evaluated and indexed: the report's headline method (text-neighbor sampling)
VARIANT = "ours"
ONE_EPOCH = {"train": {"epochs": 1}}


# --- fitting and projection (pure: tests/test_bench_scaling.py) -------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One stage at one size: wall seconds of its work, the peak RSS of its process, and that process's RSS
    before the work (the interpreter, torch and the pipeline imported: a constant that is not the stage's)."""

    stage: str
    size: int
    seconds: float
    peak_rss_mb: float
    baseline_rss_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def fit_power_law(sizes: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """``(a, b)`` of ``value = a * size**b``, by least squares on ``log value = log a + b log size``.

    Two sizes give the exact slope between them; one size cannot give an exponent (ValueError)."""
    if len(sizes) != len(values):
        raise ValueError(f"{len(sizes)} sizes but {len(values)} values")
    if len(set(sizes)) < 2:
        raise ValueError("a power law needs at least two different sizes")
    if min(sizes) <= 0 or min(values) <= 0:
        raise ValueError("sizes and values must be positive to fit on a log-log scale")
    xs = [math.log(s) for s in sizes]
    ys = [math.log(v) for v in values]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return math.exp(mean_y - b * mean_x), b


def project(a: float, b: float, size: float) -> float:
    """The fitted ``a * size**b``."""
    return a * size**b


def summarize(
    measurements: Iterable[Measurement], targets: Sequence[int] = PROJECTION_SIZES
) -> dict[str, Any]:
    """``{"stages": {stage: {sizes, seconds, peak_rss_mb, time_exponent, memory_exponent, projected}}}`` in
    the order stages were first measured; each stage's sizes ascending."""
    by_stage: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_stage.setdefault(m.stage, []).append(m)
    stages: dict[str, Any] = {}
    for stage, rows in by_stage.items():
        rows = sorted(rows, key=lambda m: m.size)
        sizes = [m.size for m in rows]
        seconds = [m.seconds for m in rows]
        memory = [m.peak_rss_mb for m in rows]
        baseline = sum(m.baseline_rss_mb for m in rows) / len(rows)
        time_a, time_b = fit_power_law(sizes, seconds)
        # the imports' ~0.7 GB is the same at every size: fitted with the rest, it would flatten every
        # memory exponent towards 0 at small sizes, so the power law is fitted to what the stage adds
        # (at least 1 MB, so a stage that adds nothing measurable still has a logarithm)
        mem_a, mem_b = fit_power_law(sizes, [max(m.peak_rss_mb - m.baseline_rss_mb, 1.0) for m in rows])
        entry: dict[str, Any] = {
            "sizes": sizes,
            "seconds": seconds,
            "peak_rss_mb": memory,
            "time_exponent": time_b,
            "memory_exponent": mem_b,
            "baseline_rss_mb": [m.baseline_rss_mb for m in rows],
            "projected": {
                str(n): {
                    "seconds": project(time_a, time_b, n),
                    "peak_rss_mb": baseline + project(mem_a, mem_b, n),
                }
                for n in targets
            },
        }
        extras = {key for m in rows for key in m.extra}
        for key in sorted(extras):
            entry[key] = [m.extra.get(key) for m in rows]
        stages[stage] = entry
    return {"stages": stages}


def _size_label(n: int) -> str:
    return f"{n / 1_000_000:g}M" if n >= 1_000_000 else f"{n / 1000:g}k"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def format_table(summary: dict[str, Any]) -> str:
    """A Markdown table: per stage the measured seconds and MB at each size, the two exponents, and the
    projected time and peak RSS at each projection size."""
    stages = summary["stages"]
    sizes = sorted({n for entry in stages.values() for n in entry["sizes"]})
    targets = sorted({int(n) for entry in stages.values() for n in entry["projected"]})
    header = ["stage"]
    header += [f"{_size_label(n)} s" for n in sizes] + [f"{_size_label(n)} MB" for n in sizes]
    header += ["b time", "b mem"] + [f"{_size_label(n)} (projected)" for n in targets]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for stage, entry in stages.items():
        measured = dict(
            zip(entry["sizes"], zip(entry["seconds"], entry["peak_rss_mb"], strict=True), strict=True)
        )
        cells = [stage]
        cells += [f"{measured[n][0]:.1f}" if n in measured else "" for n in sizes]
        cells += [f"{measured[n][1]:.0f}" if n in measured else "" for n in sizes]
        cells += [f"{entry['time_exponent']:.2f}", f"{entry['memory_exponent']:.2f}"]
        for n in targets:
            p = entry["projected"][str(n)]
            cells.append(f"{_duration(p['seconds'])}, {p['peak_rss_mb'] / 1024:.1f} GB")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- one stage, in a child process --------------------------------------------------------------------------


def stage_tasks(stage: str, size: int, run_root: Path, profile: str) -> list[Any]:
    """The Luigi tasks of ``stage`` at ``size`` pairs, in the order they run (upstream first).

    Every stage's tasks are taken from what the last stage's task (the SearchIndex of ``ours``) requires, so
    all of them carry the one run plan that task resolves: a task built alone resolves a plan of its own (a
    Split alone compares the paper's grid, a Train its own variant), and a PrepareDataset of one plan requires
    the PrepareShard of that plan, not a PrepareShard another stage built under another."""
    from pipeline.tasks.data import Deduplicate, PrepareDataset, Split
    from pipeline.tasks.evaluation import Evaluate
    from pipeline.tasks.representations import NeighborTables, TrainDoc2Vec, TrainWordVectors
    from pipeline.tasks.search_index import SearchIndex
    from pipeline.tasks.training import Train

    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    index = SearchIndex(
        profile=profile,
        dataset="embedded",
        dataset_options={"n_pairs": size},
        run_root=str(run_root),
        variant=VARIANT,
        seed=0,
        point=ONE_EPOCH,
    )
    train = index.clone(Train)
    prepared = index.clone(PrepareDataset)

    def trunk_features() -> list[Any]:
        features = train.requires().get("features")
        if features is None:
            raise ValueError(f"profile {profile!r} trains its trunk on pixels: no trunk_features stage to measure")
        return [features]

    tasks = {
        "validate_cache": lambda: [*prepared.requires(), prepared],
        "dedup": lambda: [index.clone(Deduplicate), index.clone(Split)],
        "doc2vec": lambda: [index.clone(TrainDoc2Vec)],
        "word_vectors": lambda: [index.clone(TrainWordVectors)],
        "text_neighbors": lambda: [index.clone(NeighborTables, space="text")],
        "trunk_features": trunk_features,
        "image_neighbors": lambda: [index.clone(NeighborTables, space="image")],
        "train_epoch": lambda: [train],
        "evaluate": lambda: [index.clone(Evaluate)],
        "search_index": lambda: [index],
    }
    return tasks[stage]()


def peak_rss_mb() -> float:
    """This process's peak RSS, or a child's if one peaked higher (Linux reports kilobytes)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def stage_extras(stage: str, tasks: list[Any], generator_seconds: list[float]) -> dict[str, Any]:
    """What a stage records besides seconds and MB: each task's own wall time (from its ``_meta.json``), the
    embedded generator's share of validate_cache, and training's epoch counts."""
    extra: dict[str, Any] = {
        "task_seconds": {task.get_task_family(): task.meta()["wall_time_s"] for task in tasks}
    }
    if generator_seconds:
        extra["generator_seconds"] = sum(generator_seconds)
    if stage == "train_epoch":
        from pipeline.tasks.data import Split

        epoch = tasks[-1].meta()["summary"]["mean_epoch_seconds"]
        n_train = tasks[-1].clone(Split).meta()["summary"]["counts"]["train"]
        extra.update(
            {
                "epoch_seconds": epoch,
                "n_train": n_train,
                "epoch_seconds_per_1k_train_pairs": epoch * 1000 / n_train,
            }
        )
    return extra


def run_stage(stage: str, size: int, run_root: Path, profile: str) -> dict[str, Any]:
    """Build ``stage``'s tasks, whose upstream an earlier stage's process must have built; seconds and MB.

    For train_epoch, ``seconds`` is the epoch's own training time (what 20 epochs multiply), not the task's
    (which also loads the data and scores the validation split, at most 5,000 pairs: ``task_seconds``)."""
    import luigi
    import torch

    import pipeline.tasks.data as data_tasks

    tasks = stage_tasks(stage, size, run_root, profile)
    ours = {task.task_id for task in tasks}
    for task in tasks:
        if task.complete():
            raise RuntimeError(f"{task.task_id} is already built in {run_root}: use a fresh --work folder")
        for upstream in luigi.task.flatten(task.requires()):
            if upstream.task_id not in ours and not upstream.complete():
                raise RuntimeError(f"{stage}: {upstream.task_id} is not built; run the earlier stages")
    # the embedded generator renders its PNGs inside PrepareShard, where a real dataset's files are only read:
    # its share of validate_cache is timed apart (the wrapper only times the call)
    generator_seconds: list[float] = []
    build_recipe = data_tasks.build_recipe

    def timed_build_recipe(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        recipe = build_recipe(*args, **kwargs)
        generator_seconds.append(time.perf_counter() - started)
        return recipe

    data_tasks.build_recipe = timed_build_recipe
    baseline = peak_rss_mb()
    started = time.perf_counter()
    result = luigi.build(tasks, local_scheduler=True, workers=1, detailed_summary=True)
    seconds = time.perf_counter() - started
    if not all(task.complete() for task in tasks):
        raise RuntimeError(f"{stage} at {size} pairs failed: {result.summary_text}")
    extra = stage_extras(stage, tasks, generator_seconds)
    return {
        "seconds": extra["epoch_seconds"] if stage == "train_epoch" else seconds - sum(generator_seconds),
        "peak_rss_mb": peak_rss_mb(),
        "baseline_rss_mb": baseline,
        "torch_threads": torch.get_num_threads(),
        "extra": {**extra, "stage_seconds": seconds},
    }


# --- the driver ---------------------------------------------------------------------------------------------


def measure(stage: str, size: int, work: Path, profile: str) -> Measurement:
    """Runs one stage in a child process (this script with ``--stage``) and reads back what it measured."""
    run_root = work / f"n{size}"
    out = work / "measured" / f"{size}-{stage}.json"
    log = work / "logs" / f"{size}-{stage}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--size", str(size)]
    command += ["--work", str(run_root), "--profile", profile, "--result", str(out)]
    with open(log, "w") as handle:
        # run from the repository root, so the child reads the same luigi.cfg as a pipeline run
        code = subprocess.call(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
    if code != 0:
        tail = log.read_text().splitlines()[-30:]
        raise RuntimeError(f"{stage} at {size} pairs exited {code}; log {log}:\n" + "\n".join(tail))
    child = read_bounded(out)
    extra = {**child["extra"], "torch_threads": child["torch_threads"]}
    return Measurement(stage, size, child["seconds"], child["peak_rss_mb"], child["baseline_rss_mb"], extra)


def parse_sizes(text: str) -> list[int]:
    """``"2k,8000,1M"`` -> ``[2000, 8000, 1000000]``."""
    sizes = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        sizes.append(int(float(part[:-1] if scale > 1 else part) * scale))
    return sorted(set(sizes))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=parse_sizes, default=list(DEFAULT_SIZES), help="e.g. 2k,8k,32k")
    parser.add_argument("--quick", action="store_true", help="2k and 8k pairs only (minutes)")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset, in order")
    parser.add_argument("--profile", default="demo", help="pipeline profile (default: demo)")
    parser.add_argument("--json", type=Path, help="write the measurements, exponents and projections here")
    parser.add_argument("--work", type=Path, help="run roots and logs (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    # the child's side: one stage at one size
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.stage:
        child = run_stage(args.stage, args.size, args.work, args.profile)
        args.result.write_text(json.dumps(child))
        return

    sizes = list(QUICK_SIZES) if args.quick else args.sizes
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages {sorted(unknown)}; stages: {', '.join(STAGES)}")
    if len(sizes) < 2:  # refused now, not after the measurements: the exponents are fitted between sizes
        parser.error("--sizes needs at least two different sizes (the exponents are fitted between them)")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    started = time.perf_counter()
    measurements = []
    try:
        for size in sizes:
            for stage in stages:
                print(f"[{size} pairs] {stage} ...", flush=True)
                m = measure(stage, size, work, args.profile)
                measurements.append(m)
                took = _duration(time.perf_counter() - started)
                line = f"{m.seconds:.1f} s, {m.peak_rss_mb:.0f} MB peak RSS ({took} elapsed)"
                print(f"[{size} pairs] {stage}: {line}", flush=True)
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - started
    summary = summarize(measurements)
    summary["run"] = {
        "sizes": sizes,
        "profile": args.profile,
        "variant": VARIANT,
        "wall_seconds": wall,
        "cpu_count": os.cpu_count(),
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    print()
    print(format_table(summary))
    print(f"\nwall time {_duration(wall)} for sizes {sizes}; exponents from {len(sizes)} sizes")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
