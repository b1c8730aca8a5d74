"""How many of the image trunk's top stages should a two-core profile train? Cost against benefit, measured on the
validation split only (issue 45).

For each k of ``--stages`` (0 is the frozen trunk), the pipeline's own ``Train`` tasks train ``--variants`` with
``--seeds`` at the profile's shared settings (``train.trunk=top<k>`` and the trunk's learning-rate scale of the
finetune profile; ``train.epochs`` capped at ``--epochs`` so the study is affordable) on a run root where the
profile's data tasks ran. Per k it reports the seconds an epoch takes (training only, the Trains' own figure),
the cached map's size and time (``TrunkFeatures``), and the validation split's expected 5-way R@1 at each
run's best checkpoint, its mean over variants and seeds and the seeds' spread. Nothing reads the test split.

The rule, fixed before the study ran: take the k with the highest mean validation score among those whose
seconds per epoch keep the finetune profile within its 90-minute budget (at most ``--max-cost``, 4, times the
frozen trunk's); when a cheaper k is within the seeds' spread (one standard error of the difference of the
means) of it, take the cheaper one.

    python benchmarks/trunk_stages_study.py --root runs --json benchmarks/results/trunk_stages_study_demo.json \\
        --markdown benchmarks/results/trunk_stages_study_demo.md
    python benchmarks/trunk_stages_study.py --quick --root /tmp/study   # the smoke profile, in a minute or two
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import luigi
import numpy as np
from result_files import write_results

from pipeline.tasks.representations import TrunkFeatures, trunk_features_task
from pipeline.tasks.training import Train

#: the trunk learning-rate scale the finetune profile uses (pipeline/config/profiles.py, DEMO_FINETUNE)
TRUNK_LEARNING_RATE_SCALE = 0.1


def changes_for(stages: int, epochs: int) -> tuple[str, ...]:
    if stages == 0:
        return (f"train.epochs={epochs}",)
    return (f"train.epochs={epochs}", f"train.trunk=top{stages}", f"train.trunk_learning_rate_scale={TRUNK_LEARNING_RATE_SCALE}")


def trains_for(root: str, profile: str, stages: int, epochs: int, variants: list[str], seeds: list[int]) -> list[Train]:
    return [
        Train(profile=profile, set=changes_for(stages, epochs), variant=variant, seed=seed, run_root=root)
        for variant in variants
        for seed in seeds
    ]


def cache_of(train: Train) -> TrunkFeatures:
    t = train.train_settings()
    return trunk_features_task(train, t, spatial=False, trained_stages=t.trunk_mode.trained_stages or 0)


def summarise(stages: int, trains: list[Train]) -> dict[str, Any]:
    """One k's cost and validation scores."""
    summaries = [train.meta()["summary"] for train in trains]
    scores = [float(s["best_score"]) for s in summaries]
    features = cache_of(trains[0]).meta()
    return {
        "stages": stages,
        "trunk": trains[0].train_settings().trunk,
        "epoch_seconds": float(np.mean([s["mean_epoch_seconds"] for s in summaries])),
        "cache_shape": features["summary"]["shape"],
        "cache_seconds": features["wall_time_s"],
        "scores": {f"{t.variant}/{t.seed}": score for t, score in zip(trains, scores, strict=True)},
        "mean_score": float(np.mean(scores)),
        "se_score": float(np.std(scores, ddof=1) / math.sqrt(len(scores))) if len(scores) > 1 else 0.0,
        "best_epochs": [int(s["best_epoch"]) for s in summaries],
    }


def choose(rows: list[dict[str, Any]], max_cost: float) -> dict[str, Any]:
    """The rule of the module docstring."""
    frozen = next(row for row in rows if row["stages"] == 0)
    affordable = [row for row in rows if row["stages"] > 0 and row["epoch_seconds"] <= max_cost * frozen["epoch_seconds"]]
    if not affordable:
        return {"stages": None, "why": f"no k trains within {max_cost}x the frozen trunk's seconds per epoch"}
    best = max(affordable, key=lambda row: row["mean_score"])
    for row in sorted(affordable, key=lambda row: row["epoch_seconds"]):
        margin = math.hypot(best["se_score"], row["se_score"])
        if best["mean_score"] - row["mean_score"] <= margin:
            why = "the best mean" if row is best else f"within one standard error ({margin:.4f}) of top{best['stages']}'s mean, and cheaper"
            return {"stages": row["stages"], "why": why}
    return {"stages": best["stages"], "why": "the best mean"}


def markdown(rows: list[dict[str, Any]], choice: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"# Trunk stages study ({args.profile}, epochs ≤ {args.epochs}, variants {', '.join(args.variants)}, seeds {args.seeds})",
        "",
        "| trained stages | seconds / epoch | × frozen | cached map | cache s | val 5-way R@1 (mean ± se) | per run |",
        "|---|---|---|---|---|---|---|",
    ]
    frozen = rows[0]["epoch_seconds"]
    for row in rows:
        per_run = ", ".join(f"{k} {v:.4f}" for k, v in row["scores"].items())
        lines.append(
            f"| {row['trunk']} | {row['epoch_seconds']:.1f} | {row['epoch_seconds'] / frozen:.2f} | {row['cache_shape'][1:]} | "
            f"{row['cache_seconds']:.0f} | {row['mean_score']:.4f} ± {row['se_score']:.4f} | {per_run} |"
        )
    lines += ["", f"Chosen: top{choice['stages']} ({choice['why']})." if choice["stages"] else f"Chosen: none ({choice['why']})."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--variants", default="ang_np_sym,ours")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=8)
    # the frozen demo's tuned protocol for these four variants takes about 15 of its 23 minutes (idle, two
    # cores): four times its seconds per epoch is about an hour, which leaves the caches, the evaluations and the
    # report inside the profile's 90 minutes
    parser.add_argument("--max-cost", type=float, default=4.0, help="the most seconds per epoch, as a multiple of frozen's")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="the smoke profile, k in 0,1, one variant, 1 epoch")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args()
    if args.quick:
        args.profile, args.stages, args.variants, args.seeds, args.epochs = "smoke", "0,1", "ang_np_sym", "0,1", 1
    stages = [int(k) for k in args.stages.split(",")]
    args.variants = args.variants.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    plan = {k: trains_for(args.root, args.profile, k, args.epochs, args.variants, seeds) for k in stages}
    started = time.time()
    tasks = [train for trains in plan.values() for train in trains]
    if not luigi.build(tasks, local_scheduler=True, workers=args.workers, log_level="WARNING"):
        raise SystemExit("a Train failed: see the log above")
    rows = [summarise(k, trains) for k, trains in plan.items()]
    choice = choose(rows, args.max_cost)
    payload = {"profile": args.profile, "epochs": args.epochs, "seeds": seeds, "rows": rows, "choice": choice, "wall_s": time.time() - started}
    text = markdown(rows, choice, args)
    print(text)
    write_results(payload, text, args.json, args.markdown)


if __name__ == "__main__":
    main()
