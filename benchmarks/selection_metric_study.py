"""Which validation metric can tell the settings a tuner chooses between apart? (issue 30, item 1)

For a grid of settings x seeds, each run is trained with the pipeline's own Trainer (through
``pipeline.tasks.train_inputs.training_run``: the same model, data, neighbors and schedule as a ``Train``) for a fixed number of
epochs without early stopping, and every epoch's validation ranks are kept (per validation pair: how many
items of other groups score at least as high as its positive, both directions). Then, for each candidate
metric of ``evaluation.selection_metrics`` (expected n-way R@1, AUC, MRR, median rank, rsum):

* each run is read as if selected by that metric: early stopping with the profile's patience simulated on the
  metric's own curve, the run's score is the metric at its best epoch;
* **seed spread**: the standard deviation over seeds at fixed settings (pooled over settings);
* **item spread**: the bootstrap standard error over validation pairs of one run's score (mean over runs);
* **between-setting spread**: the standard deviation of the settings' seed means;
* **separation** = between-setting spread / seed spread, and the share of setting pairs whose seed means
  differ by more than twice the standard error of the difference;
* **choice agreement**: how often two tunings with different single seeds (or with two seeds each) choose
  the same setting (low where the best settings are tied for the metric: then any of them is as good);
* **regret**: what choosing by the metric on one (or two) seeds costs in the headline's quantity, the
  expected n-way R@1 on the *other* seeds (each run at the checkpoint the metric selects), against the best
  setting there — the price of a noisy or misdirected choice, in the units the report compares.

Only the validation split is read. The run root must hold the dataset's upstream outputs (run FullRun once,
e.g. with ``--protocol shared --variants '["ang_np_sym"]' --seeds '[0]'``).

    python benchmarks/selection_metric_study.py --root runs --workers 2 \\
        --grid '{"ang_np_sym": {"train.learning_rate": [3e-4, 1e-3, 3e-3], "angular.alpha_degrees": [36, 45]}}' \\
        --seeds 0,1,2 --json benchmarks/results/selection_metric_study.json \\
        --markdown benchmarks/results/selection_metric_study.md
    python benchmarks/selection_metric_study.py --quick --root R     # a smoke test on a smoke run's root

``--quick``: the smoke profile, Ang+NP+Sym at two learning rates x seeds 0 and 1, two epochs, in this process
(``QUICK_GRID``; its epoch ranks under ``<root>/_selection_study_quick``): the study's path in a minute, not its
figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from result_files import write_results

from common.bounded_json import COMMAND_LINE, loads_bounded
from evaluation.selection_metrics import SELECTION_METRICS, QueryRanks, ValidationRanking

#: the order of the table's columns
METRICS = ("val_nway_r1", "val_auc", "val_mrr", "val_medr", "val_rsum")
#: ``--quick``: two settings (a between-setting spread needs two) of one variant
QUICK_GRID = {"ang_np_sym": {"train.learning_rate": [1e-3, 3e-3]}}


def grid_points(space: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of a ``{"<train or loss>.<name>": values}`` space, as a flat ``{path: value}``."""
    paths = sorted(space)
    return [dict(zip(paths, values, strict=True)) for values in itertools.product(*(space[p] for p in paths))]


def as_overrides(point: Mapping[str, Any], epochs: int) -> dict[str, dict[str, Any]]:
    overrides: dict[str, dict[str, Any]] = {"train": {"epochs": epochs, "early_stopping_patience": None}}
    for path, value in point.items():
        target, name = path.split(".")
        overrides.setdefault(target, {})[name] = value
    return overrides


def run_name(variant: str, point: Mapping[str, Any], seed: int) -> str:
    settings = "_".join(f"{path.split('.')[1]}={value}" for path, value in sorted(point.items()))
    return f"{variant}__{settings}__seed{seed}"


def train_one(job: dict[str, Any]) -> str:
    """Train one run and save every epoch's validation ranks (``<out>/<name>.npz``); skipped when saved."""
    import torch

    from pipeline.tasks.train_inputs import training_run
    from pipeline.tasks.training import Train

    out = Path(job["out"]) / f"{job['name']}.npz"
    if out.exists():
        return f"{job['name']}: kept"
    torch.set_num_threads(1)
    task = Train(
        profile=job["profile"],
        run_root=job["root"],
        variant=job["variant"],
        seed=job["seed"],
        point=job["overrides"],
        **job["dataset"],
    )
    epochs: list[dict[str, QueryRanks]] = []
    with tempfile.TemporaryDirectory() as work:
        run, scorer = training_run(task, Path(work))
        assert scorer is not None, "the study needs a retrieval selection metric in the profile"
        trainer = run.trainer

        def capture(image: np.ndarray, text: np.ndarray) -> dict[str, float]:
            epochs.append(scorer.ranks(image, text))
            return scorer(image, text)

        trainer.validation_score = capture
        history = trainer.fit().history
    arrays = {}
    for epoch, ranks in enumerate(epochs, start=1):
        for direction, r in ranks.items():
            arrays[f"e{epoch}_{direction}_above"] = r.above.astype(np.int32)
            arrays[f"e{epoch}_{direction}_eligible"] = r.eligible.astype(np.int32)
    arrays["val_loss"] = np.array([row["val_loss"] for row in history])
    arrays["layout_rsum"] = np.array([row["val_rsum"] for row in history])
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(out)
    return f"{job['name']}: trained"


