"""Compare two configurations of one run root with the headline's statistics: paired bootstrap over test
items and seeds, 95% interval and minimum detectable difference, for 5-way R@1 and neighbor preservation.

A configuration is a variant name plus, optionally, the JSON of its ``variant_overrides`` (as FullRun was
given them), e.g. Ours with in-batch neighbors against Ours with neighbors as extra rows:

    python benchmarks/compare_evaluations.py --run-root runs \\
        --a ours '{"train": {"neighbor_mode": "extra_rows"}}' --b ours '{}'
    python benchmarks/compare_evaluations.py --quick --run-root R --a ours '{}' --b ang_np_sym '{}'

``--quick``: 200 bootstrap resamples instead of 2,000 (seconds; intervals then only roughly placed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from compare_run_roots import point_of  # this folder (a script: its folder is on sys.path)

from common.bounded_json import COMMAND_LINE, loads_bounded
from common.run_folder import finished_outputs, meta_field
from evaluation.evaluate import HEADLINE_PRESERVATION
from evaluation.statistics import paired_bootstrap_items_and_seeds


def outcomes(run_root: Path, variant: str, overrides: dict) -> dict[str, dict[int, np.ndarray]]:
    """Per outcome (i2t, t2i, NP image, NP text), the per-item arrays of each seed's Evaluate output."""
    found: dict[str, dict[int, np.ndarray]] = {}
    for folder in finished_outputs(run_root, "Evaluate"):
        params = meta_field(folder, "params")
        # _meta.json keeps parameters as Python reprs
        if params["variant"] != variant or point_of(params) != overrides:
            continue
        seed = int(params["seed"])
        for direction in ("i2t", "t2i"):
            found.setdefault(direction, {})[seed] = np.load(folder / f"{direction}_hits.npy").mean(axis=0)
        for modality, name in HEADLINE_PRESERVATION.items():
            found.setdefault(f"NP {modality}", {})[seed] = np.load(folder / f"{name}.npy")
    if not found:
        raise SystemExit(f"no Evaluate output of {variant} with overrides {overrides} under {run_root}")
    return found


def main(argv: list[str] | None = None) -> dict[str, dict]:
    """Prints one line per outcome; returns the bootstrap results by outcome."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-root", type=Path, default=Path("runs"))
    parser.add_argument("--a", nargs=2, metavar=("VARIANT", "OVERRIDES"), required=True)
    parser.add_argument("--b", nargs=2, metavar=("VARIANT", "OVERRIDES"), required=True)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 resamples (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.resamples = 200
    a = outcomes(args.run_root, args.a[0], loads_bounded(args.a[1], "--a", COMMAND_LINE))
    b = outcomes(args.run_root, args.b[0], loads_bounded(args.b[1], "--b", COMMAND_LINE))
    print(
        f"A = {args.a[0]} {args.a[1]} seeds {sorted(a['i2t'])}; B = {args.b[0]} {args.b[1]} seeds {sorted(b['i2t'])}"
    )
    results = {}
    for name in a:
        results[name] = r = paired_bootstrap_items_and_seeds(a[name], b[name], args.resamples, seed=0)
        print(
            f"{name:9s} A {r['method_mean']:.4f}  B {r['baseline_mean']:.4f}  A−B {r['difference']:+.4f} "
            f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]  MDE {r['mde']:.4f}  p {r['p_value']:.4f}"
        )
    return results


if __name__ == "__main__":
    main()
