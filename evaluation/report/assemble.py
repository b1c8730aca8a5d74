"""Assembling the qualitative inputs of the report (Figs. 5 and 6) from two evaluated runs' arrays.

Why apart from the Report task: choosing the seed both variants ran, detecting the test layout, drawing
the proximity pairs and the retrieval examples, and deciding which items need a snippet and a thumbnail
are computations on arrays; the task only loads the arrays and writes the thumbnails.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluation.gallery import proximity_study, retrieval_examples, snippet
from evaluation.protocol import retrieval_layout
from evaluation.report.inputs import Qualitative, ShownItem
from evaluation.report.qualitative import shown_positions

#: Figs. 5 and 6 (Thomas & Kovashka §4.4); the Report task hashes these into its output path
QUALITATIVE = {
    "seed": 0,
    # exact Doc2Vec neighbors per test item; Eq. 5's k = 200 is meant for a training set, not a test split
    "proximity_k": 10,
    "proximity_pairs": 10_000,
    "proximity_shown": 3,
    "gallery_queries": 4,
    "gallery_top_k": 3,
    "snippet_chars": 160,
}
#: Doc2Vec neighbor pairs need at least this many test items (an item, a neighbor and a non-neighbor)
MIN_PROXIMITY_ITEMS = 3


def common_seed(evaluated: Iterable[tuple[str, int]], method: str, baseline: str) -> int | None:
    """The lowest training seed both ``method`` and ``baseline`` were evaluated with, or ``None``.

    The figures put the two models' results for the same test items side by side, so both must come from
    one seed's runs; ``evaluated`` lists (variant, seed) of every evaluation.
    """
    runs = set(evaluated)
    seeds = sorted(seed for variant, seed in runs if variant == method and (baseline, seed) in runs)
    return seeds[0] if seeds else None


@dataclass
class QualitativeComparison:
    """Figs. 5 and 6 computed for one seed: the studies, and the test positions they show."""

    proximity: dict[str, Any] | None
    examples: dict[str, list[dict[str, Any]]]
    shown: set[int]


def compare_qualitatively(
    ours: tuple[np.ndarray, np.ndarray],
    baseline: tuple[np.ndarray, np.ndarray],
    doc_vectors: np.ndarray,
    group_ids: np.ndarray,
    image_ids: np.ndarray,
    texts: np.ndarray,
    settings: dict[str, Any] = QUALITATIVE,
) -> QualitativeComparison:
    """Fig. 5's proximity study and Fig. 6's retrieval examples of the method (``ours``) and the baseline.

    ``ours`` / ``baseline`` are the ``(image, text)`` test embeddings of one seed, row-aligned with the test
    pairs' ``group_ids``, ``image_ids`` (pairs of one image share one), ``texts`` and Doc2Vec ``doc_vectors``. Fig. 6 ranks the
    distinct test images and texts (:func:`evaluation.protocol.retrieval_layout`); Fig. 5 is skipped
    (``proximity`` is ``None``) below ``MIN_PROXIMITY_ITEMS`` test items.
    """
    layout = retrieval_layout(group_ids, image_ids, texts)
    proximity = None
    if len(doc_vectors) >= MIN_PROXIMITY_ITEMS:
        proximity = proximity_study(
            ours,
            baseline,
            doc_vectors,
            settings["proximity_k"],
            settings["proximity_pairs"],
            settings["seed"],
            settings["proximity_shown"],
            group_ids=group_ids,
        )
    examples = retrieval_examples(
        ours,
        baseline,
        layout.image_positions,
        layout.text_positions,
        group_ids,
        settings["gallery_queries"],
        settings["gallery_top_k"],
        settings["seed"],
    )
    return QualitativeComparison(proximity, examples, shown_positions(proximity, examples))


def qualitative_inputs(
    comparison: QualitativeComparison,
    seed: int,
    ours_label: str,
    baseline_label: str,
    texts: np.ndarray,
    thumbnails: dict[int, str],
    settings: dict[str, Any] = QUALITATIVE,
) -> Qualitative:
    """The report's :class:`Qualitative` input: the comparison, with a text snippet and the thumbnail path
    (from ``thumbnails``: test position -> path relative to the report) of every shown item."""
    items = {
        position: ShownItem(
            text=snippet(texts[position], settings["snippet_chars"]), thumbnail=thumbnails[position]
        )
        for position in comparison.shown
    }
    return Qualitative(
        seed=seed,
        ours_label=ours_label,
        baseline_label=baseline_label,
        items=items,
        proximity=comparison.proximity,
        examples=comparison.examples,
    )