def epoch_ranks(saved: Mapping[str, np.ndarray], epoch: int) -> dict[str, QueryRanks]:
    return {d: QueryRanks(saved[f"e{epoch}_{d}_above"], saved[f"e{epoch}_{d}_eligible"]) for d in ("i2t", "t2i")}


def selected_epoch(curve: np.ndarray, higher_is_better: bool, patience: int | None) -> int:
    """1-based best epoch of ``curve`` under early stopping with ``patience`` (ties keep the earlier epoch),
    as ``models.training.history.TrainResult`` decides it."""
    best, best_value = 0, None
    for index, value in enumerate(curve):
        # the trainer stops before epoch e when (e - 1) - best_epoch >= patience; 0-based: index - best > patience
        if best_value is not None and patience is not None and index - best > patience:
            break
        if best_value is None or (value > best_value if higher_is_better else value < best_value):
            best, best_value = index, value
    return best + 1


def bootstrap_se(values: np.ndarray, statistic, resamples: int, rng: np.random.Generator) -> float:  # noqa: ANN001
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    return float(np.std([statistic(values[p]) for p in picks], ddof=1))


def analyse(runs: dict[tuple[str, str, int], dict[str, np.ndarray]], n_way: int, patience: int | None) -> dict[str, Any]:
    """Per variant and metric: the spreads, separation and choice agreement (see the module docstring)."""
    metrics = SELECTION_METRICS
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {}
    variants = sorted({variant for variant, _, _ in runs})
    for variant in variants:
        settings = sorted({s for v, s, _ in runs if v == variant})
        seeds = sorted({seed for v, _, seed in runs if v == variant})
        per_metric: dict[str, Any] = {}
        for name in METRICS:
            metric = metrics[name]
            scores = np.full((len(settings), len(seeds)), np.nan)
            n_way_at = np.full((len(settings), len(seeds)), np.nan)  # the headline quantity at M's checkpoint
            item_se = []
            best_epochs = []
            for i, setting in enumerate(settings):
                for j, seed in enumerate(seeds):
                    saved = runs.get((variant, setting, seed))
                    if saved is None:
                        continue
                    n_epochs = len(saved["val_loss"])
                    curve = np.array([metric.value(ValidationRanking(epoch_ranks(saved, e), n_way)) for e in range(1, n_epochs + 1)])
                    epoch = selected_epoch(curve, metric.higher_is_better, patience)
                    best_epochs.append(epoch)
                    scores[i, j] = curve[epoch - 1]
                    ranks = epoch_ranks(saved, epoch)
                    ranking = ValidationRanking(ranks, n_way)
                    n_way_at[i, j] = metrics["val_nway_r1"].value(ranking)
                    if metric.per_query is not None:
                        values = metric.per_query(ranking)
                        item_se.append(float(np.std(values, ddof=1) / np.sqrt(len(values))))
                    else:  # the median: bootstrap the two directions' ranks together
                        stacked = np.stack([1 + ranks[d].above for d in ("i2t", "t2i")], axis=1)
                        item_se.append(
                            bootstrap_se(stacked, lambda s: float(np.mean(np.median(s, axis=0))), 500, rng)
                        )
            sign = 1.0 if metric.higher_is_better else -1.0
            seed_sd = float(np.sqrt(np.nanmean(np.nanvar(scores, axis=1, ddof=1))))
            means = np.nanmean(scores, axis=1)
            between_sd = float(np.std(means, ddof=1))
            n_seeds = len(seeds)
            se_difference = seed_sd * np.sqrt(2.0 / n_seeds)
            pairs = list(itertools.combinations(range(len(settings)), 2))
            resolved = sum(abs(means[a] - means[b]) > 2 * se_difference for a, b in pairs)
            # choice agreement: tunings that each see one seed (or two seeds, averaged), over every pair of
            # disjoint seed sets
            agreement, regret = {}, {}
            for size in (1, 2):
                if 2 * size > n_seeds:
                    continue
                subsets = list(itertools.combinations(range(n_seeds), size))
                choices = {sub: int(np.argmax(sign * scores[:, list(sub)].mean(axis=1))) for sub in subsets}
                disjoint = [(a, b) for a, b in itertools.combinations(subsets, 2) if not set(a) & set(b)]
                agreement[f"{size}_seed"] = float(np.mean([choices[a] == choices[b] for a, b in disjoint]))
                losses = []
                for sub, choice in choices.items():
                    held_out = [j for j in range(n_seeds) if j not in sub]
                    fresh = n_way_at[:, held_out].mean(axis=1)
                    losses.append(float(fresh.max() - fresh[choice]))
                regret[f"{size}_seed"] = float(np.mean(losses))
            per_metric[name] = {
                "label": metric.label_for(n_way),
                "higher_is_better": metric.higher_is_better,
                "scores": {setting: [None if np.isnan(v) else float(v) for v in row] for setting, row in zip(settings, scores, strict=True)},
                "setting_means": {setting: float(m) for setting, m in zip(settings, means, strict=True)},
                "seed_sd": seed_sd,
                "item_se": float(np.mean(item_se)),
                "between_setting_sd": between_sd,
                "separation": between_sd / seed_sd if seed_sd > 0 else float("inf"),
                "resolved_pairs": int(resolved),
                "setting_pairs": len(pairs),
                "choice_agreement": agreement,
                "regret": regret,
                "chosen_by_all_seeds": settings[int(np.argmax(sign * means))],
                "mean_best_epoch": float(np.mean(best_epochs)),
            }
        report[variant] = {"settings": settings, "seeds": seeds, "metrics": per_metric}
    return report


