"""The GPU check: what to run first on a lent GPU (one call, well under 10 minutes).

1. **CPU vs CUDA on a tiny batch.** The paper profile's model (ResNet-50 + GRU, Ours = angular N-pair
   symmetric + within-modality losses) built from one seed on both devices, fp32 everywhere (TF32 off, so
   the GPU's matrix units do not round to 10-bit mantissas), the same batch: relative differences of the
   first step's loss and each named part, of the parameters after ``--equality-steps`` optimiser steps, and
   of the embeddings the updated model gives. fp32 on two devices differs by summation order alone, so these
   should sit near 1e-6..1e-4; the same comparison with the GPU under bf16 autocast (the training default
   there) is printed beside them (bf16 operands: 1e-3..1e-2 is expected).
2. **Paper-profile training speed with mixed precision**: ``bench_train_throughput.py`` at the paper's
   sizes (224 px, batch 64; the plain fp32 loop, the default bf16 loop, the step alone, the loader alone).

    python benchmarks/gpu_check.py            # on a machine with CUDA; writes benchmarks/results/gpu_check.json

Without CUDA it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train_throughput import (  # noqa: E402
    PLAIN_FP32,
    build_trainer,
    plans,
    rate_ratios,
    single_process_rates,
    synchronize,
    synthetic_pairs,
)

from pipeline.config.profiles import PAPER  # noqa: E402


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64 on the CPU."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def parameter_vector(trainer) -> torch.Tensor:
    return torch.cat([p.detach().double().cpu().flatten() for p in trainer.model.parameters()])


def gradients_by_name(trainer) -> dict[str, torch.Tensor]:
    return {
        name: p.grad.detach().double().cpu()
        for name, p in trainer.model.named_parameters()
        if p.grad is not None
    }


def run_steps(trainer, steps: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """``steps`` training steps on the trainer's first batches (each step's loss values; the first step's
    gradients, which the step leaves in place), then the updated model's embeddings of the first batch in
    eval mode."""
    values, first, gradients = [], None, None
    for plan in plans(trainer, steps):
        loaded = trainer.loader.to_device(trainer.host_batch(plan))
        first = first or (plan, loaded)
        values.append(trainer.train_step(plan, loaded).values().detach().cpu())
        gradients = gradients_by_name(trainer) if gradients is None else gradients
    plan, loaded = first
    trainer.model.eval()
    with torch.no_grad():
        out = trainer.model(loaded.images, loaded.tokens, loaded.lengths)
    return values, gradients, out["image"].float().cpu(), out["text"].float().cpu()


def equality(args, settings, gpu: torch.device) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tiny = replace(settings, image_size=args.tiny_image_size, batch_size=args.tiny_batch_size, **PLAIN_FP32)
    data = synthetic_pairs(args.tiny_pairs, tiny.image_size, tiny.max_text_tokens)
    n_train = args.tiny_pairs - 16
    result = {}
    with tempfile.TemporaryDirectory() as work:
        runs = {}
        threads = torch.get_num_threads()
        for name, device, step_settings, run_threads in (
            ("cpu_fp32", torch.device("cpu"), tiny, threads),
            # the floor: fp32 on the same device, summed in another order (one thread)
            ("cpu_fp32_1_thread", torch.device("cpu"), tiny, 1),
            ("cuda_fp32", gpu, tiny, threads),
            ("cuda_bf16", gpu, replace(tiny, amp="bf16"), threads),
        ):
            torch.set_num_threads(run_threads)
            trainer = build_trainer(step_settings, data, n_train, Path(work) / name, device)
            values, gradients, image, text = run_steps(trainer, args.equality_steps)
            runs[name] = (values, gradients, image, text, parameter_vector(trainer))
            del trainer
        torch.set_num_threads(threads)
        reference = runs["cpu_fp32"]
        for name in ("cpu_fp32_1_thread", "cuda_fp32", "cuda_bf16"):
            values, gradients, image, text, params = runs[name]
            by_tensor = {key: relative(gradients[key], reference[1][key]) for key in reference[1]}
            worst = sorted(by_tensor, key=by_tensor.get, reverse=True)[:3]
            result[name] = {
                "first_step_losses": relative(values[0], reference[0][0]),
                "first_step_gradients": relative(
                    torch.cat([g.flatten() for g in gradients.values()]),
                    torch.cat([g.flatten() for g in reference[1].values()]),
                ),
                "first_step_gradients_median_tensor": float(np.median(list(by_tensor.values()))),
                "first_step_gradients_worst_tensors": {key: by_tensor[key] for key in worst},
                "last_step_losses": relative(values[-1], reference[0][-1]),
                "parameters_after_steps": relative(params, reference[4]),
                "image_embeddings_after_steps": relative(image, reference[2]),
                "text_embeddings_after_steps": relative(text, reference[3]),
            }
        result["first_step_loss_cpu"] = reference[0][0].tolist()
    result["steps"] = args.equality_steps
    result["sizes"] = {"image_size": args.tiny_image_size, "batch_size": args.tiny_batch_size}
    return result


def device_time(event) -> float:
    """An op's own GPU time in microseconds (the attribute was renamed across PyTorch versions)."""
    return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))


