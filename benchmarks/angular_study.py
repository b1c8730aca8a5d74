"""Why does Ang+NP+Sym trail Trip+NP+Sym on the demo when the paper's Table 1 has the opposite order?

One factor at a time from the demo profile's settings, Ang+NP+Sym and Trip+NP+Sym are trained as the
pipeline trains them (``Train`` tasks, so every run reuses the run root's features, tables and any Train
already there — the FullRun's and the tuning trials') and scored by their **validation** rsum (full
ranking, at each run's selected checkpoint). The test split is never read.

Factors: the angular loss's form (smooth vs the hinge of Eq. 2) and angle α; for both losses the learning
rate, the batch size and the epoch cap.

    python benchmarks/angular_study.py --root runs --json benchmarks/results/angular_study.json \
        --markdown benchmarks/results/angular_study.md

Each run is one Train (about 1-3 minutes on 2 CPU cores); the default two seeds and every factor are 26
Trains, of which the FullRun of the demo already holds 7.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import luigi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    ("angle α", "36°", ("ang_np_sym",), {"angular": {"alpha_degrees": 36.0}}),
    ("angle α", "55°", ("ang_np_sym",), {"angular": {"alpha_degrees": 55.0}}),
]


def planned_trains(root: str, profile: str, seeds: list[int]) -> list[tuple[str, str, str, int, Train]]:
    return [
        (
            factor,
            setting,
            variant,
            seed,
            Train(run_root=root, profile=profile, variant=variant, seed=seed, variant_overrides=overrides),
        )
        for factor, setting, variants, overrides in FACTORS
        for variant in variants
        for seed in seeds
    ]


def run_record(factor: str, setting: str, variant: str, seed: int, train: Train) -> dict[str, Any]:
    summary = train.meta()["summary"]
    return {
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


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean validation rsum over seeds per factor setting and variant, and angular minus triplet."""
    rows = []
    for factor, setting, variants, _ in FACTORS:
        row: dict[str, Any] = {"factor": factor, "setting": setting}
        for variant in variants:
            runs = [
                r for r in records if (r["factor"], r["setting"], r["variant"]) == (factor, setting, variant)
            ]
            row[variant] = {
                "mean_val_rsum": statistics.fmean(r["val_rsum"] for r in runs),
                "per_seed": [r["val_rsum"] for r in runs],
                "best_epoch_of_cap": [f"{r['best_epoch']}/{r['max_epochs']}" for r in runs],
            }
        if all(variant in row for variant in BASELINES):
            row["ang_minus_trip"] = row["ang_np_sym"]["mean_val_rsum"] - row["trip_np_sym"]["mean_val_rsum"]
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], seeds: list[int]) -> str:
    lines = [
        f"Validation rsum (full ranking, both directions, R@1+R@5+R@10 in %) at each run's selected checkpoint; "
        f"seeds {seeds}; best epoch / cap per seed.",
        "",
        "| factor | setting | Ang+NP+Sym (per seed) | best epoch | Trip+NP+Sym (per seed) | best epoch | Ang − Trip |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(entry: dict[str, Any] | None) -> tuple[str, str]:
        if entry is None:
            return "—", "—"
        seeds_text = ", ".join(f"{value:.1f}" for value in entry["per_seed"])
        return f"{entry['mean_val_rsum']:.1f} ({seeds_text})", ", ".join(entry["best_epoch_of_cap"])

    for row in rows:
        ang, ang_epochs = cell(row.get("ang_np_sym"))
        trip, trip_epochs = cell(row.get("trip_np_sym"))
        gap = f"{row['ang_minus_trip']:+.1f}" if "ang_minus_trip" in row else "—"
        lines.append(
            f"| {row['factor']} | {row['setting']} | {ang} | {ang_epochs} | {trip} | {trip_epochs} | {gap} |"
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
    args = parser.parse_args(argv)

    planned = planned_trains(args.root, args.profile, args.seeds)
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