def markdown(report: dict[str, Any], title: str) -> str:
    lines = [f"## {title}", ""]
    for variant, entry in report.items():
        lines += [
            f"**{variant}**: {len(entry['settings'])} settings x seeds {entry['seeds']}",
            "",
            "| metric | seed sd | item se | between-setting sd | separation | resolved pairs | agreement 1 seed / 2 seeds | regret 1 seed / 2 seeds | best epoch |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for m in entry["metrics"].values():
            agreement = " / ".join(f"{v:.2f}" for v in m["choice_agreement"].values())
            regret = " / ".join(f"{v:.4f}" for v in m["regret"].values())
            lines.append(
                f"| {m['label']} | {m['seed_sd']:.4f} | {m['item_se']:.4f} | {m['between_setting_sd']:.4f} | "
                f"{m['separation']:.2f} | {m['resolved_pairs']}/{m['setting_pairs']} | {agreement} | {regret} | "
                f"{m['mean_best_epoch']:.1f} |"
            )
        lines += ["", "Seed means per setting:", ""]
        names = list(entry["metrics"])
        lines.append("| setting | " + " | ".join(entry["metrics"][n]["label"] for n in names) + " |")
        lines.append("|---" * (len(names) + 1) + "|")
        for setting in entry["settings"]:
            lines.append(
                f"| {setting} | " + " | ".join(f"{entry['metrics'][n]['setting_means'][setting]:.4f}" for n in names) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs", help="run root holding the dataset's upstream outputs")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--dataset", default="embedded")
    parser.add_argument("--raw-dir", default="")
    parser.add_argument("--grid", help='{"variant": {"<train or loss>.<name>": [values]}} (required without --quick)')
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=20, help="every run's epochs (no early stopping)")
    parser.add_argument("--patience", type=int, default=3, help="early stopping simulated on each metric")
    parser.add_argument("--n-way", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="training processes (1: in this process)")
    parser.add_argument(
        "--cache",
        default=None,
        help="folder of the per-run epoch ranks (default: <root>/_selection_study; --quick's: <root>/_selection_study_quick)",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--title", default="Validation metrics: spread between settings against noise")
    parser.add_argument("--quick", action="store_true", help="the smoke profile, QUICK_GRID, seeds 0,1, 2 epochs (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.profile, args.seeds, args.epochs, args.patience, args.workers = "smoke", "0,1", 2, 1, 1
        args.grid = args.grid or json.dumps(QUICK_GRID)
    if args.grid is None:
        parser.error("--grid is required (or --quick)")

    # a run's cache name is its variant, point and seed: --quick's (other profile, epochs) never meets a study's
    cache = Path(args.cache or Path(args.root) / ("_selection_study_quick" if args.quick else "_selection_study"))
    cache.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    grid = loads_bounded(args.grid, "--grid", COMMAND_LINE)
    dataset = {"dataset": args.dataset, "raw_dir": args.raw_dir}
    jobs, keys = [], {}
    for variant, space in grid.items():
        for point in grid_points(space):
            setting = ", ".join(f"{path}={value}" for path, value in sorted(point.items()))
            for seed in seeds:
                name = run_name(variant, point, seed)
                keys[name] = (variant, setting, seed)
                jobs.append(
                    {
                        "name": name,
                        "out": str(cache),
                        "root": args.root,
                        "profile": args.profile,
                        "variant": variant,
                        "seed": seed,
                        "overrides": as_overrides(point, args.epochs),
                        "dataset": dataset,
                    }
                )
    if args.workers <= 1:  # no worker process to start (each would import torch and the pipeline again)
        for job in jobs:
            print(train_one(job), flush=True)
    else:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            for message in pool.imap_unordered(train_one, jobs):
                print(message, flush=True)
    runs = {}
    for name, key in keys.items():
        with np.load(cache / f"{name}.npz") as saved:
            runs[key] = dict(saved)
    report = analyse(runs, args.n_way, args.patience)
    payload = {
        "profile": args.profile,
        "dataset": args.dataset,
        "raw_dir": args.raw_dir,
        "epochs": args.epochs,
        "patience": args.patience,
        "n_way": args.n_way,
        "seeds": seeds,
        "grid": grid,
        "variants": report,
    }
    text = markdown(report, args.title)
    print(text)
    write_results(payload, text, args.json, args.markdown)
    return payload


if __name__ == "__main__":
    main()
