"""Test-split evaluation of one trained variant's embeddings: n-way retrieval and neighbor preservation
(Thomas & Kovashka §4.3; preservation at several k with its chance level, and per-sample values at the
headline k for the report's bootstrap), topic precision across and within modalities, full-ranking
Recall@K / medR / mAP@k (Bleeker & de Rijke §3), and global calibration: the PR curve, PR-AUC and per-query
score distributions (Veit & Wilber §4.3, §4.5).

Why apart from the Evaluate task: this is every number of ``metrics.json`` computed from arrays, so it can
be tested without training a model, and the task keeps only loading, encoding and writing. Test embeddings
are ``[n, d]``, or ``[n, K, d]`` for a PVSE model (K embeddings per item); every metric scores through
:func:`evaluation.embeddings.cross_modal_scores`, so a PVSE variant is ranked by its multiple-instance
similarity (max over the K x K embedding pairs), the score it was trained with.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from evaluation.calibration import calibration
from evaluation.neighborhoods import (
    headline_preservation_k,
    nearest_neighbor_ranking,
    neighbor_preservation_at_ks,
    topic_precision_at_k,
    within_modality_topic_precision,
)
from evaluation.protocol import EVAL_SEED, full_ranking, retrieval_layout
from evaluation.retrieval import n_way_recall_at_1

#: per-sample neighbor preservation at the headline k, per modality (``<name>.npy``), for the report's
#: bootstrap over test items
HEADLINE_PRESERVATION = {"image": "preservation_image_headline", "text": "preservation_text_headline"}


def similarity_summary(image: np.ndarray, text: np.ndarray) -> dict[str, Any]:
    """How the embeddings were scored: K per item for each modality and the similarity rule used."""
    image_k = image.shape[1] if image.ndim == 3 else 1
    text_k = text.shape[1] if text.ndim == 3 else 1
    rule = "dot" if image_k == text_k == 1 else "max over the K x K embedding pairs (PVSE MIL)"
    return {"image_embeddings_per_item": int(image_k), "text_embeddings_per_item": int(text_k), "rule": rule}


def preservation_at_ks(
    image: np.ndarray,
    text: np.ndarray,
    doc_vectors: np.ndarray,
    preservation_k: int,
    preservation_ks: tuple[int, ...] | list[int],
    paper_ratio: float,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Neighbor preservation per modality at every usable k, from one ranking of each space.

    The ks are those of ``preservation_ks`` below n (a k of n - 1 or more is every other item), the paper's
    ``preservation_k`` capped at n - 1, and the headline k (:func:`headline_preservation_k`). Returns the
    legacy ``neighbor_preservation`` entry (the paper's k, as Table 3 always reported it), the
    ``neighbor_preservation_at_k`` entry (per k: chance level, and per modality mean and lift) and the
    per-sample arrays at the headline k, keyed as ``HEADLINE_PRESERVATION`` names them.
    """
    n = len(doc_vectors)
    paper_k = int(min(preservation_k, n - 1))
    headline_k = headline_preservation_k(preservation_ks, n, paper_ratio)
    ks = sorted({int(k) for k in preservation_ks if 1 <= k <= n - 1} | {paper_k, headline_k})
    reference_ranking = nearest_neighbor_ranking(doc_vectors, ks[-1])
    by_modality = {
        modality: neighbor_preservation_at_ks(embeddings, None, ks, reference_ranking=reference_ranking)
        for modality, embeddings in (("image", image), ("text", text))
    }
    legacy = {
        modality: {"mean": result[paper_k]["mean"], "k_used": paper_k, "k_requested": int(preservation_k)}
        for modality, result in by_modality.items()
    }
    at_k = {
        "headline_k": headline_k,
        "paper_k": paper_k,
        "paper_ratio": float(paper_ratio),
        "n": int(n),
        "ks": {
            str(k): {
                "chance": by_modality["image"][k]["chance"],
                **{
                    modality: {"mean": result[k]["mean"], "lift": result[k]["lift"]}
                    for modality, result in by_modality.items()
                },
            }
            for k in ks
        },
    }
    arrays = {
        HEADLINE_PRESERVATION[modality]: result[headline_k]["per_sample"]
        for modality, result in by_modality.items()
    }
    return legacy, at_k, arrays


