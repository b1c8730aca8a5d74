"""Thomas & Kovashka's n-way Recall@1 tables: Table 1 (with the paired bootstrap of every variant against
the baseline), Table 2 (Struc against ours) and Table 4 (ablation of the within-modality losses).

Why together: all three show the same measure with the same columns; they differ only in which variants
they list (``evaluation.tables``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from evaluation.document import Document
from evaluation.report.formatting import direction_label, fmt
from evaluation.report.inputs import BASELINE_VARIANT, VariantRun
from evaluation.statistics import paired_bootstrap
from evaluation.tables import TABLE_1, TABLE_2, TABLE_4

#: variants shown only in their own table (Table 2's Struc rows, Table 4's ablations), not in Table 1
OWN_TABLE_ONLY = frozenset(set(TABLE_2) | set(TABLE_4)) - set(TABLE_1)


def significance_against_baseline(runs: list[VariantRun], baseline: str = BASELINE_VARIANT) -> dict[str, Any]:
    """Paired bootstrap over test queries (hits averaged over redraws and seeds) of each variant vs baseline.

    Test-query noise only; the headline (:func:`evaluation.report.headline.headline_comparison`) resamples
    seeds as well.
    """
    per_query: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    grouped: dict[str, list[VariantRun]] = defaultdict(list)
    for run in runs:
        grouped[run.variant].append(run)
    for variant, variant_runs in grouped.items():
        for direction in ("i2t", "t2i"):
            stacked = np.concatenate([r.hits[f"{direction}_hits"] for r in variant_runs], axis=0)
            per_query[variant][direction] = stacked.mean(axis=0)
    if baseline not in per_query:
        return {}
    out: dict[str, Any] = {}
    for variant, directions in per_query.items():
        if variant == baseline:
            continue
        out[variant] = {
            direction: paired_bootstrap(directions[direction], per_query[baseline][direction], 10_000, seed=0)
            for direction in ("i2t", "t2i")
        }
    return out


def n_way_rows(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    return [
        [
            s["label"],
            fmt(s["i2t"]),
            fmt(s["t2i"]),
            f"{s['i2t_redraw_std']:.4f}",
            f"{s['t2i_redraw_std']:.4f}",
            ",".join(str(e) for e in s["best_epochs"]),
            str(s["n_seeds"]),
        ]
        for s in summary.values()
    ]


N_WAY_COLUMNS = ["Method", "I→T", "T→I", "I→T redraw sd", "T→I redraw sd", "best epoch(s)", "seeds"]


def table_1_section(
    doc: Document, summary: dict[str, dict[str, Any]], significance: dict[str, Any], baseline: str
) -> None:
    """Table 1 (every variant not shown only in its own table), then the paired bootstrap of each variant
    against ``baseline`` (:func:`significance_against_baseline`)."""
    shown = {variant: s for variant, s in summary.items() if variant not in OWN_TABLE_ONLY}
    first = next(iter(shown.values()), None)
    doc.heading("Table 1 — cross-modal retrieval (n-way Recall@1)")
    if first:
        doc.table(
            N_WAY_COLUMNS,
            n_way_rows(shown),
            caption=(
                f"{first['n_way']}-way task on {first['n_test']} test pairs: each query's paired item plus "
                f"{first['n_way'] - 1} random non-paired test items; {first['redraws']} redraws of distractors "
                "(fixed seed, the same for every method). Cells are mean ± sd over the 'seeds' training seeds "
                "(one seed: no sd); 'redraw sd' is the spread over the distractor redraws."
            ),
        )
    if significance:
        doc.heading(f"Paired bootstrap against {summary.get(baseline, {}).get('label', baseline)}")
        rows = []
        for variant, directions in significance.items():
            for direction, result in directions.items():
                rows.append(
                    [
                        summary[variant]["label"],
                        direction_label(direction),
                        f"{result['mean_difference']:+.4f}",
                        f"[{result['ci_low']:+.4f}, {result['ci_high']:+.4f}]",
                        f"{result['p_value']:.4f}",
                    ]
                )
        doc.table(
            ["Method", "Direction", "Δ R@1", "95% CI", "p"],
            rows,
            caption="10,000 paired resamples of test queries; per-query hits averaged over redraws and seeds. "
            "Seeds are not resampled here, so these intervals leave out seed-to-seed variation and are "
            "narrower than the headline's: a difference resolved here but not in the headline is not "
            "robust to the training seed.",
        )


def table_2_section(doc: Document, summary: dict[str, dict[str, Any]]) -> list[str]:
    """Table 2 of Thomas & Kovashka: Ours (Trip) against Struc (Wang et al. 2016), when a Struc variant ran."""
    shown = {variant: summary[variant] for variant in TABLE_2 if variant in summary}
    if not any(variant.startswith("struc") for variant in shown):
        return []
    doc.heading("Table 2 — structure-preserving loss (Struc) vs ours")
    doc.table(
        N_WAY_COLUMNS,
        n_way_rows(shown),
        caption="n-way Recall@1 as in Table 1. GT: the ground-truth groups (captions of one image); NNΩ: "
        "estimated Doc2Vec neighbors (Eq. 5), with the structure constraint in text or image space.",
    )
    return list(shown)


def ablation_rows(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 4 of Thomas & Kovashka (``TABLE_4``: the full method, then the ablations that drop one
    within-modality loss): whichever of them ran, or nothing when no ablation ran."""
    full_variant, *ablations = TABLE_4
    if not any(variant in summary for variant in ablations):
        return []
    full = summary.get(full_variant)
    rows = []
    for variant in TABLE_4:
        if variant not in summary:
            continue
        s = summary[variant]
        row = {"variant": variant, "label": s["label"], "i2t": s["i2t"], "t2i": s["t2i"]}
        if full is not None and variant != full_variant:
            row["delta_i2t"] = s["i2t"]["mean"] - full["i2t"]["mean"]
            row["delta_t2i"] = s["t2i"]["mean"] - full["t2i"]["mean"]
        rows.append(row)
    return rows


def table_4_section(doc: Document, rows: list[dict[str, Any]]) -> None:
    """Table 4 from :func:`ablation_rows`; the differences are against the full method the ablations drop a
    loss from (the first of ``TABLE_4``), named by its label."""
    if not rows:
        return
    full_variant = TABLE_4[0]
    reference = next((r["label"] for r in rows if r["variant"] == full_variant), full_variant)
    doc.heading("Table 4 — ablation of the within-modality losses")
    doc.table(
        ["Method", "I→T", "T→I", f"Δ I→T vs {reference}", f"Δ T→I vs {reference}"],
        [
            [
                r["label"],
                fmt(r["i2t"]),
                fmt(r["t2i"]),
                f"{r['delta_i2t']:+.4f}" if "delta_i2t" in r else "",
                f"{r['delta_t2i']:+.4f}" if "delta_t2i" in r else "",
            ]
            for r in rows
        ],
        caption="n-way Recall@1 as in Table 1; L_text / L_img are the text-text and image-image terms of the "
        "within-modality loss (Eq. 5–6).",
    )
