"""Per variant, mean ± sd over seeds of every metric the sections show.

Why one summary for all sections: each table reads the same means, so a number is computed once and the
Markdown, HTML and JSON cannot disagree about it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from evaluation.report.inputs import VariantRun
from evaluation.statistics import mean_std


def _full_ranking_summary(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """mean ± std over seeds of every number of a full-ranking result."""
    keys = [key for key, value in results[0].items() if isinstance(value, (int, float))]
    return {key: mean_std([r[key] for r in results]) for key in keys}


def _preservation_at_k_summary(at_k: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean ± std over seeds of preservation at every k all runs computed, with chance and lift per k.

    ``None`` when a run lacks the entry or runs disagree on the headline k (different test splits).
    """
    if not all(at_k) or len({a["headline_k"] for a in at_k}) != 1:
        return None
    ks = sorted((k for k in at_k[0]["ks"] if all(k in a["ks"] for a in at_k)), key=int)
    per_k = {}
    for k in ks:
        entry: dict[str, Any] = {"chance": at_k[0]["ks"][k]["chance"]}
        for modality in ("image", "text"):
            entry[modality] = mean_std([a["ks"][k][modality]["mean"] for a in at_k])
            entry[f"{modality}_lift"] = mean_std([a["ks"][k][modality]["lift"] for a in at_k])
        per_k[k] = entry
    return {
        "headline_k": at_k[0]["headline_k"],
        "paper_ratio": at_k[0].get("paper_ratio"),
        "n": at_k[0]["n"],
        "ks": per_k,
    }


def summarise_variants(runs: list[VariantRun]) -> dict[str, dict[str, Any]]:
    """Per variant, mean ± std over seeds of every headline metric (order of first appearance).

    ``n_seeds`` counts the runs behind each mean; a mean over one seed has no spread to show.
    """
    grouped: dict[str, list[VariantRun]] = defaultdict(list)
    for run in runs:
        grouped[run.variant].append(run)
    summary: dict[str, dict[str, Any]] = {}
    for variant, variant_runs in grouped.items():
        m = [r.metrics for r in variant_runs]
        entry: dict[str, Any] = {
            "label": variant_runs[0].label,
            "losses": "+".join(variant_runs[0].loss_names),
            "seeds": [r.seed for r in variant_runs],
            "n_seeds": len(variant_runs),
            "i2t": mean_std([x["retrieval"]["i2t"] for x in m]),
            "t2i": mean_std([x["retrieval"]["t2i"] for x in m]),
            "i2t_redraw_std": float(np.mean([x["retrieval"]["i2t_std"] for x in m])),
            "t2i_redraw_std": float(np.mean([x["retrieval"]["t2i_std"] for x in m])),
            "preservation_image": mean_std([x["neighbor_preservation"]["image"]["mean"] for x in m]),
            "preservation_text": mean_std([x["neighbor_preservation"]["text"]["mean"] for x in m]),
            "preservation_k": m[0]["neighbor_preservation"]["image"]["k_used"],
            "preservation_k_requested": m[0]["neighbor_preservation"]["image"]["k_requested"],
            "n_way": m[0]["retrieval"]["n_way"],
            "redraws": m[0]["retrieval"]["redraws"],
            "n_test": m[0]["retrieval"]["n_queries"],
        }
        at_k = _preservation_at_k_summary([x.get("neighbor_preservation_at_k") for x in m])
        if at_k is not None:
            entry["preservation_at_k"] = at_k
        n_preservation = at_k["n"] if at_k else entry["n_test"]
        # a random neighbor set keeps k / (n - 1) of the reference neighbors: 1.0 once k is capped at n - 1
        entry["preservation_chance"] = entry["preservation_k"] / max(n_preservation - 1, 1)
        if all("topic_precision" in x for x in m):
            entry["topic_i2t"] = mean_std([x["topic_precision"]["i2t"] for x in m])
            entry["topic_t2i"] = mean_std([x["topic_precision"]["t2i"] for x in m])
            entry["topic_k"] = m[0]["topic_precision"]["k"]
            if all("i2i" in x["topic_precision"] for x in m):
                entry["topic_i2i"] = mean_std([x["topic_precision"]["i2i"] for x in m])
                entry["topic_t2t"] = mean_std([x["topic_precision"]["t2t"] for x in m])
                entry["topic_within_k"] = m[0]["topic_precision"]["within_k"]
        if all("full_ranking" in x for x in m):
            entry["full_ranking_protocol"] = m[0]["full_ranking"]["protocol"]
            entry["full_ranking"] = _full_ranking_summary([x["full_ranking"]["all"] for x in m])
            if all("folds_1k" in x["full_ranking"] for x in m):
                entry["full_ranking_1k"] = _full_ranking_summary(
                    [x["full_ranking"]["folds_1k"]["mean"] for x in m]
                )
                entry["full_ranking_1k_folds"] = m[0]["full_ranking"]["folds_1k"]["n_folds"]
        if all("pr" in x for x in m):
            entry["pr_auc"] = mean_std([x["pr"]["pr_auc"] for x in m])
            entry["pr_pairs"] = m[0]["pr"]["n_pairs"]
        epoch_seconds = [r.training.get("mean_epoch_seconds") for r in variant_runs]
        entry["mean_epoch_seconds"] = float(np.mean([s for s in epoch_seconds if s is not None] or [np.nan]))
        entry["best_epochs"] = [r.training.get("best_epoch") for r in variant_runs]
        summary[variant] = entry
    return summary
