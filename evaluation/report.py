"""The run report: Table-1 and Table-3 style comparisons, significance against the baseline, dataset,
dedup and neighbour-table statistics, and run metadata — as Markdown, HTML and JSON from one model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluation.document import Document
from evaluation.metrics import mean_std, paired_bootstrap

BASELINE_VARIANT = "ang_np_sym"


@dataclass
class VariantRun:
    """One trained and evaluated (variant, seed)."""

    variant: str
    label: str
    seed: int
    metrics: dict[str, Any]
    training: dict[str, Any]
    hits: dict[str, np.ndarray]  # "i2t_hits"/"t2i_hits": [redraws, n_queries] 0/1


@dataclass
class ReportInputs:
    title: str
    runs: list[VariantRun]
    dataset: dict[str, Any] = field(default_factory=dict)
    dedup: dict[str, Any] = field(default_factory=dict)
    splits: dict[str, Any] = field(default_factory=dict)
    neighbor_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    run_info: dict[str, Any] = field(default_factory=dict)


def _fmt(summary: dict[str, float]) -> str:
    if summary["n"] > 1:
        return f"{summary['mean']:.4f} ± {summary['std']:.4f}"
    return f"{summary['mean']:.4f}"


def summarise_variants(runs: list[VariantRun]) -> dict[str, dict[str, Any]]:
    """Per variant, mean ± std over seeds of every headline metric (order of first appearance)."""
    grouped: dict[str, list[VariantRun]] = defaultdict(list)
    for run in runs:
        grouped[run.variant].append(run)
    summary: dict[str, dict[str, Any]] = {}
    for variant, variant_runs in grouped.items():
        m = [r.metrics for r in variant_runs]
        entry: dict[str, Any] = {
            "label": variant_runs[0].label,
            "seeds": [r.seed for r in variant_runs],
            "i2t": mean_std([x["retrieval"]["i2t"] for x in m]),
            "t2i": mean_std([x["retrieval"]["t2i"] for x in m]),
            "i2t_redraw_std": float(np.mean([x["retrieval"]["i2t_std"] for x in m])),
            "t2i_redraw_std": float(np.mean([x["retrieval"]["t2i_std"] for x in m])),
            "preservation_image": mean_std([x["neighbour_preservation"]["image"]["mean"] for x in m]),
            "preservation_text": mean_std([x["neighbour_preservation"]["text"]["mean"] for x in m]),
            "preservation_k": m[0]["neighbour_preservation"]["image"]["k_used"],
            "preservation_k_requested": m[0]["neighbour_preservation"]["image"]["k_requested"],
            "n_way": m[0]["retrieval"]["n_way"],
            "redraws": m[0]["retrieval"]["redraws"],
            "n_test": m[0]["retrieval"]["n_queries"],
        }
        if all("topic_precision" in x for x in m):
            entry["topic_i2t"] = mean_std([x["topic_precision"]["i2t"] for x in m])
            entry["topic_t2i"] = mean_std([x["topic_precision"]["t2i"] for x in m])
            entry["topic_k"] = m[0]["topic_precision"]["k"]
        epoch_seconds = [r.training.get("mean_epoch_seconds") for r in variant_runs]
        entry["mean_epoch_seconds"] = float(np.mean([s for s in epoch_seconds if s is not None] or [np.nan]))
        entry["best_epochs"] = [r.training.get("best_epoch") for r in variant_runs]
        summary[variant] = entry
    return summary


def significance_against_baseline(runs: list[VariantRun], baseline: str = BASELINE_VARIANT) -> dict[str, Any]:
    """Paired bootstrap over test queries (hits averaged over redraws and seeds) of each variant vs baseline."""
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


def build_report(inputs: ReportInputs) -> tuple[Document, dict[str, Any]]:
    summary = summarise_variants(inputs.runs)
    significance = significance_against_baseline(inputs.runs)
    doc = Document(inputs.title)
    info = inputs.run_info
    doc.paragraph(
        f"Dataset `{info.get('dataset')}`, profile `{info.get('profile')}`, seeds {info.get('seeds')}, "
        f"device {info.get('device', 'cpu')}. Cells are mean ± std over seeds where more than one seed ran."
    )

    first = next(iter(summary.values()), None)
    doc.heading("Table 1 — cross-modal retrieval (n-way Recall@1)")
    if first:
        doc.table(
            ["Method", "I→T", "T→I", "I→T redraw sd", "T→I redraw sd", "best epoch(s)"],
            [
                [
                    s["label"],
                    _fmt(s["i2t"]),
                    _fmt(s["t2i"]),
                    f"{s['i2t_redraw_std']:.4f}",
                    f"{s['t2i_redraw_std']:.4f}",
                    ",".join(str(e) for e in s["best_epochs"]),
                ]
                for s in summary.values()
            ],
            caption=(
                f"{first['n_way']}-way task on {first['n_test']} test pairs: each query's paired item plus "
                f"{first['n_way'] - 1} random non-paired test items; {first['redraws']} redraws of distractors "
                "(fixed seed, the same for every method); 'redraw sd' is the spread over those redraws."
            ),
        )
    if significance:
        doc.heading(
            f"Paired bootstrap against {summary.get(BASELINE_VARIANT, {}).get('label', BASELINE_VARIANT)}"
        )
        rows = []
        for variant, directions in significance.items():
            for direction, result in directions.items():
                rows.append(
                    [
                        summary[variant]["label"],
                        direction.upper().replace("2", "→"),
                        f"{result['mean_difference']:+.4f}",
                        f"[{result['ci_low']:+.4f}, {result['ci_high']:+.4f}]",
                        f"{result['p_value']:.4f}",
                    ]
                )
        doc.table(
            ["Method", "Direction", "Δ R@1", "95% CI", "p"],
            rows,
            caption="10,000 paired resamples of test queries; per-query hits averaged over redraws and seeds.",
        )

    doc.heading("Table 3 — neighbour preservation")
    if first:
        doc.table(
            ["Method", "Image", "Text"],
            [
                [s["label"], _fmt(s["preservation_image"]), _fmt(s["preservation_text"])]
                for s in summary.values()
            ],
            caption=(
                f"Share of each test sample's {first['preservation_k']} nearest Doc2Vec neighbours (among test "
                f"samples) that are also among its {first['preservation_k']} nearest same-modality neighbours in "
                f"the learned space (requested k = {first['preservation_k_requested']}, capped at n_test − 1)."
            ),
        )
    if first and "topic_i2t" in first:
        doc.heading("Topic precision (ground-truth topics of the embedded dataset)")
        doc.table(
            ["Method", f"I→T P@{first['topic_k']}", f"T→I P@{first['topic_k']}"],
            [[s["label"], _fmt(s["topic_i2t"]), _fmt(s["topic_t2i"])] for s in summary.values()],
            caption="Share of the top-k cross-modal results that share the query's topic: a plausible but "
            "technically incorrect retrieval still counts here.",
        )

    doc.heading("Training")
    doc.table(
        ["Method", "mean epoch (s)", "seeds"],
        [
            [s["label"], f"{s['mean_epoch_seconds']:.1f}", ",".join(map(str, s["seeds"]))]
            for s in summary.values()
        ],
    )

    doc.heading("Data")
    d = inputs.dataset
    if d:
        doc.paragraph(
            f"{d.get('n_input')} pairs from the recipe, {d.get('n_kept')} kept after validation, "
            f"{d.get('n_rejected')} rejected (budget {d.get('reject_budget')})."
        )
        reasons = d.get("rejects_by_reason") or {}
        if reasons:
            doc.table(["Reject reason", "count"], [[k, str(v)] for k, v in sorted(reasons.items())])
    if inputs.dedup:
        dd = inputs.dedup
        doc.paragraph(
            f"Near-duplicate removal (MinHash LSH): {dd.get('n_input')} → {dd.get('n_kept')} pairs, "
            f"{dd.get('n_clusters')} duplicate clusters, {dd.get('n_removed')} pairs removed."
        )
        injected = dd.get("against_injected")
        if injected:
            doc.table(
                ["Against injected duplicates", "value"],
                [[k, f"{v:.4f}" if isinstance(v, float) else str(v)] for k, v in sorted(injected.items())],
            )
    if inputs.splits:
        doc.paragraph("Splits: " + ", ".join(f"{k} {v}" for k, v in sorted(inputs.splits.items())))
    if inputs.neighbor_tables:
        doc.heading("Neighbour tables (Annoy)")
        rows = []
        for space, table in sorted(inputs.neighbor_tables.items()):
            a, r = table["annoy"], table["recall_vs_exact"]
            rows.append(
                [
                    space,
                    str(a["n_items"]),
                    str(a["k"]),
                    str(a["dim"]),
                    a["metric"],
                    str(a["n_trees"]),
                    str(a["search_k"]),
                    f"{r['recall_at_k']:.4f}",
                    str(r["n_queries"]),
                ]
            )
        doc.table(
            ["space", "items", "k", "dim", "metric", "n_trees", "search_k", "recall@k vs exact", "queries"],
            rows,
        )

    doc.heading("Run metadata")
    if inputs.tasks:
        doc.table(
            ["Task", "output", "wall time (s)"],
            [[t["task"], t["signature"], f"{t['wall_time_s']:.1f}"] for t in inputs.tasks],
        )
    doc.code("\n".join(f"{k}: {v}" for k, v in sorted(info.items())))

    payload = {
        "title": inputs.title,
        "run": info,
        "variants": summary,
        "significance": significance,
        "per_run": [
            {"variant": r.variant, "seed": r.seed, "metrics": r.metrics, "training": r.training}
            for r in inputs.runs
        ],
        "dataset": inputs.dataset,
        "dedup": inputs.dedup,
        "splits": inputs.splits,
        "neighbor_tables": inputs.neighbor_tables,
        "tasks": inputs.tasks,
    }
    return doc, payload
