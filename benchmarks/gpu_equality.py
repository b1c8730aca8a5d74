"""Part (a) of the GPU check: the model and losses compute the same function on the CPU and on CUDA, and the
CUDA-graph step the same as the plain step.

* **CPU vs CUDA on a tiny batch**: the paper profile's model (ResNet-50 + GRU, Ours = angular N-pair
  symmetric + within-modality losses) built from one seed on both devices, fp32 everywhere (TF32 off, so the
  GPU's matrix units do not round to 10-bit mantissas), the same batch: relative differences of the first
  step's loss and each named part, of the parameters after ``steps`` optimiser steps, and of the embeddings
  the updated model gives, beside the floor of fp32 itself (the same CPU run summed in another order, on one
  thread) and the GPU under bf16 autocast (1e-3..1e-2 expected).
* **CUDA graph vs plain step** (CUDA): the same tiny run with ``cuda_graphs`` on and off, fp32, for more steps
  than the eager warm-up, so several are replays of the captured graph.
* **static vs plain step on the CPU** (the CPU lane): the same code as the captured step, run eagerly.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from bench_train_throughput import PLAIN_FP32, build_trainer, plans, synchronize, synthetic_pairs

from models.training.static_step import WARMUP_STEPS


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


def static_vs_plain(args, settings, device: torch.device) -> dict:
    """The static step (captured on CUDA, eager on the CPU) against the plain step: the same tiny fp32 run,
    ``WARMUP_STEPS + args.replay_steps`` steps (on CUDA: the eager warm-up, the capture, replays)."""
    tiny = replace(
        settings, image_size=args.tiny_image_size, batch_size=args.tiny_batch_size, **PLAIN_FP32,
        cuda_graphs=device.type == "cuda",
    )  # fmt: skip
    data = synthetic_pairs(args.tiny_pairs, tiny.image_size, tiny.max_text_tokens)
    steps = WARMUP_STEPS + args.replay_steps
    runs = {}
    with tempfile.TemporaryDirectory() as work:
        for name, run_settings, forced in (
            ("plain", replace(tiny, cuda_graphs=False), False),
            ("static", tiny, device.type != "cuda"),
        ):
            trainer = build_trainer(run_settings, data, args.tiny_pairs - 16, Path(work) / name, device, static_step=forced)
            values, _, image, text = run_steps(trainer, steps)
            captured = trainer.static_step is not None and trainer.static_step.graph is not None
            runs[name] = (values, image, text, parameter_vector(trainer), captured)
            del trainer
    plain, static = runs["plain"], runs["static"]
    return {
        "steps": steps,
        "captured": static[4],
        "losses_by_step": [relative(b, a) for a, b in zip(plain[0], static[0], strict=True)],
        "parameters_after_steps": relative(static[3], plain[3]),
        "image_embeddings_after_steps": relative(static[1], plain[1]),
        "text_embeddings_after_steps": relative(static[2], plain[2]),
    }


def cpu_floor(args, settings) -> dict:
    """fp32 against itself on the CPU, summed in another order (one thread): the floor of every comparison."""
    tiny = replace(settings, image_size=args.tiny_image_size, batch_size=args.tiny_batch_size, **PLAIN_FP32)
    data = synthetic_pairs(args.tiny_pairs, tiny.image_size, tiny.max_text_tokens)
    runs, threads = {}, torch.get_num_threads()
    with tempfile.TemporaryDirectory() as work:
        for name, run_threads in (("cpu", threads), ("cpu_1_thread", 1)):
            torch.set_num_threads(run_threads)
            trainer = build_trainer(tiny, data, args.tiny_pairs - 16, Path(work) / name, torch.device("cpu"))
            values, _, _, _ = run_steps(trainer, args.equality_steps)
            runs[name] = (values, parameter_vector(trainer))
    torch.set_num_threads(threads)
    return {
        "first_step_losses": relative(runs["cpu_1_thread"][0][0], runs["cpu"][0][0]),
        "parameters_after_steps": relative(runs["cpu_1_thread"][1], runs["cpu"][1]),
        "steps": args.equality_steps,
    }
