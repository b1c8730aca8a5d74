"""The report's first words: did the models learn anything? Each method's n-way R@1 against chance (1/n), with
the bootstrap interval over test items and seeds and the smallest difference from chance the run could see.

Why first: a user's table can be that hard (news photos whose articles share no visible topic). When every
method is within its MDE of chance, a comparison between methods is a comparison of noise, and the report
says so before any table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evaluation.document import Document
from evaluation.report.formatting import and_list, direction_label
from evaluation.report.headline import HEADLINE_BOOTSTRAP_SEED, per_item
from evaluation.report.inputs import VariantRun
from evaluation.statistics import paired_bootstrap_items_and_seeds

DIRECTIONS = ("i2t", "t2i")


def against_chance(runs: list[VariantRun], n_resamples: int) -> list[dict[str, Any]]:
    """Per variant (in run order) and direction: n-way R@1 − 1/n over the variant's seeds, bootstrapped over
    test items and seeds (the chance 'runs' are constants, so the interval is the method's own)."""
    rows = []
    for variant in dict.fromkeys(run.variant for run in runs):
        mine = [run for run in runs if run.variant == variant]
        n_way = int(mine[0].metrics["retrieval"]["n_way"])
        row: dict[str, Any] = {"variant": variant, "label": mine[0].label, "n_way": n_way, "chance": 1.0 / n_way}
        for direction in DIRECTIONS:
            outcomes = {run.seed: per_item(run.hits[f"{direction}_hits"]) for run in mine}
            chance = {seed: np.full_like(values, 1.0 / n_way) for seed, values in outcomes.items()}
            result = paired_bootstrap_items_and_seeds(outcomes, chance, n_resamples, HEADLINE_BOOTSTRAP_SEED)
            row[direction] = {
                "r1": result["method_mean"],
                "above_chance": result["difference"],
                "ci_low": result["ci_low"],
                "ci_high": result["ci_high"],
                "mde": result["mde"],
                "resolved": bool(result["ci_low"] > 0),
            }
        row["learned"] = all(row[d]["resolved"] and row[d]["above_chance"] >= row[d]["mde"] for d in DIRECTIONS)
        row["within_mde_of_chance"] = all(row[d]["above_chance"] < row[d]["mde"] for d in DIRECTIONS)
        rows.append(row)
    return rows


def verdict(by_protocol: dict[str, list[dict[str, Any]]]) -> str:
    """One sentence on every method of every protocol at once."""
    rows = [row for protocol_rows in by_protocol.values() for row in protocol_rows]
    if not rows:
        return "No run to judge."
    n_way = rows[0]["n_way"]
    if all(row["within_mde_of_chance"] for row in rows):
        return (
            f"**No method learned anything this run can detect**: every method's {n_way}-way R@1 is within the "
            f"smallest difference the run could detect of chance (1/{n_way} = {1 / n_way:.2f}), so the "
            "comparisons below compare noise. The data may be too hard for these models (or too small)."
        )
    several = len(by_protocol) > 1
    weak = [
        f"{row['label']} ({protocol})" if several else row["label"]
        for protocol, protocol_rows in by_protocol.items()
        for row in protocol_rows
        if not row["learned"]
    ]
    if not weak:
        return (
            f"Every method learned: each one's {n_way}-way R@1 is above chance (1/{n_way} = {1 / n_way:.2f}) "
            "by more than the run's smallest detectable difference, in both directions."
        )
    return (
        f"{and_list(weak)} {'is' if len(weak) == 1 else 'are'} not clearly above chance "
        f"(1/{n_way} = {1 / n_way:.2f}) in both directions; the other methods are."
    )


def learned_section(doc: Document, by_protocol: dict[str, list[dict[str, Any]]]) -> None:
    """The opening verdict, with each method's distance from chance in one line per protocol (the table of
    every run is :func:`chance_table_section`, after the headline: the first table stays the headline's)."""
    doc.heading("Did the models learn?")
    doc.paragraph(verdict(by_protocol))
    for protocol, rows in by_protocol.items():
        cells = "; ".join(
            f"{row['label']} {row['i2t']['above_chance']:+.3f} [{row['i2t']['ci_low']:+.3f}, {row['i2t']['ci_high']:+.3f}] / "
            f"{row['t2i']['above_chance']:+.3f} [{row['t2i']['ci_low']:+.3f}, {row['t2i']['ci_high']:+.3f}]"
            for row in rows
        )
        doc.paragraph(f"{protocol.capitalize()} protocol, {rows[0]['n_way']}-way R@1 − chance (I→T / T→I, 95% CI): {cells}.")


def chance_table_section(doc: Document, by_protocol: dict[str, list[dict[str, Any]]]) -> None:
    doc.heading("Against chance, every run")
    doc.table(
        ["Protocol", "Method", *[f"{direction_label(d)} R@1 − chance [95% CI] (MDE)" for d in DIRECTIONS]],
        [
            [
                protocol,
                row["label"],
                *[
                    f"{row[d]['r1']:.3f} − {row['chance']:.2f} = {row[d]['above_chance']:+.3f} "
                    f"[{row[d]['ci_low']:+.3f}, {row[d]['ci_high']:+.3f}] ({row[d]['mde']:.3f})"
                    for d in DIRECTIONS
                ],
            ]
            for protocol, rows in by_protocol.items()
            for row in rows
        ],
        caption="n-way R@1 on the test split, mean over seeds; interval and MDE from the bootstrap over test "
        "items and seeds (MDE: the smallest difference from chance the run detects with 80% power).",
    )
