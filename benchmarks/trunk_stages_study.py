"""How many of the image trunk's top stages should the two-core learning-tower profile train, the frozen trunk
(k = 0) included? Cost against benefit, measured on the validation split only (issues 45 and 50).

For each k of ``--stages`` the pipeline's own ``Train`` tasks train ``--variants`` with ``--seeds`` at the
profile's shared settings on a run root where the profile's data tasks run. k = 0 is the frozen trunk: the runs
every k >= 1 starts from (``train.trunk_warm_start``: its head trained first, as VSE++ fine-tunes), at the
profile's own epochs and early stopping. k >= 1 trains the top k stages with ``--views`` cached views per image for
at most ``--trunk-epochs`` epochs at the warm start's rate, its starting weights competing as epoch 0. Per k it
reports the seconds an epoch takes (training only, the Trains' own figure), the cached map's size and time
(``TrunkFeatures``), the validation split's expected 5-way R@1 at each run's best checkpoint, its mean over
variants and seeds, the seeds' spread, and each run's paired difference from its own frozen parent. Nothing reads
the test split.

The rule, written in docs/protocols.md before the study ran: among the affordable k — the frozen trunk, and every
k >= 1 whose seconds per epoch are at most ``--max-cost`` (4) times the frozen trunk's — take the one with the
highest mean validation score; then take instead the cheapest affordable k (the frozen trunk first, then by
seconds per epoch) whose mean is within one standard error of that best mean (the standard error of the runs'
paired differences from the best k). A k >= 1 starts from its frozen parent and keeps it when it does not improve
on validation, so its validation score is at least its parent's by construction: the one-standard-error margin is
what a k >= 1 must beat the frozen trunk by to be chosen. The learning-tower profile trains the chosen k, or,
when the frozen trunk is chosen, the best-scoring affordable k >= 1 (and says that its tower does not learn more
than frozen features here).

    python benchmarks/trunk_stages_study.py --root runs-study --json benchmarks/results/trunk_stages_study_demo.json \\
        --markdown benchmarks/results/trunk_stages_study_demo.md
    python benchmarks/trunk_stages_study.py --quick --root /tmp/study   # the smoke profile, in a minute or two
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import luigi
import numpy as np
from result_files import write_results

from pipeline.tasks.representations import TrunkFeatures, trunk_features_task
from pipeline.tasks.training import Train


def changes_for(stages: int, resolution: tuple[str, ...], trunk_epochs: int, views: int) -> tuple[str, ...]:
    """The ``--set`` changes of k trained stages (0: the frozen trunk) on the study's resolution."""
    if stages == 0:
        return resolution
    return (*resolution, f"train.trunk=top{stages}", f"train.trunk_epochs={trunk_epochs}", f"train.trunk_views={views}")


def cache_of(train: Train) -> TrunkFeatures:
    t = train.train_settings()
    return trunk_features_task(train, t, spatial=False, trained_stages=t.trunk_mode.trained_stages or 0)


def run_seconds(train: Train) -> float:
    """The seconds a run trained for (epochs times the mean seconds an epoch)."""
    summary = train.meta()["summary"]
    return float(summary["mean_epoch_seconds"] or 0.0) * int(summary["epochs"])


