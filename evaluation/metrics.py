"""The public metric functions under their former common name, for callers written before the split.

Why this module is only re-exports: the metrics now live with their subjects (:mod:`evaluation.embeddings`
for the shared similarity and input guards, :mod:`evaluation.retrieval`, :mod:`evaluation.neighborhoods`,
:mod:`evaluation.calibration`, :mod:`evaluation.proximity`, :mod:`evaluation.statistics`), and existing
imports such as ``from evaluation.metrics import cocos_summary`` keep working. New code imports from the
subject modules.
"""

from __future__ import annotations

from evaluation.calibration import precision_recall, score_distribution
from evaluation.embeddings import cross_modal_scores
from evaluation.neighborhoods import nearest_neighbor_mask, neighbor_preservation, topic_precision_at_k
from evaluation.proximity import proximity_ratios, sample_neighbor_pairs, smallest_ratios_first
from evaluation.retrieval import coco_folds, full_ranking_metrics, n_way_recall_at_1
from evaluation.statistics import cocos_summary, mean_std, paired_bootstrap

__all__ = [
    "coco_folds",
    "cocos_summary",
    "cross_modal_scores",
    "full_ranking_metrics",
    "mean_std",
    "n_way_recall_at_1",
    "nearest_neighbor_mask",
    "neighbor_preservation",
    "paired_bootstrap",
    "precision_recall",
    "proximity_ratios",
    "sample_neighbor_pairs",
    "score_distribution",
    "smallest_ratios_first",
    "topic_precision_at_k",
]