def step_profile(trainer, steps: int = 10, top: int = 12) -> dict:
    """Where a training step's time goes: the ops with the most GPU time over ``steps`` steps on one batch,
    and the share of the wall time the GPU was busy (well under 1: the step waits on the host)."""
    plan = next(iter(plans(trainer, 1)))
    loaded = trainer.loader.to_device(trainer.host_batch(plan))
    for _ in range(5):
        trainer.train_step(plan, loaded)
    synchronize(trainer.device)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    started = time.perf_counter()
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(steps):
            trainer.train_step(plan, loaded)
        synchronize(trainer.device)
    wall_us = (time.perf_counter() - started) * 1e6
    events = profiler.key_averages()
    # kernels (and copies) are the device's own events; an op's device time is its kernels' again
    kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(device_time(event) for event in kernels)
    ops = [event for event in events if event.device_type == torch.autograd.DeviceType.CPU]
    ranked = sorted(ops, key=device_time, reverse=True)[:top]
    return {
        "steps": steps,
        "wall_ms_per_step_profiled": wall_us / steps / 1e3,
        "gpu_busy_ms_per_step": busy_us / steps / 1e3,
        "gpu_busy_share": busy_us / wall_us,
        "top_ops_gpu_ms_per_step": {
            event.key: round(device_time(event) / steps / 1e3, 3) for event in ranked
        },
        "cpu_ms_per_step_top_ops": {
            event.key: round(event.self_cpu_time_total / steps / 1e3, 3)
            for event in sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
        },
    }


def safe_step_profile(trainer) -> dict:
    """:func:`step_profile`, or the error it raised: a diagnosis must not cost the measurements."""
    try:
        return step_profile(trainer)
    except Exception as error:  # noqa: BLE001
        return {"error": repr(error)}


def throughput(args, settings) -> dict:
    # what training runs under: PyTorch's defaults (TF32 in cuDNN convolutions, not in matrix products)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda")
    data = synthetic_pairs(args.pairs, settings.image_size, settings.max_text_tokens)
    n_train = args.pairs - 64
    rates, amp, workers, profile = single_process_rates(
        settings, data, n_train, device, args.warmup, args.steps, inspect=safe_step_profile
    )
    return {
        "profile_of_fast_step": profile,
        "image_size": settings.image_size,
        "batch_size": settings.batch_size,
        "amp": amp,
        "loader_threads": workers,
        "timed_steps": args.steps,
        "images_per_second": rates,
        **rate_ratios(rates),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--equality-steps", type=int, default=3)
    parser.add_argument("--tiny-image-size", type=int, default=64)
    parser.add_argument("--tiny-batch-size", type=int, default=16)
    parser.add_argument("--tiny-pairs", type=int, default=96)
    parser.add_argument("--steps", type=int, default=50, help="timed paper-profile steps")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2048, help="synthetic cache rows for the speed part")
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a machine with a GPU", file=sys.stderr)
        raise SystemExit(2)
    # the paper profile, untrained weights: neither the equality nor the speed depends on them
    settings = replace(PAPER.train, pretrained=False, selection="val_loss")
    started = time.perf_counter()
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backbone": settings.backbone,
        "variant": "ours",
        "equality": equality(args, settings, torch.device("cuda")),
        "throughput": throughput(args, settings),
    }
    result["seconds"] = time.perf_counter() - started
    print(json.dumps(result, indent=2))
    eq = result["equality"]
    speed = result["throughput"]
    print(
        f"\n{result['device']}: CPU vs CUDA fp32 — first-step losses {eq['cuda_fp32']['first_step_losses']:.1e}, "
        f"parameters after {eq['steps']} steps {eq['cuda_fp32']['parameters_after_steps']:.1e}; "
        f"first-step gradients {eq['cuda_fp32']['first_step_gradients']:.1e} (median tensor "
        f"{eq['cuda_fp32']['first_step_gradients_median_tensor']:.1e}; CPU 1 thread vs CPU: "
        f"{eq['cpu_fp32_1_thread']['first_step_gradients']:.1e}, median "
        f"{eq['cpu_fp32_1_thread']['first_step_gradients_median_tensor']:.1e}); "
        f"bf16 {eq['cuda_bf16']['first_step_losses']:.1e} / {eq['cuda_bf16']['parameters_after_steps']:.1e}"
    )
    rates = speed["images_per_second"]
    print(
        f"paper profile ({speed['image_size']} px, batch {speed['batch_size']}, {speed['amp']}): "
        f"{rates['fast_loop']:.0f} images/s (fp32 loop {rates['plain_fp32_loop']:.0f}, step alone "
        f"{rates['compute_only']:.0f}, loader {rates['loader_only']:.0f}); {result['seconds']:.0f} s"
    )
    profile = speed["profile_of_fast_step"]
    print(
        profile.get("error")
        or f"one step: {profile['wall_ms_per_step_profiled']:.1f} ms wall, GPU busy "
        f"{profile['gpu_busy_ms_per_step']:.1f} ms ({profile['gpu_busy_share']:.0%})"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
