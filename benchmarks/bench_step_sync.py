"""Per-step time of the training loop with and without reading the losses back to the host every step.

``no sync``: the loop as it runs (``models.training.step``): losses summed on the device, read once per
``log_every_steps`` (50) steps; the losses' value checks (unit norms) only on the first step.
``per-step sync``: the same steps plus what the loop did before: ``total.item()``, every part's ``.item()``,
``bool(torch.isfinite(total))`` and the value checks on every step.

On a CPU the two should cost the same (a read-back there is a plain memory read: the host never waits for
an asynchronous device); on a GPU the difference is the time the host spends waiting each step instead of
queueing the next one. Blocks of steps of the two loops are interleaved, so load from other processes on a
shared machine falls on both alike; the table gives the median per-step time of each and their ratio.

    python benchmarks/bench_step_sync.py                 # the demo's CPU shapes (frozen 1280-d features, GRU 256)
    python benchmarks/bench_step_sync.py --blocks 10 --steps 20
    python benchmarks/bench_step_sync.py --quick         # one block of 3 steps: seconds, a smoke test (no file)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from result_files import parse_with_quick, write_results

from models.losses.checks import value_checks
from models.training import PairData, Trainer, TrainingData
from models.training.run import build_training_run, record_in_memory
from models.training.step import StepLog
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import VARIANTS

DEMO = PROFILES.get("demo").settings()

VOCAB, WORD_DIM, FEATURES = 5000, 200, 1280


def synthetic_pairs(n: int, max_tokens: int) -> PairData:
    rng = np.random.default_rng(0)
    return PairData(
        images=np.zeros((n, 1, 1, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, VOCAB, (n, max_tokens)),
        lengths=rng.integers(max_tokens // 3, max_tokens + 1, n),
        group_ids=np.arange(n),
        image_features=rng.normal(size=(n, FEATURES)).astype(np.float32),
    )


def build_trainer(work_dir: Path, device: torch.device, n: int) -> Trainer:
    """Ours at the demo's sizes on ``n`` synthetic train pairs (10 random neighbors each) and 64 validation pairs."""
    settings = replace(DEMO.train, pretrained=False, selection="val_loss")  # steps only: nothing validated
    spec = VARIANTS["ours"]
    record = record_in_memory(spec.model, settings, np.zeros((VOCAB, WORD_DIM), dtype=np.float32), feature_dim=FEATURES)
    table = np.stack([np.random.default_rng(s).permutation(n) for s in range(10)], axis=1)
    data = TrainingData(synthetic_pairs(n + 64, settings.max_text_tokens), np.arange(n), np.arange(n, n + 64), table)
    return build_training_run(record, data, settings, spec.build_losses(), seed=0, work_dir=work_dir, device=device).trainer


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_block(trainer: Trainer, batches: list, per_step_sync: bool) -> float:
    """Seconds per step over ``batches`` (plans with their device batches)."""
    log = StepLog()
    synchronize(trainer.device)
    started = time.perf_counter()
    for step, (plan, loaded) in enumerate(batches, start=1):
        with value_checks(per_step_sync):
            losses = trainer.train_step(plan, loaded)
        if per_step_sync:
            bool(torch.isfinite(losses.total))
            {"loss": losses.total.item(), **{name: value.item() for name, value in losses.parts.items()}}
        else:
            log.add(losses, step)
            if step % trainer.settings.log_every_steps == 0:
                log.read()
    if not per_step_sync:
        log.read()
    synchronize(trainer.device)
    return (time.perf_counter() - started) / len(batches)


RESULTS = "benchmarks/results/step_sync.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="interleaved blocks of each loop")
    parser.add_argument("--steps", type=int, default=20, help="training steps per block")
    args, out = parse_with_quick(parser, argv, RESULTS, {"blocks": 1, "steps": 3}, "one block of 3 steps")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as work:
        trainer = build_trainer(Path(work), device, n=64 * args.steps)
        batches = list(trainer.loader(list(trainer.epoch_plans())[: args.steps], trainer.host_batch))
        run_block(trainer, batches, per_step_sync=True)  # warm-up
        times: dict[str, list[float]] = {"no sync": [], "per-step sync": []}
        for _ in range(args.blocks):
            times["no sync"].append(run_block(trainer, batches, per_step_sync=False))
            times["per-step sync"].append(run_block(trainer, batches, per_step_sync=True))
    median = {name: float(np.median(values)) for name, values in times.items()}
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)",
        "shapes": "demo: frozen 1280-d features, GRU 256, batch 64 (32 anchors + 32 in-batch neighbors), Ours",
        "blocks": args.blocks,
        "steps_per_block": args.steps,
        "median_ms_per_step": {name: round(1000 * value, 2) for name, value in median.items()},
        "per_step_sync_vs_no_sync": round(median["per-step sync"] / median["no sync"], 3),
    }
    print("| loop | median ms / step |\n|---|---|")
    for name, value in result["median_ms_per_step"].items():
        print(f"| {name} | {value} |")
    print(f"per-step sync / no sync: {result['per_step_sync_vs_no_sync']}")
    write_results(result, "", out, None)
    return result


if __name__ == "__main__":
    main()
