"""The paper-profile training step beside a bare ResNet-50 step, at the same batch, in one run (issue 38).

Per batch size (64, the paper's; 128; 256), images per second of

* ``bare``: torchvision's ResNet-50 alone, forward + cross-entropy on random labels + backward + PyTorch's
  default Adam, under the same speed settings as the project's step (bf16 autocast where supported,
  channels-last, cuDNN's algorithm search) on one batch already on the device: what the image tower alone
  can do on this device;
* ``plain``: the project's step (``bench_train_throughput.compute_rate``: Ours, ResNet-50 + GRU, in-batch
  neighbors, flips) with every default, ``cuda_graphs`` off;
* ``graphed``: the same with ``cuda_graphs`` on (CUDA only: the step captured once and replayed);

and each step's ratio to ``bare``. Goals (issue 38, one H100-class GPU): the step >= 0.9x bare at batch 64
and at 256, and >= 3,000 images/s at 64.

    python benchmarks/bench_step_vs_resnet.py                     # CUDA: 224 px, batches 64 128 256
    python benchmarks/bench_step_vs_resnet.py --image-size 32 --batches 4 --steps 2 --warmup 1   # CPU: runs

Writes ``benchmarks/results/step_vs_resnet.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train_throughput import build_trainer, compute_rate, synchronize, synthetic_pairs  # noqa: E402

from models.acceleration import amp_dtype, autocast  # noqa: E402
from pipeline.config.profiles import PROFILES  # noqa: E402

PAPER = PROFILES.get("paper").settings()


def bare_resnet_rate(
    batch: int, image_size: int, device: torch.device, warmup: int, steps: int, backbone: str = "resnet50"
) -> float:
    """Images/s of torchvision's ResNet (``backbone``) training step alone on one batch on the device."""
    import torchvision.models

    on_cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = getattr(torchvision.models, backbone)(weights=None).to(device)
    if on_cuda:
        torch.backends.cudnn.benchmark = True
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    images = torch.randn(batch, 3, image_size, image_size, device=device)
    if on_cuda:
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    dtype = amp_dtype(PAPER.train.amp, device)
    for index in range(warmup + steps):
        if index == warmup:
            synchronize(device)
            started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype, device):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    synchronize(device)
    return steps * batch / (time.perf_counter() - started)


def step_rate(
    batch: int, image_size: int, device: torch.device, warmup: int, steps: int, graphs: bool, pairs: int,
    base=PAPER.train,
) -> float:
    """Images/s of the project's paper-profile step (``cuda_graphs`` as asked) on one batch on the device."""
    settings = replace(
        base, pretrained=False, image_size=image_size, batch_size=batch, selection="val_loss", cuda_graphs=graphs
    )
    data = synthetic_pairs(max(pairs, 2 * batch + 64), image_size, settings.max_text_tokens)
    with tempfile.TemporaryDirectory() as work:
        trainer = build_trainer(settings, data, len(data.image_rows) - 64, Path(work), device)
        if graphs and trainer.static_step is None:
            raise RuntimeError("cuda_graphs is on but the trainer took the plain step (see the warning above)")
        rate = compute_rate(trainer, warmup, steps)
        captured = trainer.static_step is not None and trainer.static_step.graph is not None
        if graphs and not captured:
            raise RuntimeError("the graphed step was never captured")
    return rate


def release(device: torch.device) -> None:
    """Memory of the last measurement (a graph's private pool included) back before the next."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure(
    batches: list[int], image_size: int, device: torch.device, warmup: int, steps: int, pairs: int,
    base=PAPER.train,
) -> dict:
    """The table: per batch, each rate and each step's ratio to the bare ResNet (``graphed`` on CUDA);
    ``base`` the step's settings (the paper profile's; its backbone is also the bare model)."""
    rows = {}
    for batch in batches:
        row = {"bare_resnet50": bare_resnet_rate(batch, image_size, device, warmup, steps, base.backbone)}
        release(device)
        row["plain_step"] = step_rate(batch, image_size, device, warmup, steps, False, pairs, base)
        release(device)
        if device.type == "cuda":
            row["graphed_step"] = step_rate(batch, image_size, device, warmup, steps, True, pairs, base)
            release(device)
        for name in ("plain_step", "graphed_step"):
            if name in row:
                row[f"{name}_vs_bare"] = row[name] / row["bare_resnet50"]
        rows[str(batch)] = row
    return {
        "image_size": image_size,
        "backbone": base.backbone,
        "amp": str(amp_dtype(base.amp, device) or "fp32").replace("torch.", ""),
        "warmup_steps": warmup,
        "timed_steps": steps,
        "images_per_second": rows,
    }


def table_lines(result: dict) -> list[str]:
    """The table as Markdown rows."""
    lines = [
        "| batch | bare ResNet-50 | plain step | ratio | graphed step | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for batch, row in result["images_per_second"].items():
        graphed = row.get("graphed_step")
        lines.append(
            f"| {batch} | {row['bare_resnet50']:,.0f} | {row['plain_step']:,.0f} | {row['plain_step_vs_bare']:.2f} | "
            + (f"{graphed:,.0f} | {row['graphed_step_vs_bare']:.2f} |" if graphed else "– | – |")
        )
    return lines


def summary(result: dict) -> str:
    parts = []
    for batch, row in result["images_per_second"].items():
        best = row.get("graphed_step", row["plain_step"])
        parts.append(
            f"batch {batch}: bare {row['bare_resnet50']:,.0f}, plain {row['plain_step']:,.0f} "
            f"({row['plain_step_vs_bare']:.2f}x)"
            + (f", graphed {best:,.0f} ({row['graphed_step_vs_bare']:.2f}x)" if "graphed_step" in row else "")
        )
    return f"step vs bare {result['backbone']} at {result['image_size']} px ({result['amp']}): " + "; ".join(parts)


def main() -> None:
    on_cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256] if on_cuda else [4])
    parser.add_argument("--image-size", type=int, default=224 if on_cuda else 32)
    parser.add_argument("--steps", type=int, default=30 if on_cuda else 2)
    parser.add_argument("--warmup", type=int, default=10 if on_cuda else 1)
    parser.add_argument("--pairs", type=int, default=640 if on_cuda else 80, help="synthetic cache rows")
    parser.add_argument("--out", default="benchmarks/results/step_vs_resnet.json")
    args = parser.parse_args()
    device = torch.device("cuda" if on_cuda else "cpu")
    result = measure(args.batches, args.image_size, device, args.warmup, args.steps, args.pairs)
    result["device"] = torch.cuda.get_device_name(0) if on_cuda else "CPU (no CUDA: no graphed step)"
    print("\n".join(table_lines(result)))
    print(summary(result))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
