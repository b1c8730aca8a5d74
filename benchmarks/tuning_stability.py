"""Does the tuned protocol choose by signal? Its choices against the same tuning run another way (issue 30).

* ``--trial-seeds 2,3``: the tuning repeated with other trial seeds (everything else the profile's): how many
  tuned variants choose the same setting, and, where they differ, whether the report called the choice a tie.
* ``--full-trials``: every trial trained to the end (no successive halving), to see how often halving's
  choice is the one full training of every trial gives.

Both run the pipeline's own ``Tune`` tasks on a run root where the profile's FullRun has run (the Trains they
share are reused: an output's identity is its settings, not the profile's name), under a copy of the profile
registered for this process only. Only the validation split is read.

    python benchmarks/tuning_stability.py --root runs --trial-seeds 2,3 --json benchmarks/results/tuning_seeds.json
    python benchmarks/tuning_stability.py --root runs --full-trials --json benchmarks/results/tuning_halving.json
    python benchmarks/tuning_stability.py --quick --root R --trial-seeds 2   # a smoke test on a smoke run's root

``--quick``: the smoke profile's tuning of Ang+NP+Sym alone, one worker (on a smoke run's root the first tuning
is its FullRun's, reused): the comparison's path, not its figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import luigi

from evaluation.labels import point_label
from pipeline.config.profiles import PROFILES
from pipeline.tasks.tuning import Tune

TUNED = ("ang_np_sym", "ours", "trip_np_sym", "ours_trip")


def tune(root: str, profile: str, variant: str, dataset: dict[str, Any], changes: tuple[str, ...] = ()) -> Tune:
    return Tune(profile=profile, variant=variant, run_root=root, set=changes, **dataset)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="runs")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--dataset", default="embedded")
    parser.add_argument("--raw-dir", default="")
    parser.add_argument("--variants", default=",".join(TUNED))
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--trial-seeds", help="comma-separated trial seeds of the repeat")
    how.add_argument("--full-trials", action="store_true", help="no successive halving in the repeat")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true", help="the smoke profile, ang_np_sym only, one worker (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.profile, args.variants, args.workers = "smoke", "ang_np_sym", 1

    base = PROFILES[args.profile]
    tuning = base.settings().tuning
    if args.trial_seeds:
        seeds = [int(s) for s in args.trial_seeds.split(",")]
        change = f"tuning.trial_seeds={seeds}"
        what = f"trial seeds {seeds} instead of {list(tuning.trial_seeds)}"
    else:
        change = "tuning.rung_epochs=[]"
        what = "every trial trained to the end instead of successive halving"
    dataset = {"dataset": args.dataset, "raw_dir": args.raw_dir}
    variants = args.variants.split(",")
    first = [tune(args.root, base.name, v, dataset) for v in variants]
    repeat = [tune(args.root, base.name, v, dataset, (change,)) for v in variants]
    ok = luigi.build(first + repeat, local_scheduler=True, workers=args.workers, log_level="WARNING")
    if not ok:
        raise SystemExit("a Tune failed; see the log above")
    rows = []
    for a, b in zip(first, repeat, strict=True):
        sa, sb = a.load("selection"), b.load("selection")
        rows.append(
            {
                "variant": a.variant,
                "profile_choice": sa["chosen_point"],
                "profile_tie": sa["tie"],
                "repeat_choice": sb["chosen_point"],
                "repeat_tie": sb["tie"],
                "same": sa["chosen_point"] == sb["chosen_point"],
                "profile_comparison": sa["comparison"],
                "repeat_comparison": sb["comparison"],
                "repeat_trials": sb["trials"],
            }
        )
    same = sum(row["same"] for row in rows)
    print(f"{what}: the same choice for {same} of {len(rows)} tuned variants")
    for row in rows:
        print(
            f"  {row['variant']:12s} {point_label(row['profile_choice'])}{' (tie)' if row['profile_tie'] else ''}"
            f"  |  {point_label(row['repeat_choice'])}{' (tie)' if row['repeat_tie'] else ''}"
            f"  {'same' if row['same'] else 'differs'}"
        )
    result = {"repeat": what, "same": same, "variants": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