def evaluate_embeddings(
    image: np.ndarray,
    text: np.ndarray,
    doc_vectors: np.ndarray,
    n_way: int,
    redraws: int,
    preservation_k: int,
    group_ids: np.ndarray | None = None,
    topics: np.ndarray | None = None,
    topic_k: int = 10,
    preservation_ks: tuple[int, ...] | list[int] = (),
    paper_preservation_ratio: float = 0.006,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Table 1 (n-way R@1 both directions) and Table 3 (neighbor preservation per modality) metrics.

    ``image`` / ``text`` are ``[n, d]`` or ``[n, K, d]`` (PVSE); see :func:`similarity_summary`.
    Neighbor preservation is computed at the paper's ``preservation_k`` and at every k of
    ``preservation_ks`` (see :func:`preservation_at_ks`); with ``topics``, topic precision at ``topic_k``
    cross-modally (I→T, T→I) and within each modality (I→I, T→T, at most n - 1 neighbors).
    Returns the metrics and the per-item arrays the report bootstraps: ``i2t_hits`` / ``t2i_hits``
    ``[redraws, n]`` and the per-sample preservation at the headline k (``HEADLINE_PRESERVATION``).
    """
    retrieval = n_way_recall_at_1(
        image, text, n_way, EVAL_SEED, redraws, group_ids=group_ids, return_hits=True
    )
    arrays = {"i2t_hits": retrieval.pop("i2t_hits"), "t2i_hits": retrieval.pop("t2i_hits")}
    metrics: dict[str, Any] = {"retrieval": retrieval, "similarity": similarity_summary(image, text)}
    legacy, at_k, preservation_arrays = preservation_at_ks(
        image, text, doc_vectors, preservation_k, preservation_ks, paper_preservation_ratio
    )
    metrics["neighbor_preservation"] = legacy
    metrics["neighbor_preservation_at_k"] = at_k
    arrays.update(preservation_arrays)
    if topics is not None:
        within_k = int(min(topic_k, len(topics) - 1))
        metrics["topic_precision"] = {
            "k": topic_k,
            "i2t": topic_precision_at_k(image, text, topics, topics, topic_k),
            "t2i": topic_precision_at_k(text, image, topics, topics, topic_k),
            "within_k": within_k,
            "i2i": within_modality_topic_precision(image, topics, within_k),
            "t2t": within_modality_topic_precision(text, topics, within_k),
        }
    return metrics, arrays


def topics_of_pairs(ground_truth: pd.DataFrame | None, test_pair_ids: pd.Series) -> np.ndarray | None:
    """The ground-truth topic of every test pair, or ``None`` when the dataset has no topics.

    Only the embedded dataset knows its topics; without them topic precision is not computed.
    """
    if ground_truth is None or "topic" not in ground_truth.columns:
        return None
    topic_of = dict(zip(ground_truth["pair_id"], ground_truth["topic"], strict=True))
    return test_pair_ids.map(topic_of).to_numpy()


def evaluate_test_split(
    image: np.ndarray,
    text: np.ndarray,
    doc_vectors: np.ndarray,
    *,
    group_ids: np.ndarray,
    image_ids: np.ndarray,
    texts: np.ndarray,
    topics: np.ndarray | None,
    n_way: int,
    redraws: int,
    preservation_k: int,
    topic_k: int,
    preservation_ks: tuple[int, ...] | list[int],
    paper_preservation_ratio: float,
) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every metric of one variant's test embeddings: :func:`evaluate_embeddings`, then full ranking and
    calibration over the distinct test items (:func:`evaluation.protocol.retrieval_layout` of the pairs'
    ``group_ids``, ``image_ids`` (pairs of one image share one) and ``texts``).

    Returns the metrics (``metrics.json`` without the run's identity), the per-item arrays the report
    bootstraps (:func:`evaluate_embeddings`) and the PR-curve / score-distribution arrays (``curves.npz``).
    """
    metrics, arrays = evaluate_embeddings(
        image,
        text,
        doc_vectors,
        n_way,
        redraws,
        preservation_k,
        group_ids=group_ids,
        topics=topics,
        topic_k=topic_k,
        preservation_ks=preservation_ks,
        paper_preservation_ratio=paper_preservation_ratio,
    )
    layout = retrieval_layout(group_ids, image_ids, texts)
    metrics["full_ranking"] = full_ranking(image, text, layout)
    calibration_summary, curves = calibration(image, text, group_ids, layout)
    metrics.update(calibration_summary)
    return metrics, arrays, curves
