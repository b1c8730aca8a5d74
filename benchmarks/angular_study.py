"""Why does Ang+NP+Sym trail Trip+NP+Sym on the demo when the paper's Table 1 has the opposite order?

One factor at a time from the demo profile's settings, Ang+NP+Sym and Trip+NP+Sym are trained as the
pipeline trains them (``Train`` tasks, so every run reuses the run root's features, tables and any Train
already there — the FullRun's and the tuning trials') and scored by their **validation** rsum (full
ranking, at each run's selected checkpoint). The test split is never read.

Factors: the angular loss's form (smooth vs the hinge of Eq. 2) and angle α; for both losses the learning
rate, the batch size and the epoch cap.

Besides the rsum (the top of the ranking), each run's selected checkpoint is scored on the validation split
for the bulk of the ranking — 5-way R@1 (the paper's Table 1 metric: the positive against four random
distractors) and the median and mean rank of the positive — because the two can order methods differently.

    python benchmarks/angular_study.py --root runs --json benchmarks/results/angular_study.json \
        --markdown benchmarks/results/angular_study.md

Each run is one Train (about 1-3 minutes on 2 CPU cores); the default two seeds and every factor are 30
Trains; those the demo's FullRun already made (the profile's settings, the tuning trials, the tuned report
seeds) are reused, 10 of them after the demo of bb38e64.

    python benchmarks/angular_study.py --quick --root R   # a smoke test: the smoke profile, seed 0, two factors

``--quick`` runs the smoke profile's settings and the hinge form only (on a smoke run's root the former are
its FullRun's Trains, reused), so it proves the study's path in seconds, not its figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import luigi
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_recipes.manifest import image_ids  # noqa: E402
from evaluation.protocol import EVAL_SEED, full_ranking, retrieval_layout  # noqa: E402
from evaluation.retrieval import n_way_recall_at_1  # noqa: E402
from models.inference import embed_pairs  # noqa: E402
from pipeline.tasks.evaluation import Evaluate  # noqa: E402
from pipeline.tasks.train_inputs import load_pair_data, load_trained_model  # noqa: E402
from pipeline.tasks.training import Train  # noqa: E402

BASELINES = {"ang_np_sym": "Ang+NP+Sym", "trip_np_sym": "Trip+NP+Sym"}

#: (factor, setting label, which variants it applies to, the --variant-overrides it makes)
FACTORS: list[tuple[str, str, tuple[str, ...], dict[str, Any]]] = [
    ("profile", "demo settings (lr 1e-3, batch 64, cap 20)", tuple(BASELINES), {}),
    ("learning rate", "3e-4", tuple(BASELINES), {"train": {"learning_rate": 3e-4}}),
    ("learning rate", "3e-3", tuple(BASELINES), {"train": {"learning_rate": 3e-3}}),
    ("batch size", "32", tuple(BASELINES), {"train": {"batch_size": 32}}),
    ("batch size", "128", tuple(BASELINES), {"train": {"batch_size": 128}}),
    ("epoch cap", "40", tuple(BASELINES), {"train": {"epochs": 40}}),
    ("angular form", "hinge (Eq. 2)", ("ang_np_sym",), {"angular": {"form": "hinge"}}),
    ("angle α", "30°", ("ang_np_sym",), {"angular": {"alpha_degrees": 30.0}}),
    ("angle α", "36°", ("ang_np_sym",), {"angular": {"alpha_degrees": 36.0}}),
    ("angle α", "55°", ("ang_np_sym",), {"angular": {"alpha_degrees": 55.0}}),
    # the best angle with the learning rate the tuned protocol chose for the angular baseline
    (
        "α and lr",
        "36°, lr 3e-3",
        ("ang_np_sym",),
        {"angular": {"alpha_degrees": 36.0}, "train": {"learning_rate": 3e-3}},
    ),
]


#: the factors of ``--quick``
QUICK_FACTORS = ("profile", "angular form")


def planned_trains(
    root: str, profile: str, seeds: list[int], factors: tuple[str, ...] | None = None
) -> list[tuple[str, str, str, int, Train]]:
    """Every (factor, setting, variant, seed) run of ``factors`` (default: all of them) and its Train."""
    return [
        (
            factor,
            setting,
            variant,
            seed,
            Train(run_root=root, profile=profile, variant=variant, seed=seed, point=overrides),
        )
        for factor, setting, variants, overrides in FACTORS
        if factors is None or factor in factors
        for variant in variants
        for seed in seeds
    ]


def validation_ranking(train: Train) -> dict[str, float]:
    """5-way R@1 and median / mean rank of the positive on the validation split, at the run's selected
    checkpoint (the Evaluate task's inputs and code path, pointed at the validation rows)."""
    inputs = train.clone(Evaluate).requires()
    settings = train.train_settings()
    data, manifest = load_pair_data(inputs, settings.max_text_tokens)
    model, _ = load_trained_model(inputs)
    rows = np.flatnonzero((manifest["split"] == "val").to_numpy())
    with torch.no_grad():
        embedded = embed_pairs(model, next(model.parameters()).device, data, rows, settings.image_size)
    evaluation = train.settings.eval
    group_ids = data.group_ids[rows]
    n_way = n_way_recall_at_1(
        embedded["image"],
        embedded["text"],
        evaluation.n_way,
        EVAL_SEED,
        evaluation.redraws,
        group_ids=group_ids,
    )
    val_manifest = manifest.iloc[rows]
    layout = retrieval_layout(group_ids, image_ids(val_manifest), val_manifest["text"].to_numpy())
    full = full_ranking(embedded["image"], embedded["text"], layout)["all"]
    return {
        "val_5way_i2t": float(n_way["i2t"]),
        "val_5way_t2i": float(n_way["t2i"]),
        "val_medr_i2t": float(full["i2t_medr"]),
        "val_medr_t2i": float(full["t2i_medr"]),
        "val_meanr_i2t": float(full["i2t_meanr"]),
        "val_meanr_t2i": float(full["t2i_meanr"]),
    }


def run_record(factor: str, setting: str, variant: str, seed: int, train: Train) -> dict[str, Any]:
    summary = train.meta()["summary"]
    return {
        **validation_ranking(train),
        "factor": factor,
        "setting": setting,
        "variant": variant,
        "seed": seed,
        "val_rsum": float(summary["best_val_rsum"]),
        "best_epoch": int(summary["best_epoch"]),
        "epochs": int(summary["epochs"]),
        "max_epochs": int(summary["max_epochs"]),
        "train_dir": str(train.output_dir()),
    }


def _mean(runs: list[dict[str, Any]], *keys: str) -> float:
    """Mean over seeds of the mean of ``keys`` (e.g. both retrieval directions)."""
    return statistics.fmean(statistics.fmean(run[key] for key in keys) for run in runs)


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per factor setting and variant, means over seeds: validation rsum (top of the ranking), 5-way R@1 and
    median rank (its bulk, both directions averaged); and angular minus triplet for each."""
    rows = []
    measured = {(record["factor"], record["setting"]) for record in records}
    for factor, setting, variants, _ in FACTORS:
        if (factor, setting) not in measured:
            continue
        row: dict[str, Any] = {"factor": factor, "setting": setting}
        for variant in variants:
            runs = [
                r for r in records if (r["factor"], r["setting"], r["variant"]) == (factor, setting, variant)
            ]
            row[variant] = {
                "mean_val_rsum": _mean(runs, "val_rsum"),
                "per_seed": [r["val_rsum"] for r in runs],
                "mean_val_5way": _mean(runs, "val_5way_i2t", "val_5way_t2i"),
                "mean_val_medr": _mean(runs, "val_medr_i2t", "val_medr_t2i"),
                "best_epoch_of_cap": [f"{r['best_epoch']}/{r['max_epochs']}" for r in runs],
            }
        if all(variant in row for variant in BASELINES):
            ang, trip = row["ang_np_sym"], row["trip_np_sym"]
            row["ang_minus_trip"] = {
                key: ang[key] - trip[key] for key in ("mean_val_rsum", "mean_val_5way", "mean_val_medr")
            }
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], seeds: list[int]) -> str:
    lines = [
        f"Validation split, each run at its selected checkpoint, means over seeds {seeds}: rsum (R@1+R@5+R@10 "
        "in %, full ranking, both directions; per seed in brackets), 5-way R@1 and median rank of the positive "
        "(both directions averaged); best epoch / cap per seed.",
        "",
        "| factor | setting | Ang+NP+Sym rsum | 5-way R@1 | medR | best epoch | Trip+NP+Sym rsum | 5-way R@1 | "
        "medR | best epoch | Ang − Trip (rsum, 5-way, medR) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(entry: dict[str, Any] | None) -> str:
        if entry is None:
            return "— | — | — | —"
        seeds_text = ", ".join(f"{value:.1f}" for value in entry["per_seed"])
        return (
            f"{entry['mean_val_rsum']:.1f} ({seeds_text}) | {entry['mean_val_5way']:.3f} | "
            f"{entry['mean_val_medr']:.0f} | {', '.join(entry['best_epoch_of_cap'])}"
        )

    for row in rows:
        gap = row.get("ang_minus_trip")
        gap_text = (
            f"{gap['mean_val_rsum']:+.1f}, {gap['mean_val_5way']:+.3f}, {gap['mean_val_medr']:+.0f}"
            if gap
            else "—"
        )
        lines.append(
            f"| {row['factor']} | {row['setting']} | {cells(row.get('ang_np_sym'))} | "
            f"{cells(row.get('trip_np_sym'))} | {gap_text} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default="runs", help="run root (share the FullRun's to reuse its outputs)")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--markdown", type=Path, help="write the summary table here")
    parser.add_argument(
        "--quick", action="store_true", help=f"the smoke profile, seed 0, factors {' and '.join(QUICK_FACTORS)} (a smoke test)"
    )
    args = parser.parse_args(argv)
    factors = None
    if args.quick:
        args.profile, args.seeds, factors = "smoke", [0], QUICK_FACTORS

    planned = planned_trains(args.root, args.profile, args.seeds, factors)
    if not luigi.build([train for *_, train in planned], local_scheduler=True, workers=args.workers):
        print("some Train failed: see the log above", file=sys.stderr)
        return 1
    records = [run_record(*entry) for entry in planned]
    rows = summarise(records)
    table = markdown(rows, args.seeds)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"seeds": args.seeds, "profile": args.profile, "runs": records, "summary": rows}, indent=2
            )
        )
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