def standard_error(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def summarise(stages: int, trains: list[Train], frozen: list[Train]) -> dict[str, Any]:
    """One k's cost and validation scores; ``frozen``: the same variants and seeds with the frozen trunk."""
    summaries = [train.meta()["summary"] for train in trains]
    scores = [float(s["best_score"]) for s in summaries]
    parents = [float(f.meta()["summary"]["best_score"]) for f in frozen]
    features = cache_of(trains[0]).meta()
    return {
        "stages": stages,
        "trunk": trains[0].train_settings().trunk,
        "epoch_seconds": float(np.mean([s["mean_epoch_seconds"] for s in summaries])),
        # a learning tower's run costs its frozen parent's run too
        "run_seconds": float(np.mean([run_seconds(t) + (run_seconds(f) if stages else 0.0) for t, f in zip(trains, frozen, strict=True)])),
        "cache_shape": features["summary"]["shape"],
        "cache_seconds": features["wall_time_s"],
        "scores": {f"{t.variant}/{t.seed}": score for t, score in zip(trains, scores, strict=True)},
        "mean_score": float(np.mean(scores)),
        "se_score": standard_error(scores),
        "vs_frozen": [score - parent for score, parent in zip(scores, parents, strict=True)],
        "best_epochs": [int(s["best_epoch"]) for s in summaries],
        # runs whose best checkpoint is the frozen parent's (epoch 0): the trunk's run did not improve on it
        "kept_parent": sum(int(s["best_epoch"]) == 0 for s in summaries) if stages else None,
    }


def cost_ratio(row: dict[str, Any], rows: list[dict[str, Any]]) -> float:
    """A k's cost as a multiple of the frozen trunk's: the cost benchmark's (``row["x_frozen_cpu"]``, CPU seconds
    timed in one run) when given, else the study's own seconds per epoch."""
    if row.get("x_frozen_cpu") is not None:
        return float(row["x_frozen_cpu"])
    frozen = next(r for r in rows if r["stages"] == 0)
    return row["epoch_seconds"] / frozen["epoch_seconds"]


def choose(rows: list[dict[str, Any]], max_cost: float) -> dict[str, Any]:
    """The rule of the module docstring: the chosen k, why, and the learning tower the profile trains."""
    affordable = [row for row in rows if row["stages"] == 0 or cost_ratio(row, rows) <= max_cost]
    best = max(affordable, key=lambda row: row["mean_score"])
    cheapest_first = sorted(affordable, key=lambda row: (row["stages"] != 0, cost_ratio(row, rows)))
    chosen, margin = best, 0.0
    for row in cheapest_first:
        paired = [best["scores"][run] - score for run, score in row["scores"].items()]
        margin = standard_error(paired)
        if row is best or best["mean_score"] - row["mean_score"] <= margin:
            chosen = row
            break
    towers = [row for row in affordable if row["stages"] > 0]
    tower = chosen if chosen["stages"] else (max(towers, key=lambda row: row["mean_score"]) if towers else None)
    if chosen is best:
        why = "the best mean of the affordable k"
    else:
        why = f"within one standard error ({margin:.4f}) of top{best['stages'] or '0 (frozen)'}'s mean, and cheaper"
    return {
        "stages": chosen["stages"],
        "why": why,
        "best_stages": best["stages"],
        "tower_stages": None if tower is None else tower["stages"],
        "unaffordable": [row["stages"] for row in rows if row not in affordable],
    }


def markdown(rows: list[dict[str, Any]], choice: dict[str, Any], args: argparse.Namespace) -> str:
    title = (
        f"# Trunk stages study ({args.profile}{', ' + ' '.join(args.resolution) if args.resolution else ''}; frozen parents at the "
        f"profile's epochs, trunk runs ≤ {args.trunk_epochs} epochs with {args.views} views; variants {', '.join(args.variants)}; seeds {args.seeds})"
    )
    lines = [
        title,
        "",
        "| trained stages | seconds / epoch (this machine's load) | × frozen | × frozen, CPU (cost benchmark) | run seconds (with parent) | cached map | cache s | val 5-way R@1 (mean ± se) | vs own frozen parent (mean ± se) | kept parent | per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    frozen = rows[0]["epoch_seconds"]
    for row in rows:
        cpu = "–" if row.get("x_frozen_cpu") is None else f"{row['x_frozen_cpu']:.2f}"
        per_run = ", ".join(f"{k} {v:.4f}" for k, v in row["scores"].items())
        versus = "–" if row["stages"] == 0 else f"{np.mean(row['vs_frozen']):+.4f} ± {standard_error(row['vs_frozen']):.4f}"
        kept = "–" if row["kept_parent"] is None else f"{row['kept_parent']}/{len(row['scores'])}"
        lines.append(
            f"| {row['trunk']} | {row['epoch_seconds']:.1f} | {row['epoch_seconds'] / frozen:.2f} | {cpu} | {row['run_seconds']:.0f} | "
            f"{row['cache_shape'][1:]} | {row['cache_seconds']:.0f} | {row['mean_score']:.4f} ± {row['se_score']:.4f} | {versus} | {kept} | {per_run} |"
        )
    name = "frozen (k = 0)" if choice["stages"] == 0 else f"top{choice['stages']}"
    lines += ["", f"Chosen: {name} ({choice['why']})."]
    if choice["stages"] == 0 and choice["tower_stages"]:
        lines.append(
            f"The learning-tower profile trains top{choice['tower_stages']}, the best-scoring affordable k >= 1: on "
            "validation its tower does not learn more than frozen features by more than the runs' spread."
        )
    if choice["unaffordable"]:
        lines.append(f"Over the cost cap ({args.max_cost}x the frozen trunk's cost): k = {choice['unaffordable']}.")
    for k, cost in sorted(args.costs.items()):
        if k not in {row["stages"] for row in rows}:
            verdict = "over the cost cap, so not a candidate" if cost > args.max_cost else "affordable, but not in this study"
            lines.append(f"top{k}: {cost:.2f}x the frozen trunk's CPU seconds per epoch (cost benchmark), {verdict}.")
    return "\n".join(lines)


def benchmark_costs(path: str | None, image_size: int) -> dict[int, float]:
    """Per k, the cost benchmark's CPU seconds per epoch as a multiple of the frozen trunk's, at ``image_size``."""
    if path is None:
        return {}
    from common.bounded_json import read_bounded

    rows = read_bounded(Path(path))["rows"]
    return {int(r["stages"]): float(r["x_frozen"]) for r in rows if int(r["image_size"]) == image_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--variants", default="ang_np_sym,ours")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--trunk-epochs", type=int, default=6, help="the trunk runs' epoch cap (train.trunk_epochs)")
    parser.add_argument("--views", type=int, default=5, help="cached views per image (train.trunk_views)")
    parser.add_argument(
        "--resolution", default="data.options.image_size=160,data.image_cache_size=160,train.image_size=160",
        help="the --set changes of the study's resolution, comma-separated ('' for the profile's own)",
    )
    # four times the frozen trunk's seconds per epoch keeps the learning-tower profile near its 45-minute budget
    parser.add_argument("--max-cost", type=float, default=4.0, help="the most seconds per epoch, as a multiple of frozen's")
    parser.add_argument(
        "--cost-from", default=None,
        help="benchmarks/bench_trunk_cost.py's JSON: the cost side of the rule from its CPU seconds at the study's "
        "resolution (timed in one run), instead of the Trains' own seconds per epoch",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="the smoke profile, k in 0,1, one variant, 1 trunk epoch")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args()
    if args.quick:
        args.profile, args.stages, args.variants, args.seeds, args.trunk_epochs, args.views, args.resolution = (
            "smoke", "0,1", "ang_np_sym", "0,1", 1, 2, ""
        )
    args.resolution = tuple(change for change in args.resolution.split(",") if change)
    stages = [int(k) for k in args.stages.split(",")]
    if 0 not in stages:
        raise SystemExit("--stages must hold 0: the frozen trunk is a candidate and every other k's parent")
    args.variants = args.variants.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    plan = {
        k: [
            Train(profile=args.profile, set=changes_for(k, args.resolution, args.trunk_epochs, args.views), variant=variant, seed=seed, run_root=args.root)
            for variant in args.variants
            for seed in seeds
        ]
        for k in stages
    }
    started = time.time()
    tasks = [train for trains in plan.values() for train in trains]
    if not luigi.build(tasks, local_scheduler=True, workers=args.workers, log_level="WARNING"):
        raise SystemExit("a Train failed: see the log above")
    rows = [summarise(k, trains, plan[0]) for k, trains in sorted(plan.items())]
    args.costs = benchmark_costs(args.cost_from, plan[0][0].train_settings().image_size)
    for row in rows:
        row["x_frozen_cpu"] = args.costs.get(row["stages"])
    choice = choose(rows, args.max_cost)
    payload = {
        "profile": args.profile,
        "resolution": list(args.resolution),
        "trunk_epochs": args.trunk_epochs,
        "views": args.views,
        "seeds": seeds,
        "rows": rows,
        "choice": choice,
        "cost_from": args.cost_from,
        "wall_s": time.time() - started,
    }
    text = markdown(rows, choice, args)
    print(text)
    write_results(payload, text, args.json, args.markdown)


if __name__ == "__main__":
    main()
