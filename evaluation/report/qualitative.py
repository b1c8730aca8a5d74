"""Figs. 5 and 6 of Thomas & Kovashka (§4.4): the Doc2Vec-neighbor pairs the method keeps closest relative
to the baseline, and the top retrievals of both for random queries, with each item's text and thumbnail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evaluation.document import Document, GalleryItem
from evaluation.plots import plot_proximity_ratios
from evaluation.report.formatting import finite_or_none, fmt_number
from evaluation.report.inputs import FIGURES_DIR, Qualitative, ReportInputs, ShownItem

PROXIMITY_PNG = "proximity_ratios.png"


def _shown(
    items: dict[int, ShownItem], position: int, image: bool, text: bool, note: str = "", **kw
) -> GalleryItem:
    """A test position as a gallery entry: its image, its text or both (a missing item shows its position)."""
    item = items.get(position, ShownItem(text=f"test pair {position}"))
    return GalleryItem(
        text=item.text if text else "", image=item.thumbnail if image else None, note=note, **kw
    )


def proximity_section(doc: Document, q: Qualitative, figure_dir: Path | None) -> dict[str, Any]:
    """Fig. 5: how much closer the method keeps Doc2Vec-neighbor pairs than the baseline; returns its JSON."""
    study = q.proximity
    doc.heading("Fig. 5 — semantic proximity: pairs our model keeps closest relative to the baseline")
    if study is None:
        doc.paragraph("Not computed: the test split is too small for Doc2Vec neighbor pairs.")
        return {}
    doc.paragraph(
        f"{study['n_pairs']} distinct Doc2Vec-neighbor pairs among test items (each item's {study['k']} exact "
        f"nearest test items in Doc2Vec space, sampled with a fixed seed) and, for each, the ratio of its "
        f"distance under {q.ours_label} to that under {q.baseline_label} (seed {q.seed}): image–image pairs "
        "with the image embeddings, text–text pairs with the text embeddings. A ratio below 1 means our "
        "model keeps the pair closer."
    )
    doc.table(
        ["Pairs", "pairs", "median ratio", "share with ratio < 1"],
        [
            [
                f"{m}–{m}",
                str(study[m]["n_finite"]),
                fmt_number(study[m]["median_ratio"]),
                fmt_number(study[m]["share_closer"]),
            ]
            for m in ("image", "text")
        ],
    )
    payload = {
        "k": study["k"],
        "n_pairs": study["n_pairs"],
        "pairs": study["pairs"],
        **{
            m: {
                # JSON has no inf / nan: a pair at distance 0 under the baseline is written as null
                "ratios": [float(r) if np.isfinite(r) else None for r in study[m]["ratios"]],
                "n_finite": study[m]["n_finite"],
                "median_ratio": finite_or_none(study[m]["median_ratio"]),
                "share_closer": finite_or_none(study[m]["share_closer"]),
                "smallest": [(a, b, finite_or_none(r)) for a, b, r in study[m]["smallest"]],
            }
            for m in ("image", "text")
        },
    }
    if figure_dir is not None:
        plot_proximity_ratios(
            {m: study[m]["ratios"] for m in ("image", "text")},
            figure_dir / PROXIMITY_PNG,
            method_label=q.ours_label,
        )
        doc.image(
            f"{FIGURES_DIR}/{PROXIMITY_PNG}", "Distribution of log2 proximity ratios over the sampled pairs."
        )
        payload["file"] = f"{FIGURES_DIR}/{PROXIMITY_PNG}"
    for modality in ("image", "text"):
        rows = []
        for rank, (a, b, ratio) in enumerate(study[modality]["smallest"], start=1):
            is_image = modality == "image"
            rows.append(
                [
                    [GalleryItem(text=str(rank))],
                    [_shown(q.items, a, is_image, not is_image, note=f"test pair {a}")],
                    [_shown(q.items, b, is_image, not is_image, note=f"test pair {b}")],
                    [GalleryItem(text=fmt_number(ratio))],
                ]
            )
        doc.gallery(
            ["#", "s1", "s2", "d_ours / d_baseline"],
            rows,
            caption=f"{modality.capitalize()}–{modality} pairs with the smallest ratios (uncurated).",
        )
    return payload


def examples_section(doc: Document, q: Qualitative) -> None:
    """Fig. 6: for random queries, the top results of the method and of the baseline side by side."""
    if not q.examples:
        return
    doc.heading(f"Fig. 6 — retrieval examples: top results of {q.ours_label} and of the baseline")
    doc.paragraph(
        f"Queries drawn at random with a fixed seed (uncurated), seed-{q.seed} models. ✓ and a green frame "
        "mark the query's own pair; each result shows its rank and cosine similarity."
    )
    for direction, query_is_image in (("i2t", True), ("t2i", False)):
        rows = []
        for example in q.examples.get(direction, []):
            query = _shown(q.items, example["query"], query_is_image, not query_is_image, note="query")
            cells = [[query]]
            for model in ("ours", "baseline"):
                cells.append(
                    [
                        _shown(
                            q.items,
                            position,
                            not query_is_image,
                            query_is_image,
                            note=f"#{rank} · {score:.3f}",
                            marked=correct,
                        )
                        for rank, (position, score, correct) in enumerate(example[model], start=1)
                    ]
                )
            rows.append(cells)
        if rows:
            name = "Image → text" if query_is_image else "Text → image"
            doc.subheading(name)
            doc.gallery(["Query", q.ours_label, q.baseline_label], rows)


def shown_positions(
    proximity: dict[str, Any] | None, examples: dict[str, list[dict[str, Any]]] | None
) -> set[int]:
    """Every test position the two figures show: the smallest-ratio pairs of Fig. 5, and the queries and
    both models' results of Fig. 6 (the items that need a text snippet and a thumbnail)."""
    shown: set[int] = set()
    if proximity:
        for modality in ("image", "text"):
            for a, b, _ in proximity[modality]["smallest"]:
                shown |= {a, b}
    for direction_examples in (examples or {}).values():
        for example in direction_examples:
            shown.add(example["query"])
            for model in ("ours", "baseline"):
                shown |= {position for position, _, _ in example[model]}
    return shown


def qualitative_payload(q: Qualitative, proximity: dict[str, Any]) -> dict[str, Any]:
    """The JSON of Figs. 5 and 6: the study, the examples and the text and thumbnail of every shown item."""
    return {
        "seed": q.seed,
        "ours": q.ours_label,
        "baseline": q.baseline_label,
        "proximity": proximity,
        "examples": q.examples or {},
        "items": {
            str(position): {"text": q.items[position].text, "thumbnail": q.items[position].thumbnail}
            for position in sorted(shown_positions(q.proximity, q.examples))
            if position in q.items
        },
    }


def qualitative_section(
    doc: Document, inputs: ReportInputs, figure_dir: Path | None
) -> dict[str, Any] | None:
    """Figs. 5 and 6 when the inputs carry them, else one line on why they are missing; returns their JSON.

    The missing-figures note names ``inputs.method`` and ``inputs.baseline``: the figures compare exactly
    the two variants of the headline.
    """
    if inputs.qualitative is not None:
        proximity = proximity_section(doc, inputs.qualitative, figure_dir)
        examples_section(doc, inputs.qualitative)
        return qualitative_payload(inputs.qualitative, proximity)
    if inputs.runs:
        doc.heading("Figs. 5–6 — qualitative comparison")
        doc.paragraph(
            f"Not drawn: they compare `{inputs.method}` with `{inputs.baseline}`, which must both run with a "
            "common seed."
        )
    return None
