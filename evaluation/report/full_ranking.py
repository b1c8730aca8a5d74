"""The full-ranking section: Recall@K, median / mean rank and mAP@k against the whole test gallery
(Bleeker & de Rijke §3), and the COCO 1K folds when the test split is large enough.
"""

from __future__ import annotations

import re
from typing import Any

from evaluation.document import Document
from evaluation.report.formatting import direction_label, fmt


def _recall_ks(metrics: dict[str, Any]) -> list[int]:
    return sorted(int(m.group(1)) for key in metrics if (m := re.fullmatch(r"i2t_r@(\d+)", key)))


def _map_key(metrics: dict[str, Any]) -> str:
    return next(key[len("i2t_") :] for key in metrics if key.startswith("i2t_map@"))


def _full_ranking_rows(
    summary: dict[str, dict[str, Any]], field_name: str
) -> tuple[list[str], list[list[str]]]:
    first = next(s[field_name] for s in summary.values() if field_name in s)
    ks, map_key = _recall_ks(first), _map_key(first)
    headers = [
        "Method",
        "Direction",
        *[f"R@{k}" for k in ks],
        "medR",
        "meanR",
        f"mAP@{map_key.split('@')[1]}",
    ]
    rows = []
    for s in summary.values():
        if field_name not in s:
            continue
        values = s[field_name]
        for direction in ("i2t", "t2i"):
            rows.append(
                [
                    s["label"],
                    direction_label(direction),
                    *[fmt(values[f"{direction}_r@{k}"]) for k in ks],
                    fmt(values[f"{direction}_medr"], 1),
                    fmt(values[f"{direction}_meanr"], 1),
                    fmt(values[f"{direction}_{map_key}"]),
                ]
            )
    return headers, rows


def full_ranking_section(doc: Document, summary: dict[str, dict[str, Any]]) -> None:
    """Full-gallery ranking per method and direction, and the 1K-fold table where the runs computed it."""
    ranked = [s for s in summary.values() if "full_ranking" in s]
    if not ranked:
        return
    first = ranked[0]
    doc.heading("Full-ranking retrieval (Recall@K, median / mean rank, mAP@k)")
    headers, rows = _full_ranking_rows(summary, "full_ranking")
    protocol = {
        "pairs": "every test pair is one image and one text",
        "captions_per_image": "pairs of one group share one image, so an image query is right when any of its "
        "captions ranks high",
        "images_per_text": "pairs of one group share one text, so a text query is right when any of its images "
        "ranks high",
    }[first["full_ranking_protocol"]]
    doc.table(
        headers,
        rows,
        caption=(
            f"Each query ranked against the whole test gallery ({first['full_ranking']['n_images']['mean']:.0f} "
            f"images, {first['full_ranking']['n_texts']['mean']:.0f} texts); {protocol}. R@K and mAP are "
            "fractions; ranks are 1-based, and a negative tying a positive ranks above it."
        ),
    )
    if any("full_ranking_1k" in s for s in summary.values()):
        headers, rows = _full_ranking_rows(summary, "full_ranking_1k")
        folds = next(s["full_ranking_1k_folds"] for s in summary.values() if "full_ranking_1k" in s)
        doc.table(headers, rows, caption=f"1K protocol: mean over {folds} folds of 1000 test images each.")
