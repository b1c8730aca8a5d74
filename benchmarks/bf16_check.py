"""Does a bf16 run learn what an fp32 run learns? (issue 38, item 4)

The same short paper-profile training twice per seed through the pipeline's own command: fp32 (``amp=off``;
TF32 in cuDNN's convolutions, PyTorch's default) and bf16 autocast (``amp=bf16``), on the embedded data
(a few thousand pairs, a few epochs, two seeds, Ours, the shared protocol), both in one run root so the
data, Doc2Vec, neighbors and trunk features are computed once. Each run's Train ``history.csv`` (the
validation curves) and Evaluate ``metrics.json`` (the test split's 5-way R@1 in both directions) are read
through the ``Report``'s ``run_index.json``.

The verdict compares the precisions against the seeds: bf16 learns what fp32 learns when, for each
direction, the mean of the per-seed differences bf16 - fp32 (a seed shares its data order and initial
weights across the two precisions) is within the seeds' spread (the largest distance between two seeds of
one precision), and so is the largest gap between the two precisions' mean validation curves. Two seeds
make a crude spread; the check can only find a difference larger than the seeds' own.

    python benchmarks/bf16_check.py                      # a GPU host: 3,000 pairs, 3 epochs, seeds 0 and 1
    python benchmarks/bf16_check.py --smoke              # anywhere: the smoke profile, to prove the script

``--pretrained`` uses ImageNet weights (a GPU host is often offline: untrained weights by default). On a CPU
autocast is off, so both runs are fp32 and the verdict is trivially "same": the smoke mode only shows that
the script works. Writes ``benchmarks/results/bf16_check.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common.bounded_json import read_bounded
from common.files import PARTIAL_SUFFIX
from common.run_folder import HISTORY_FILE

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = {"fp32": "off", "bf16": "bf16"}
DIRECTIONS = ("i2t", "t2i")
CURVES = ("val_nway_r1", "val_loss")


def command(args: argparse.Namespace, amp: str, run_root: Path) -> list[str]:
    profile = "smoke" if args.smoke else "paper"
    sets = [f"variants.*.train.amp={amp}", f"train.epochs={args.epochs}"]
    if args.pairs:
        sets.append(f"data.options.n_pairs={args.pairs}")
    if not args.pretrained and not args.smoke:
        sets.append("train.pretrained=false")
    line = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--profile", profile]
    for value in sets:
        line += ["--set", value]
    seeds = json.dumps(list(args.seeds))
    return line + ["--variants", '["ours"]', "--seeds", seeds, "--protocol", "shared", "--run-root", str(run_root), "--quiet"]


def read_runs(run_root: Path, report: Path) -> list[dict]:
    """Each run of ``report``: its seed, validation curves and test 5-way R@1."""
    runs = []
    for entry in read_bounded(report / "run_index.json")["runs"]:
        with open(run_root / entry["train"] / HISTORY_FILE, newline="") as handle:
            history = list(csv.DictReader(handle))
        metrics = read_bounded(run_root / entry["evaluate"] / "metrics.json")
        runs.append(
            {
                "variant": entry["variant"],
                "seed": entry["seed"],
                "curves": {name: [float(row[name]) for row in history if row.get(name)] for name in CURVES},
                "test_5way_r1": {direction: float(metrics["retrieval"][direction]) for direction in DIRECTIONS},
                "n_way": metrics["retrieval"]["n_way"],
                "train": entry["train"],
            }
        )
    return sorted(runs, key=lambda run: run["seed"])


def run_precision(args: argparse.Namespace, name: str, run_root: Path) -> dict:
    """One FullRun at a precision; its runs, read through the Report it made."""
    before = set((run_root / "Report").glob("*")) if (run_root / "Report").exists() else set()
    started = time.perf_counter()
    done = subprocess.run(command(args, PRECISIONS[name], run_root), cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bf16_check: the {name} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    reports = [path for path in set((run_root / "Report").glob("*")) - before if not path.name.endswith(PARTIAL_SUFFIX)]
    if len(reports) != 1:
        raise SystemExit(f"bf16_check: expected one new Report for the {name} run, found {len(reports)}")
    return {"seconds": round(seconds, 1), "report": reports[0].name, "runs": read_runs(run_root, reports[0])}


def spread(values: list[float]) -> float:
    return float(max(values) - min(values)) if len(values) > 1 else 0.0


def compare(fp32: list[dict], bf16: list[dict]) -> dict:
    """Per direction: each precision's per-seed R@1, the mean paired difference, the seed spread; the curves'
    largest gap between the precisions' means against the seeds' spread there; the verdict."""
    if [run["seed"] for run in fp32] != [run["seed"] for run in bf16]:
        raise ValueError("the two precisions ran different seeds")
    result: dict = {"test_5way_r1": {}, "curves": {}}
    same = True
    for direction in DIRECTIONS:
        a = [run["test_5way_r1"][direction] for run in fp32]
        b = [run["test_5way_r1"][direction] for run in bf16]
        difference = float(np.mean(np.subtract(b, a)))
        seeds = max(spread(a), spread(b))
        within = abs(difference) <= seeds
        same &= within
        result["test_5way_r1"][direction] = {
            "fp32": a, "bf16": b, "mean_bf16_minus_fp32": difference, "seed_spread": seeds, "within_spread": within,
        }  # fmt: skip
    for name in CURVES:
        epochs = min(len(run["curves"][name]) for run in fp32 + bf16)
        if epochs == 0:
            continue
        a = np.array([run["curves"][name][:epochs] for run in fp32])
        b = np.array([run["curves"][name][:epochs] for run in bf16])
        gap = np.abs(b.mean(axis=0) - a.mean(axis=0))
        seeds = np.maximum(np.ptp(a, axis=0), np.ptp(b, axis=0))
        within = bool((gap <= seeds).all())
        same &= within
        result["curves"][name] = {
            "fp32_mean": a.mean(axis=0).tolist(), "bf16_mean": b.mean(axis=0).tolist(),
            "largest_gap": float(gap.max()), "seed_spread_there": float(seeds[int(gap.argmax())]),
            "within_spread": within,
        }  # fmt: skip
    result["same"] = same
    return result


def verdict_line(comparison: dict, device: str) -> str:
    r1 = comparison["test_5way_r1"]
    figures = ", ".join(
        f"{d} bf16-fp32 {r1[d]['mean_bf16_minus_fp32']:+.3f} (seed spread {r1[d]['seed_spread']:.3f})" for d in DIRECTIONS
    )
    if comparison["same"]:
        return f"bf16 vs fp32 on {device}: bf16 learns what fp32 learns within the seeds' spread ({figures})"
    return (
        f"bf16 vs fp32 on {device}: bf16 DIFFERS beyond the seeds' spread ({figures}); make fp32 (amp=off, TF32) "
        "the CUDA default and say why in docs/gpu.md"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=None, help="embedded pairs (3000; smoke: the profile's)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (3; smoke: 2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--pretrained", action="store_true", help="ImageNet weights (the host must have them)")
    parser.add_argument("--smoke", action="store_true", help="the smoke profile at toy size (the CPU)")
    parser.add_argument("--run-root", type=Path, default=None, help="keep the runs here (default: a temp folder)")
    parser.add_argument("--out", default="benchmarks/results/bf16_check.json")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or (2 if args.smoke else 3)
    args.pairs = args.pairs or (None if args.smoke else 3000)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no CUDA: both runs are fp32)"
    with tempfile.TemporaryDirectory() as scratch:
        run_root = args.run_root or Path(scratch)
        runs = {name: run_precision(args, name, run_root) for name in PRECISIONS}
    comparison = compare(runs["fp32"]["runs"], runs["bf16"]["runs"])
    result = {
        "device": device,
        "profile": "smoke" if args.smoke else "paper",
        "pairs": args.pairs,
        "epochs": args.epochs,
        "seeds": args.seeds,
        "pretrained": args.pretrained,
        "runs": runs,
        "comparison": comparison,
        "verdict": verdict_line(comparison, device),
    }
    print(result["verdict"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
