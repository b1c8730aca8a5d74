"""Does ``crossmodal audit`` find pairs that do not belong together? (issue 33)

Take a clean ``pairs`` table the bundle never trained on, swap the images of a known share of its pairs
(1%, 5%, 10%: a random derangement among the chosen pairs, so every swapped pair shows another pair's real
photo), audit the corrupted table, and score the ranking against the known swaps: AUROC and precision at the
injected share (of the top ``share × n`` pairs, how many were swapped). In the same run, on the same
embeddings: the raw cross-modal cosine distance alone (the usual CLIP-score filter), each neighborhood
component alone, and a random ranking. Every share is corrupted with several seeds; means and ranges.

    python benchmarks/bench_audit.py     # after the README's FullRun: its runs/, Ours (tuned), the test split

With no ``--bundle``, the run root's (``--run-root``, default ``runs``) Train of ``--variant`` under
``--protocol`` is exported, and the pairs of its Split's ``--split`` that the data's ground truth calls
original are audited: the model never trained on them. Any bundle and clean table instead:

    python benchmarks/bench_audit.py --bundle BUNDLE --table clean/pairs.csv --json out.json --markdown out.md
    python benchmarks/bench_audit.py --quick --run-root R    # shares 5% and 10%, 3 seeds: a smoke test

``--quick`` (3 corruption seeds, two shares) proves the command on any run root in seconds, not its figures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from result_files import write_results
from scipy.stats import rankdata
from scipy.stats import t as t_distribution

from data_recipes.manifest import integer_group_ids
from serving.audit import COMPONENTS, AuditSettings, audit_components, audit_score, embed_for_audit
from serving.bundle import load_bundle
from serving.table_evaluation import read_table

AUDIT = "audit (LEMoN-style)"
COSINE = "cross-modal cosine only"


def paired_difference(differences: list[float]) -> dict[str, float]:
    """Mean of per-seed differences with a 95% t interval over the corruption seeds (each seed corrupts
    other pairs; the bundle and the clean table are fixed, so this is the spread over corruptions)."""
    values = np.asarray(differences, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return {"mean": mean, "low": float("nan"), "high": float("nan"), "n": len(values)}
    half = float(t_distribution.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(values)}


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` ranking the ``positive`` rows first (Mann–Whitney, ties
    counted half)."""
    ranks = rankdata(scores)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def precision_at(scores: np.ndarray, positive: np.ndarray, count: int) -> float:
    """Share of the ``count`` highest-scored rows that are positive (ties: the lower row first)."""
    top = np.argsort(-scores, kind="stable")[:count]
    return float(positive[top].mean())


