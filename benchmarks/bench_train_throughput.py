"""Training images per second of the paper profile's step (ResNet-50 fine-tuned on 224 px pixels, GRU(512),
batch 64 with in-batch neighbors, Ours = angular + within-modality) on the device at hand; goals (issue 13)
on one H100: >= 3,000 images/s, the loader >= 1.2x what the GPU consumes, 2 GPUs >= 1.8x one.

Measured in one run, on the same synthetic uint8 cache:

* ``plain fp32``: the trainer with every speed setting off (fp32, NCHW weights, no cuDNN search, each batch
  prepared in the training thread and copied synchronously) — the loop as it was before;
* ``fast``: the defaults (bf16 autocast on CUDA, channels-last, cuDNN search, 4 loader threads, pinned
  memory, non-blocking copies; on CPU every one of these is off by design, so the two loops match there);
* ``compute only``: the fast step on one batch already on the device (what the GPU consumes);
* ``loader only``: the fast loader alone, batches prepared and copied to the device, nothing trained;
* with ``--processes N`` (N > 1), the fast loop under torchrun on N processes (one GPU each; gloo on CPU):
  global images/s, and the ratio to one process.

    python benchmarks/bench_train_throughput.py                  # CPU: a small default (64 px, batch 16)
    python benchmarks/bench_train_throughput.py --image-size 224 --batch-size 64 --steps 50 --processes 2
    python benchmarks/bench_train_throughput.py --quick          # 32 px, batch 8, 2 steps: a smoke test (no file)

On CUDA the defaults are the paper's sizes (224 px, batch 64, 50 timed steps after 10 warm-up steps).
Writes ``benchmarks/results/train_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from result_files import add_out_option, out_path, write_results

from common.bounded_json import read_bounded
from models.distributed import SINGLE_PROCESS, Distributed, init_from_environment
from models.training import PairData, Trainer, TrainingData
from models.training.run import build_training_run, record_in_memory
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import VARIANTS

PAPER = PROFILES.get("paper").settings()

VOCAB, WORD_DIM = 5000, 200
#: every speed setting off: the loop as it was before issue 13
PLAIN_FP32 = {
    "amp": "off",
    "channels_last": False,
    "cudnn_benchmark": False,
    "num_workers": 0,
    "pin_memory": False,
    "fused_adam": False,
}


def synthetic_pairs(n: int, image_size: int, max_tokens: int) -> PairData:
    rng = np.random.default_rng(0)
    return PairData(
        images=rng.integers(0, 255, (n, image_size, image_size, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, VOCAB, (n, max_tokens)),
        lengths=rng.integers(max_tokens // 3, max_tokens + 1, n),
        group_ids=np.arange(n),
    )


def build_trainer(
    settings,
    data: PairData,
    n_train: int,
    work_dir: Path,
    device: torch.device,
    distributed: Distributed = SINGLE_PROCESS,
    static_step: bool = False,
) -> Trainer:
    """Ours on ``data`` (its first ``n_train`` pairs train, each with 10 random neighbors; the rest validate),
    built as a Train builds its run (:func:`build_training_run`)."""
    spec = VARIANTS["ours"]
    record = record_in_memory(spec.model, settings, np.zeros((VOCAB, WORD_DIM), dtype=np.float32))
    rng = np.random.default_rng(1)
    table = np.stack([rng.permutation(n_train) for _ in range(10)], axis=1)
    positions = (np.arange(n_train), np.arange(n_train, len(data.image_rows)))
    run = build_training_run(
        record, TrainingData(data, *positions, neighbors=table), settings, spec.build_losses(), seed=0,
        work_dir=work_dir, device=device, distributed=distributed, static_step=static_step,
    )
    return run.trainer


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plans(trainer: Trainer, count: int):
    """``count`` training steps' plans, epoch after epoch."""
    made = 0
    while True:
        for plan in trainer.epoch_plans():
            if made == count:
                return
            made += 1
            yield plan


def loop_rate(trainer: Trainer, warmup: int, steps: int) -> float:
    """Images (rows encoded, all ranks) per second of the training loop, loader included."""
    images, started = 0, 0.0
    for index, (plan, loaded) in enumerate(
        trainer.loader(plans(trainer, warmup + steps), trainer.host_batch)
    ):
        if index == warmup:
            synchronize(trainer.device)
            started = time.perf_counter()
        trainer.train_step(plan, loaded)
        images += len(plan.merged.rows) if index >= warmup else 0
    synchronize(trainer.device)
    return images / (time.perf_counter() - started)


def compute_rate(trainer: Trainer, warmup: int, steps: int) -> float:
    """Images per second of the training step alone, on one batch already on the device."""
    plan = next(iter(plans(trainer, 1)))
    loaded = trainer.loader.to_device(trainer.host_batch(plan))
    for index in range(warmup + steps):
        if index == warmup:
            synchronize(trainer.device)
            started = time.perf_counter()
        trainer.train_step(plan, loaded)
    synchronize(trainer.device)
    return steps * len(plan.merged.rows) / (time.perf_counter() - started)


def loader_rate(trainer: Trainer, warmup: int, steps: int) -> float:
    """Images per second the loader alone delivers to the device."""
    images, started = 0, 0.0
    for index, (plan, _) in enumerate(trainer.loader(plans(trainer, warmup + steps), trainer.host_batch)):
        if index == warmup:
            synchronize(trainer.device)
            started = time.perf_counter()
        images += len(plan.local.rows) if index >= warmup else 0
    synchronize(trainer.device)
    return images / (time.perf_counter() - started)


