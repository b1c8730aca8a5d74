"""What a learning image tower costs against the frozen one, per resolution: the CPU seconds of one training
epoch of Ang+NP+Sym at the demo's settings with EfficientNet-Lite0 frozen (its pooled features) and with its top
k stages training on the cached map under them, and the CPU seconds per image the cache of that map takes, all
measured in one run, interleaved and repeated (medians; ratios against the frozen trunk's epoch of the same run).

CPU seconds (``time.process_time``: every thread of the process), on one thread by default: on a machine that
other work shares, wall seconds swung tenfold between two repeats of the same epoch here, CPU seconds do not; on
an idle two-core machine an epoch's wall time is about its one-thread CPU time over the speed-up of two threads.

Why a benchmark of its own: the trunk stages study (benchmarks/trunk_stages_study.py) times its Trains on a
machine that other work shares, so its seconds per epoch of the frozen parents and of their learning towers, run
at different times, can differ by the load between them as much as by the trunk; here every configuration is
timed back to back on the same synthetic pairs (the maps of real ImageNet EfficientNet-Lite0 stages computed on
random pixels: the cost depends on the shapes, not the values).

    python benchmarks/bench_trunk_cost.py --sizes 96,128,160 --stages 0,1,2,3 --pairs 1024 --repeats 3
    python benchmarks/bench_trunk_cost.py --quick          # 96 px, k 0 and 1, 128 pairs, one repeat
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from result_files import parse_with_quick, write_results

from models.backbones import build_trunk
from models.encoders import frozen_trunk_features
from models.training import PairData, Trainer, TrainingData
from models.training.run import build_training_run, record_in_memory
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import VARIANTS

RESULTS = "benchmarks/results/trunk_cost.json"
BACKBONE = "efficientnet_lite0"
VARIANT = "ang_np_sym"


def cached_maps(trunk: torch.nn.Module, n: int, size: int, stages: int, seed: int = 0) -> tuple[np.ndarray, float]:
    """What a TrunkFeatures cache holds for ``n`` random images at ``size`` px (pooled features for k = 0, the map
    under the top k stages otherwise) and the images per second it took."""
    generator = torch.Generator().manual_seed(seed)
    mean, std = torch.tensor(trunk.mean).view(1, 3, 1, 1), torch.tensor(trunk.std).view(1, 3, 1, 1)
    batches, started = [], time.process_time()
    with torch.no_grad():
        for start in range(0, n, 64):
            pixels = torch.randint(0, 256, (min(64, n - start), size, size, 3), generator=generator, dtype=torch.uint8)
            batches.append(frozen_trunk_features(trunk, pixels, mean, std, spatial=False, trained_stages=stages).numpy())
    return np.concatenate(batches), (time.process_time() - started) / n


def epoch_seconds(features: np.ndarray, stages: int, n_train: int, settings, seed: int = 0) -> tuple[float, float]:
    """One training epoch of Ang+NP+Sym on ``features`` (no validation scoring): its CPU and wall seconds."""
    rng = np.random.default_rng(seed)
    n = len(features)
    data = PairData(
        images=np.zeros((n, 1, 1, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, 5000, (n, settings.max_text_tokens)),
        lengths=rng.integers(20, settings.max_text_tokens + 1, n),
        group_ids=np.arange(n),
        image_features=features,
    )
    trunk = "frozen" if stages == 0 else f"top{stages}"
    run_settings = replace(settings, trunk=trunk, epochs=1, selection="val_loss")
    spec = VARIANTS[VARIANT]
    record = record_in_memory(spec.model, run_settings, np.zeros((5000, 200), dtype=np.float32), feature_dim=features.shape[1] if stages == 0 else None)
    positions = (np.arange(n_train), np.arange(n_train, n))
    with tempfile.TemporaryDirectory() as work:
        # built as a Train builds its run: a trained trunk part's BatchNorm as the settings say (frozen by default)
        trainer = build_training_run(record, TrainingData(data, *positions), run_settings, spec.build_losses(), seed=seed, work_dir=Path(work)).trainer
        started = time.process_time()
        wall = trainer.fit().history[0]["train_seconds"]
        # the fit's validation pass is not the epoch: its share is timed apart and taken off
        return time.process_time() - started - validation_cpu_seconds(trainer), wall


def validation_cpu_seconds(trainer: Trainer) -> float:
    started = time.process_time()
    trainer.validate()
    return time.process_time() - started


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="96,128,160")
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--pairs", type=int, default=1024, help="training pairs per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU seconds are summed over them)")
    args, out = parse_with_quick(parser, argv, RESULTS, {"sizes": "96", "stages": "0,1", "pairs": 128, "repeats": 1}, "96 px, k 0-1, 128 pairs")
    torch.set_num_threads(args.threads)
    settings = PROFILES.get("demo").settings().train
    trunk = build_trunk(BACKBONE, True).eval()
    sizes, stages = [int(s) for s in args.sizes.split(",")], [int(k) for k in args.stages.split(",")]
    caches = {(size, k): cached_maps(trunk, args.pairs + 64, size, k) for size in sizes for k in stages}
    seconds: dict[str, list[float]] = {f"{size}/{k}": [] for size in sizes for k in stages}
    walls: dict[str, list[float]] = {f"{size}/{k}": [] for size in sizes for k in stages}
    for repeat in range(args.repeats):
        for size in sizes:
            for k in stages:
                cpu, wall = epoch_seconds(caches[size, k][0], k, args.pairs, replace(settings, image_size=size))
                seconds[f"{size}/{k}"].append(cpu)
                walls[f"{size}/{k}"].append(wall)
                print(f"repeat {repeat}: {size} px, k={k}: {cpu:6.2f} CPU s ({wall:6.2f} wall s)", flush=True)
    medians = {case: statistics.median(values) for case, values in seconds.items()}
    rows = []
    for size in sizes:
        frozen = medians[f"{size}/0"] if 0 in stages else None
        for k in stages:
            features, cpu_per_image = caches[size, k]
            rows.append(
                {
                    "image_size": size,
                    "stages": k,
                    "map": list(features.shape[1:]),
                    "epoch_cpu_seconds": medians[f"{size}/{k}"],
                    "epoch_wall_seconds": statistics.median(walls[f"{size}/{k}"]),
                    "x_frozen": medians[f"{size}/{k}"] / frozen if frozen else None,
                    "cache_cpu_ms_per_image": 1000 * cpu_per_image,
                }
            )
    lines = [
        f"# Learning-tower cost ({args.pairs} pairs an epoch, Ang+NP+Sym, demo settings, {args.threads} thread(s), "
        f"median of {args.repeats}; CPU seconds)",
        "",
        "| px | trained stages | cached map | CPU s / epoch | × frozen | wall s / epoch (load-bound) | cache CPU ms / image |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {r['image_size']} | {'frozen' if r['stages'] == 0 else 'top' + str(r['stages'])} | {r['map']} | {r['epoch_cpu_seconds']:.2f} | "
            f"{_ratio(r['x_frozen'])} | {r['epoch_wall_seconds']:.2f} | {r['cache_cpu_ms_per_image']:.1f} |"
            for r in rows
        ],
    ]
    text = "\n".join(lines)
    print(text)
    result = {"pairs_per_epoch": args.pairs, "repeats": args.repeats, "threads": args.threads, "cpu_seconds": seconds, "wall_seconds": walls, "rows": rows}
    write_results(result, text, out, out.with_suffix(".md") if out is not None else None)
    return result


if __name__ == "__main__":
    main()