def corruption(n: int, share: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Which image each of ``n`` rows shows after the images of ``share`` of the rows (at least 2) are
    deranged among them (a cyclic shift of a random choice: every chosen row gets another chosen row's image),
    and the swapped-row mask."""
    count = max(2, int(round(share * n)))
    chosen = rng.choice(n, size=count, replace=False)
    shown = np.arange(n)
    shown[chosen] = shown[np.roll(chosen, 1)]
    return shown, shown != np.arange(n)


def run_share(
    image: np.ndarray,
    text: np.ndarray,
    doc_vectors: np.ndarray,
    group_ids: np.ndarray,
    share: float,
    seed: int,
    settings: AuditSettings,
) -> dict:
    """One corrupted copy of the table, ranked every way. A swapped pair's image embedding is its new image's
    (the image tower sees pixels only, so embedding the corrupted table again would give the same rows)."""
    shown, swapped = corruption(len(image), share, np.random.default_rng([seed, int(share * 10_000)]))
    components = audit_components(image[shown], text, doc_vectors, group_ids, settings.k)
    rankings = {
        AUDIT: audit_score(components, settings.weights),
        COSINE: components["cross_modal"],
        **{f"{name} only": components[name] for name in COMPONENTS[1:]},
        "random": np.random.default_rng([seed, 7]).random(len(image)),
    }
    count = int(swapped.sum())
    return {
        name: {"auroc": auroc(scores, swapped), "precision_at_share": precision_at(scores, swapped, count)}
        for name, scores in rankings.items()
    } | {"_swapped": count}


def table_from_split(manifest_path: Path, split: str, ground_truth: Path | None, out: Path) -> Path:
    """A ``pairs`` table of one split of a run's ``Split`` manifest (absolute image paths), less the pairs
    the ground truth marks as not original (the embedded data's site notices and republished copies)."""
    manifest = pd.read_parquet(manifest_path)
    rows = manifest[manifest["split"] == split]
    if ground_truth is not None:
        kinds = pd.read_parquet(ground_truth).set_index("pair_id")["kind"]
        rows = rows[rows["pair_id"].map(kinds).eq("original").to_numpy()]
    path = out / f"{split}_pairs.csv"
    rows[["pair_id", "image_path", "text"]].to_csv(path, index=False)
    return path


def from_run_root(run_root: Path, variant: str, protocol: str, work: Path) -> tuple[Path, Path, Path | None]:
    """The bundle of ``variant``'s Train in ``run_root`` (exported under ``work``), its Split manifest and the
    data's ground truth."""
    from serving.bundle import export_bundle
    from serving.runs import bundle_parts, find_train_dir, split_of_train_dir

    if not run_root.is_dir():
        raise SystemExit(
            f"no run root {run_root}: run the README's FullRun first, or give --bundle and --table"
        )
    train_dir = find_train_dir(run_root, variant, None, protocol)
    export_bundle(bundle_parts(train_dir), work / "bundle")
    split, truth = split_of_train_dir(train_dir)
    return work / "bundle", split, truth


def main(argv: list[str] | None = None) -> dict:
    """Prints the tables; returns the JSON payload."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-root", default="runs", help="without --bundle: the run to take both from")
    parser.add_argument("--variant", default="ours")
    parser.add_argument("--protocol", default="tuned", choices=("tuned", "shared"))
    parser.add_argument("--bundle", help="a bundle (crossmodal export); with --table or --split-manifest")
    parser.add_argument("--table", help="a clean pairs table the bundle did not train on")
    parser.add_argument(
        "--split-manifest", help="or: a run's Split manifest.parquet (its --split is audited)"
    )
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--ground-truth", help="the embedded data's ground_truth.parquet: keep original pairs only"
    )
    parser.add_argument("--shares", default="0.01,0.05,0.1")
    parser.add_argument("--seeds", default=",".join(map(str, range(20))), help="corruption seeds per share")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--name", default=None, help="the table's name in the results")
    parser.add_argument("--json", default=None)
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--quick", action="store_true", help="shares 0.05,0.1 and seeds 0,1,2 (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.shares, args.seeds = "0.05,0.1", "0,1,2"
    if args.bundle and (args.table is None) == (args.split_manifest is None):
        parser.error("with --bundle, give --table or --split-manifest (one of them)")

    settings = AuditSettings(k=args.k)
    shares = [float(s) for s in args.shares.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as work:
        if args.bundle is None:
            bundle_path, split_manifest, truth = from_run_root(
                Path(args.run_root), args.variant, args.protocol, Path(work)
            )
            args.split_manifest = str(split_manifest)
            args.ground_truth = args.ground_truth or (truth and str(truth))
            args.name = args.name or f"{Path(args.run_root).resolve().name}, {args.split} split"
        else:
            bundle_path = Path(args.bundle)
        bundle = load_bundle(bundle_path)
        if args.split_manifest:
            ground_truth = Path(args.ground_truth) if args.ground_truth else None
            table_path = table_from_split(Path(args.split_manifest), args.split, ground_truth, Path(work))
        else:
            table_path = Path(args.table).resolve()
        cache = Path(work) / "cache"
        cache.mkdir()
        validated = read_table(table_path, {int(bundle.image["cache_size"])}, cache)
        if len(validated.rejects):
            raise SystemExit(
                f"{len(validated.rejects)} rows of the clean table were rejected: give one that validates whole"
            )
        started = time.perf_counter()
        image, text, doc_vectors = embed_for_audit(bundle, validated, torch.device("cpu"))
        embed_seconds = time.perf_counter() - started
        group_ids = integer_group_ids(validated.pairs).to_numpy()
        n_pairs = len(validated.pairs)
    for share in shares:
        runs = [run_share(image, text, doc_vectors, group_ids, share, seed, settings) for seed in seeds]
        methods = [name for name in runs[0] if not name.startswith("_")]
        results[str(share)] = {
            "swapped": [run["_swapped"] for run in runs],
            "audit_minus_cosine": {
                metric: paired_difference([run[AUDIT][metric] - run[COSINE][metric] for run in runs])
                for metric in ("auroc", "precision_at_share")
            },
            **{
                name: {
                    metric: {
                        "mean": float(np.mean([run[name][metric] for run in runs])),
                        "min": float(np.min([run[name][metric] for run in runs])),
                        "max": float(np.max([run[name][metric] for run in runs])),
                    }
                    for metric in ("auroc", "precision_at_share")
                }
                for name in methods
            },
        }
        print(
            f"share {share}: "
            + ", ".join(f"{name} AUROC {results[str(share)][name]['auroc']['mean']:.3f}" for name in methods),
            flush=True,
        )
    name = args.name or table_path.parent.name
    seed_text = f"{seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)
    lines = [
        f"## {name}: {n_pairs} pairs, bundle {bundle.bundle_id} ({bundle.manifest['variant']['label']}), k = {args.k}, corruption seeds {seed_text}",
        "",
        "| injected share | ranking | AUROC (mean [min, max]) | precision at the share |",
        "|---|---|---|---|",
    ]
    for share, entry in results.items():
        for method, metrics in entry.items():
            if method in ("swapped", "audit_minus_cosine"):
                continue
            a, p = metrics["auroc"], metrics["precision_at_share"]
            lines.append(
                f"| {float(share):.0%} ({entry['swapped'][0]} pairs) | {method} | {a['mean']:.3f} [{a['min']:.3f}, {a['max']:.3f}] | "
                f"{p['mean']:.3f} [{p['min']:.3f}, {p['max']:.3f}] |"
            )
    lines += [
        "",
        "| injected share | audit − cosine: AUROC (mean, 95% interval over seeds) | precision at the share |",
        "|---|---|---|",
    ]
    for share, entry in results.items():
        a, p = entry["audit_minus_cosine"]["auroc"], entry["audit_minus_cosine"]["precision_at_share"]
        lines.append(
            f"| {float(share):.0%} | {a['mean']:+.4f} [{a['low']:+.4f}, {a['high']:+.4f}] | "
            f"{p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}] |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    payload = {
        "table": str(table_path),
        "name": name,
        "n_pairs": n_pairs,
        "embed_seconds": embed_seconds,
        "bundle": args.bundle or f"{args.run_root}: {args.variant} ({args.protocol})",
        "bundle_id": bundle.bundle_id,
        "k": args.k,
        "seeds": seeds,
        "shares": results,
    }
    write_results(payload, markdown, args.json, args.markdown)
    return payload


if __name__ == "__main__":
    main()