def single_process_rates(
    settings, data: PairData, n_train: int, device: torch.device, warmup: int, steps: int, inspect=None
) -> tuple[dict[str, float], str, int, dict]:
    """Images/s of the plain fp32 loop, the fast loop, the step alone and the loader alone; the fast loop's
    autocast dtype and loader threads; and what ``inspect(fast_trainer)`` returns (``{}`` without one)."""
    rates = {}
    with tempfile.TemporaryDirectory() as work:
        plain = build_trainer(replace(settings, **PLAIN_FP32), data, n_train, Path(work), device)
        rates["plain_fp32_loop"] = loop_rate(plain, warmup, steps)
        del plain
        fast = build_trainer(settings, data, n_train, Path(work), device)
        rates["fast_loop"] = loop_rate(fast, warmup, steps)
        rates["compute_only"] = compute_rate(fast, warmup, steps)
        rates["loader_only"] = loader_rate(fast, warmup, steps)
        extra = inspect(fast) if inspect is not None else {}
        amp = str(fast.setup.amp_dtype).replace("torch.", "") if fast.setup.amp_dtype else "fp32"
        workers = fast.loader.settings.num_workers
    return rates, amp, workers, extra


def rate_ratios(rates: dict[str, float]) -> dict[str, float]:
    """The goals' ratios of :func:`single_process_rates`: the fast loop against the plain one, the loader and
    the fast loop against what the step alone consumes."""
    return {
        "fast_vs_plain_fp32": rates["fast_loop"] / rates["plain_fp32_loop"],
        "loader_vs_compute": rates["loader_only"] / rates["compute_only"],
        "fast_loop_vs_compute": rates["fast_loop"] / rates["compute_only"],
    }


def settings_for(args) -> object:
    return replace(
        PAPER.train,
        pretrained=False,  # speed does not depend on the weights; nothing to download
        image_size=args.image_size,
        batch_size=args.batch_size,
        selection="val_loss",  # steps only: nothing is validated
    )


def worker(args) -> None:
    """One process of the ``--processes`` measurement (started by torchrun)."""
    distributed = init_from_environment()
    device = (
        torch.device("cuda", distributed.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    )
    data = synthetic_pairs(args.pairs, args.image_size, PAPER.train.max_text_tokens)
    with tempfile.TemporaryDirectory() as work:
        settings = settings_for(args)
        trainer = build_trainer(settings, data, args.pairs - 64, Path(work), device, distributed)
        rate = loop_rate(trainer, args.warmup, args.steps)
    if distributed.is_main:
        Path(args.worker_out).write_text(json.dumps({"images_per_second": rate}))


RESULTS = "benchmarks/results/train_throughput.json"


def main(argv: list[str] | None = None) -> dict:
    on_cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=224 if on_cuda else 64)
    parser.add_argument("--batch-size", type=int, default=64 if on_cuda else 16)
    parser.add_argument("--steps", type=int, default=50 if on_cuda else 4)
    parser.add_argument("--warmup", type=int, default=10 if on_cuda else 1)
    parser.add_argument("--pairs", type=int, default=2048 if on_cuda else 256, help="synthetic cache rows")
    parser.add_argument("--processes", type=int, default=1, help="also time N processes under torchrun")
    parser.add_argument(
        "--quick", action="store_true", help="32 px, batch 8, 2 timed steps on 96 rows, on any device (a smoke test)"
    )
    add_out_option(parser, RESULTS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_out:
        worker(args)
        return {}
    if args.quick:
        args.image_size, args.batch_size, args.steps, args.warmup, args.pairs = 32, 8, 2, 1, 96
    out = out_path(args, RESULTS)
    device = torch.device("cuda" if on_cuda else "cpu")
    settings = settings_for(args)
    data = synthetic_pairs(args.pairs, args.image_size, settings.max_text_tokens)
    n_train = args.pairs - 64
    rates, amp, workers, _ = single_process_rates(settings, data, n_train, device, args.warmup, args.steps)
    if args.processes > 1:
        with tempfile.TemporaryDirectory() as work:
            out = Path(work) / "rank0.json"
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(args.processes),
                __file__,
                "--worker-out",
                str(out),
            ] + [
                f"--{name.replace('_', '-')}={getattr(args, name)}"
                for name in ("image_size", "batch_size", "steps", "warmup", "pairs")
            ]
            subprocess.run(command, check=True)
            rates[f"fast_loop_{args.processes}_processes"] = read_bounded(out)["images_per_second"]
    result = {
        "device": torch.cuda.get_device_name(0) if on_cuda else f"CPU ({torch.get_num_threads()} threads)",
        "backbone": settings.backbone,
        "image_size": args.image_size,
        "batch_size_per_process": args.batch_size,
        "neighbor_mode": settings.neighbor_mode,
        "amp": amp,
        "loader_threads": workers,
        "timed_steps": args.steps,
        "images_per_second": rates,
        **rate_ratios(rates),
    }
    if args.processes > 1:
        result[f"{args.processes}_processes_vs_one"] = (
            rates[f"fast_loop_{args.processes}_processes"] / rates["fast_loop"]
        )
    print(json.dumps(result, indent=2))
    if not on_cuda:
        print(
            "no GPU here; on one, run: python benchmarks/bench_train_throughput.py --processes 2 "
            "(defaults there: ResNet-50, 224 px, batch 64, 50 steps)"
        )
    write_results(result, "", out, None)
    return result


if __name__ == "__main__":
    main()
