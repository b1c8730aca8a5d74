"""Epoch time of Ours (Eq. 8) vs Ang+NP+Sym at the same batch size, in one run (goal: <= 1.10x).

Both neighbor modes are timed: ``in_batch`` (neighbors fill half of each batch: the same number of rows
encoded as the baseline) and ``extra_rows`` (neighbors encoded as extra rows). Synthetic pairs at the
demo profile's sizes (frozen EfficientNet-Lite0 features, 1280-d, GRU(256), batch 64; ``--finetune`` times
a ResNet-18 trunk trained end to end on 64 px pixels instead); runs are interleaved and repeated, medians
reported.

    python benchmarks/bench_epoch.py [--pairs 1024] [--repeats 3] [--finetune --image-size 64]
    python benchmarks/bench_epoch.py --quick     # 128 pairs, one repeat: seconds, a smoke test (no file unless --out)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from result_files import parse_with_quick, write_results

from models.training import PairData, TrainingData
from models.training.run import build_training_run, record_in_memory
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import VARIANTS

DEMO = PROFILES.get("demo").settings()

FROZEN_FEATURE_DIM = 1280  # EfficientNet-Lite0's pooled features


def synthetic_pairs(
    n: int, image_size: int, max_tokens: int, vocab: int, frozen: bool, seed: int = 0
) -> PairData:
    rng = np.random.default_rng(seed)
    return PairData(
        images=rng.integers(0, 255, (n, image_size, image_size, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, vocab, (n, max_tokens)),
        lengths=rng.integers(20, max_tokens + 1, n),
        group_ids=np.arange(n),
        image_features=rng.normal(size=(n, FROZEN_FEATURE_DIM)).astype(np.float32) if frozen else None,
    )


def time_epoch(variant: str, mode: str, data: PairData, n_train: int, settings, k: int) -> float:
    spec = VARIANTS[variant]
    feature_dim = None if data.image_features is None else FROZEN_FEATURE_DIM
    settings = replace(settings, pretrained=False, epochs=1, neighbor_mode=mode)
    record = record_in_memory(spec.model, settings, np.zeros((5000, 200), dtype=np.float32), feature_dim=feature_dim)
    rng = np.random.default_rng(1)
    table = (
        np.stack([rng.permutation(n_train) for _ in range(k)], axis=1) if spec.neighbor_source else None
    )
    positions = (np.arange(n_train), np.arange(n_train, n_train + 64))
    with tempfile.TemporaryDirectory() as work:
        run = build_training_run(
            record, TrainingData(data, *positions, neighbors=table), settings, spec.build_losses(), seed=0,
            work_dir=Path(work),
        )
        return run.trainer.fit().history[0]["train_seconds"]


RESULTS = "benchmarks/results/epoch.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--finetune", action="store_true", help="ResNet-18 trained on pixels, not frozen")
    args, out = parse_with_quick(parser, argv, RESULTS, {"pairs": 128, "repeats": 1}, "128 pairs, one repeat")
    # speed only: no validation scoring (selection by the validation loss)
    settings = replace(DEMO.train, image_size=args.image_size, selection="val_loss")
    if args.finetune:
        settings = replace(settings, backbone="resnet18", trunk="finetune", horizontal_flip=True)
    frozen = settings.trunk == "frozen"
    data = synthetic_pairs(args.pairs + 64, args.image_size, settings.max_text_tokens, 5000, frozen)
    cases = [("ang_np_sym", "in_batch"), ("ours", "in_batch"), ("ours", "extra_rows")]
    times: dict[str, list[float]] = {f"{v}/{m}": [] for v, m in cases}
    for repeat in range(args.repeats):
        for variant, mode in cases:
            seconds = time_epoch(variant, mode, data, args.pairs, settings, k=200)
            times[f"{variant}/{mode}"].append(seconds)
            print(f"repeat {repeat}: {variant:12s} {mode:10s} {seconds:7.2f} s", flush=True)
    medians = {case: statistics.median(values) for case, values in times.items()}
    baseline = medians["ang_np_sym/in_batch"]
    result = {
        "pairs_per_epoch": args.pairs,
        "batch_size": settings.batch_size,
        "backbone": settings.backbone,
        "trunk": settings.trunk,
        "image_size": args.image_size,
        "threads": torch.get_num_threads(),
        "seconds": times,
        "median_seconds": medians,
        "ratio_vs_baseline": {case: value / baseline for case, value in medians.items()},
    }
    print(json.dumps({"median_seconds": medians, "ratio_vs_baseline": result["ratio_vs_baseline"]}, indent=2))
    write_results(result, "", out, None)
    return result


if __name__ == "__main__":
    main()
