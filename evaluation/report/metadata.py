"""The sections around the results: the run's one-line introduction, training times, the data (validation,
near-duplicate removal, splits, neighbor tables) and the run metadata of every task.
"""

from __future__ import annotations

from typing import Any

from evaluation.document import Document
from evaluation.report.inputs import ReportInputs, VariantRun


def run_intro(doc: Document, info: dict[str, Any]) -> None:
    """The line under the title: what ran (dataset, profile, seeds, device), so every number has a context."""
    doc.paragraph(
        f"Dataset `{info.get('dataset')}`, profile `{info.get('profile')}`, seeds {info.get('seeds')}, "
        f"device {info.get('device', 'cpu')}. Cells are mean ± std over seeds where more than one seed ran."
    )


def training_and_data_section(
    doc: Document, inputs: ReportInputs, summary: dict[str, dict[str, Any]], runs: list[VariantRun]
) -> None:
    """Training time per method (``runs``: the runs ``summary`` was made of — the tuned ones when the shared
    protocol did not run), then the data: validation rejects, near-duplicate removal, splits and the Annoy
    neighbor tables with their recall against exact search."""
    doc.heading("Training")
    runs_of: dict[str, list] = {}
    for run in runs:
        runs_of.setdefault(run.variant, []).append(run)

    def flag(variant: str, key: str) -> str:
        values = {str(run.training.get(key, "?")).lower() for run in runs_of.get(variant, [])}
        return ",".join(sorted(values)) or "?"

    doc.table(
        ["Method", "mean epoch (s)", "epochs run", "seeds", "trunk", "ImageNet weights"],
        [
            [
                s["label"],
                f"{s['mean_epoch_seconds']:.1f}",
                ",".join(str(run.training.get("epochs", "?")) for run in runs_of.get(variant, [])),
                ",".join(map(str, s["seeds"])),
                flag(variant, "trunk"),
                flag(variant, "imagenet_weights_loaded"),
            ]
            for variant, s in summary.items()
        ],
        caption="'ImageNet weights': whether the image trunk started from ImageNet weights (false: random "
        "init, which a RuntimeWarning announced when the weights were asked for).",
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
    if inputs.coverage:
        doc.table(
            ["Split", "texts", "tokens", "out of vocabulary", "texts mostly out of vocabulary"],
            [
                [
                    split,
                    str(c["texts"]),
                    str(c["tokens"]),
                    f"{c['unknown_token_share']:.2%}",
                    f"{c['mostly_unknown_text_share']:.2%}",
                ]
                for split, c in inputs.coverage.items()
            ],
            caption="Vocabulary coverage: the word vectors' vocabulary comes from the train texts; an out-of-"
            "vocabulary token reaches the text tower as UNK, and a text is 'mostly' out of it when more than half "
            "its tokens are. A high share on val or test means the vocabulary does not fit those texts.",
        )
    if inputs.neighbor_tables:
        doc.heading("Neighbor tables (Annoy)")
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
        shares = {
            space: t["same_topic_share"]
            for space, t in inputs.neighbor_tables.items()
            if "same_topic_share" in t
        }
        if shares:
            doc.table(
                [
                    "space",
                    "same topic: all k",
                    "same topic: the first sample_k (where i′ is drawn)",
                    "sample_k",
                ],
                [
                    [space, f"{s['all_k']:.3f}", f"{s['sample_pool']:.3f}", str(s["sample_k"])]
                    for space, s in sorted(shares.items())
                ],
                caption="Share of neighbor-table entries whose ground-truth topic is the anchor's: the rate at "
                "which a sampled i′ shares the anchor's topic (uniform over the pool; duplicates skipped).",
            )


def run_metadata_section(doc: Document, inputs: ReportInputs) -> None:
    """Every upstream task with its output signature and wall time, then the run's settings and versions."""
    doc.heading("Run metadata")
    if inputs.tasks:
        doc.table(
            ["Task", "output", "wall time (s)"],
            [[t["task"], t["signature"], f"{t['wall_time_s']:.1f}"] for t in inputs.tasks],
        )
    doc.code("\n".join(f"{k}: {v}" for k, v in sorted(inputs.run_info.items())))
