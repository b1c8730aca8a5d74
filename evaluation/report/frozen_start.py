"""Does the image tower learn? Each tuned method's learning-tower runs against the frozen-trunk runs they started
from (a warm start: the same method, settings and seed, before its trunk trained), paired by test item and seed.

Why before any reading of the paper's regime: a comparison of methods whose towers learn says something about
that regime only if the towers do learn; a learning tower resolved below its own frozen start does not (issue 50),
and the report then says so instead of reading the comparison as the paper's regime.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from evaluation.document import Document
from evaluation.report.headline import headline_comparison, verdict
from evaluation.report.inputs import ReportInputs, VariantRun

#: the name the frozen start of variant ``v`` takes in a comparison (``v`` + this)
FROZEN_START = "@frozen-start"
#: the rows read: 5-way R@1 both ways (the retrieval the paper reports first)
RETRIEVAL_ROWS = ("i2t", "t2i")
BELOW, ABOVE, NOT_RESOLVED = "resolved below its frozen start", "resolved above its frozen start", "not resolved"


def _as_start(run: VariantRun) -> VariantRun:
    return replace(run, variant=run.variant + FROZEN_START, label=f"{run.label} (frozen start)")


def compare_with_frozen_start(inputs: ReportInputs) -> list[dict[str, Any]]:
    """Per tuned variant with frozen-start runs: the learning tower − its frozen start on each retrieval row, with
    the paired interval and MDE, and how many of its runs kept the frozen start as their best checkpoint."""
    results = []
    for variant in dict.fromkeys(run.variant for run in inputs.frozen_start_runs):
        learning = [run for run in inputs.tuned_runs if run.variant == variant]
        starts = [_as_start(run) for run in inputs.frozen_start_runs if run.variant == variant]
        if not learning:
            continue
        comparison = headline_comparison(learning + starts, variant, variant + FROZEN_START, inputs.bootstrap_resamples)
        rows = [row for row in comparison["rows"] if row["key"] in RETRIEVAL_ROWS]
        kept = [bool(run.training.get("warm_start", {}).get("kept_parent")) for run in learning]
        results.append(
            {
                "variant": variant,
                "label": learning[0].label,
                "seeds": sorted(run.seed for run in learning),
                "kept_start": sum(kept),
                "rows": [
                    {
                        "key": row["key"],
                        "metric": row["metric"],
                        "learning": row["method_mean"],
                        "frozen_start": row["baseline_mean"],
                        "difference": row["difference"],
                        "ci_low": row["ci_low"],
                        "ci_high": row["ci_high"],
                        "mde": row["mde"],
                        "reading": BELOW if row["ci_high"] < 0 else ABOVE if row["ci_low"] > 0 else NOT_RESOLVED,
                        "verdict": verdict(row, learning[0].label, starts[0].label if starts else "frozen start"),
                    }
                    for row in rows
                ],
            }
        )
    return results


def tower_learns(entries: list[dict[str, Any]]) -> bool | None:
    """False when some method's learning tower is resolved below its frozen start on a retrieval row (the tower
    does not learn better than frozen features), True otherwise; None without frozen-start runs."""
    if not entries:
        return None
    return not any(row["reading"] == BELOW for entry in entries for row in entry["rows"])


def frozen_start_section(doc: Document, entries: list[dict[str, Any]]) -> None:
    """The section (nothing when no run started from a frozen-trunk run)."""
    if not entries:
        return
    doc.heading("Does the image tower learn? Each method against its own frozen start")
    learns = tower_learns(entries)
    doc.paragraph(
        "Each method's learning-tower runs started from its frozen-trunk runs at the same settings and seeds (a warm "
        "start; the frozen model competed as epoch 0 on validation). Below: the learning tower − its frozen start "
        "on test, paired by test item and seed (95% bootstrap intervals, MDE at 80% power). "
        + (
            "No method's learning tower is resolved below its frozen start, so the comparisons of this report are "
            "read as comparisons of learning towers."
            if learns
            else "**A learning tower is resolved below its frozen start: at this data size this tower does not learn "
            "better than frozen features, and the method comparisons of this report are not the paper's regime.**"
        )
    )
    table = []
    for entry in entries:
        for row in entry["rows"]:
            table.append(
                [
                    entry["label"],
                    row["metric"],
                    f"{row['learning']:.4f}",
                    f"{row['frozen_start']:.4f}",
                    f"{row['difference']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
                    f"{row['mde']:.4f}",
                    row["reading"],
                    f"{entry['kept_start']}/{len(entry['seeds'])}",
                ]
            )
    doc.table(
        ["Method", "Metric", "learning tower", "frozen start", "Δ [95% CI]", "MDE", "reading", "runs that kept the start"],
        table,
        caption="'runs that kept the start': report seeds whose best validation checkpoint was the frozen start "
        "itself (epoch 0), i.e. whose trunk training did not improve on validation.",
    )
