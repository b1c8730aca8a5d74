"""The global calibration section (Veit & Wilber §4.3, §4.5): PR-AUC per method, the PR curves and the
per-query score distributions, drawn for the lowest seed of each method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.document import Document
from evaluation.plots import plot_pr_curves, plot_score_distributions
from evaluation.report.formatting import fmt
from evaluation.report.inputs import FIGURES_DIR, ReportInputs, VariantRun

PR_CURVE_PNG = "pr_curve.png"
SCORE_DISTRIBUTION_PNG = "score_distribution.png"


def _first_seed_runs(runs: list[VariantRun], needed: tuple[str, ...]) -> dict[str, VariantRun]:
    """Per variant, its run with the lowest seed among runs that carry every array in ``needed``."""
    chosen: dict[str, VariantRun] = {}
    for run in sorted(runs, key=lambda r: r.seed):
        if run.variant not in chosen and all(key in run.curves for key in needed):
            chosen[run.variant] = run
    return chosen


def calibration_section(
    doc: Document, inputs: ReportInputs, summary: dict[str, Any], figure_dir: Path | None
) -> dict:
    """PR-AUC table, PR curve and score-distribution figures; returns what the figures plot, for the JSON."""
    with_pr = [s for s in summary.values() if "pr_auc" in s]
    if not with_pr:
        return {}
    doc.heading("Global calibration — PR curve, PR-AUC and score distributions")
    doc.table(
        ["Method", "PR-AUC"],
        [[s["label"], fmt(s["pr_auc"])] for s in with_pr],
        caption=(
            f"Average precision over all {with_pr[0]['pr_pairs']}² test image-text scores ranked together "
            "(Veit & Wilber §4.3): positives are the paired (same-group) scores; no interpolation."
        ),
    )
    figures: dict[str, Any] = {}
    pr_runs = _first_seed_runs(inputs.runs, ("pr_recall", "pr_precision"))
    if pr_runs:
        curves = {
            run.label: {
                "recall": run.curves["pr_recall"],
                "precision": run.curves["pr_precision"],
                "pr_auc": run.metrics["pr"]["pr_auc"],
                "seed": run.seed,
            }
            for run in pr_runs.values()
        }
        figures["pr_curve"] = {"curves": curves}
        if figure_dir is not None:
            plot_pr_curves(curves, figure_dir / PR_CURVE_PNG)
            figures["pr_curve"]["file"] = f"{FIGURES_DIR}/{PR_CURVE_PNG}"
            doc.image(
                f"{FIGURES_DIR}/{PR_CURVE_PNG}",
                "Global precision-recall curves (lowest seed of each method); legend: PR-AUC.",
            )
    score_runs = _first_seed_runs(inputs.runs, ("score_bin_centres", "score_counts", "score_p5", "score_p95"))
    if score_runs:
        distributions = {
            run.label: {key: run.curves[f"score_{key}"] for key in ("bin_centres", "counts", "p5", "p95")}
            for run in score_runs.values()
        }
        figures["score_distribution"] = {
            "per_method": {
                label: {
                    "bin_centres": d["bin_centres"],
                    "p5": d["p5"],
                    "p95": d["p95"],
                    "n_queries": int(len(d["counts"])),
                }
                for label, d in distributions.items()
            },
        }
        if figure_dir is not None:
            plot_score_distributions(distributions, figure_dir / SCORE_DISTRIBUTION_PNG)
            figures["score_distribution"]["file"] = f"{FIGURES_DIR}/{SCORE_DISTRIBUTION_PNG}"
            doc.image(
                f"{FIGURES_DIR}/{SCORE_DISTRIBUTION_PNG}",
                "Score distributions (Veit & Wilber Fig. 4 right): per sampled text query (blue), the number of "
                "test images at each cosine similarity; orange: 5th and 95th percentile over queries.",
            )
    return figures
