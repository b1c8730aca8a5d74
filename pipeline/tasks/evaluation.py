"""Test-split evaluation of one trained variant: n-way retrieval and neighbour preservation (Thomas &
Kovashka §4.3; preservation at several k with its chance level, and per-sample values at the headline k for
the report's bootstrap), within-modality topic precision, full-ranking Recall@K / medR / mAP@k (Bleeker & de Rijke §3), and global calibration: the
PR curve, PR-AUC and per-query score distributions (Veit & Wilber §4.3, §4.5).

Test embeddings are ``[n, d]``, or ``[n, K, d]`` for a PVSE model (K embeddings per item); every metric
scores through ``evaluation.metrics.cross_modal_scores``, so a PVSE variant is ranked by its
multiple-instance similarity (max over the K x K embedding pairs), the score it was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evaluation.metrics import (
    coco_folds,
    full_ranking_metrics,
    n_way_recall_at_1,
    precision_recall,
    score_distribution,
    topic_precision_at_k,
)
from evaluation.neighbourhoods import (
    headline_preservation_k,
    nearest_neighbour_ranking,
    neighbour_preservation_at_ks,
    within_modality_topic_precision,
)
from models.training import encode_pairs
from pipeline.base import HashedTask
from pipeline.io import save_array, write_json
from pipeline.tasks.data import PrepareDataset, Split, read_ground_truth
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.representations import DOC_VECTORS, TrainDoc2Vec, TrainWordVectors
from pipeline.tasks.training import (
    Train,
    VariantParams,
    feature_width,
    load_pair_data,
    load_trained_model,
    trunk_inputs,
)

#: distractors are drawn with this seed for every variant and training seed, so rows compare the same task
EVAL_SEED = 0
TEST_IMAGE, TEST_TEXT, TEST_ROWS = "test_image.npy", "test_text.npy", "test_rows.npy"
#: PR curve and score-distribution arrays, kept out of metrics.json
CURVES = "curves.npz"
#: per-sample neighbour preservation at the headline k, per modality (``<name>.npy``), for the report's
#: bootstrap over test items
HEADLINE_PRESERVATION = {"image": "preservation_image_headline", "text": "preservation_text_headline"}

#: settings of the full-ranking and calibration metrics (hashed into Evaluate's output path)
FULL_EVAL = {
    "map_k": 5,
    "recall_ks": [1, 5, 10],
    # the 1K protocol (folds of 1000 images, averaged) applies from this many distinct test images (COCO 5K)
    "fold_images": 1000,
    "min_images_for_folds": 5000,
    # the PR curve sorts n^2 scores: above this many test pairs it uses a fixed-seed sample of them
    "pr_max_pairs": 5000,
    "pr_curve_points": 500,
    "score_queries": 1000,
    "score_bins": 50,
}


@dataclass
class RetrievalLayout:
    """How the test pairs map to distinct images and texts for full-gallery retrieval.

    ``protocol`` is ``"pairs"`` (every pair its own image and text), ``"captions_per_image"`` (groups
    share one image: COCO / Flickr30k captions) or ``"images_per_text"`` (groups share one text: the
    images of one GoodNews article). ``image_positions`` / ``text_positions`` are the test positions of
    the distinct items; ``image_index`` / ``text_index`` give, per test position, its item's index in
    them.
    """

    protocol: str
    image_positions: np.ndarray
    text_positions: np.ndarray
    image_index: np.ndarray
    text_index: np.ndarray


def retrieval_layout(group_ids: np.ndarray, cache_rows: np.ndarray, texts: np.ndarray) -> RetrievalLayout:
    """Detect the retrieval protocol from the test pairs' groups, image cache rows and texts.

    Groups whose pairs share neither one image nor one text (a mix) fall back to ``"pairs"``: then the
    other pairs of a group count as negatives in the full ranking (n-way R@1 still excludes them).
    """
    groups = np.asarray(group_ids)
    n = len(groups)
    own = np.arange(n)
    codes = pd.factorize(pd.Series(groups))[0]
    if codes.max(initial=-1) + 1 == n:
        return RetrievalLayout("pairs", own, own, own, own)
    # codes number groups in order of first appearance, so first[c] is the first row of group c
    first = np.unique(codes, return_index=True)[1]
    frame = pd.DataFrame({"group": codes, "image": np.asarray(cache_rows), "text": np.asarray(texts)})
    per_group = frame.groupby("group").nunique()
    if (per_group["image"] == 1).all():
        return RetrievalLayout("captions_per_image", first, own, codes, own)
    if (per_group["text"] == 1).all():
        return RetrievalLayout("images_per_text", own, first, own, codes)
    return RetrievalLayout("pairs", own, own, own, own)


def _swap_directions(metrics: dict[str, Any]) -> dict[str, Any]:
    """Rename i2t <-> t2i (and image <-> text counts) of a result computed with the modalities swapped."""
    renamed = {}
    for key, value in metrics.items():
        for a, b in (("i2t", "t2i"), ("t2i", "i2t"), ("n_images", "n_texts"), ("n_texts", "n_images")):
            if key.startswith(a):
                key = b + key[len(a) :]
                break
        renamed[key] = value
    return renamed


def full_ranking(image: np.ndarray, text: np.ndarray, layout: RetrievalLayout) -> dict[str, Any]:
    """Full-gallery Recall@K, medR, meanR, mAP@k over the distinct test items (VSE++ protocol, Bleeker §3).

    ``image`` / ``text`` are the row-aligned test embeddings. With several captions per image, an image
    query is right when any of its captions ranks high; with several images per text, the roles are
    swapped (the function ranks one side with several positives). From ``min_images_for_folds`` distinct
    gallery images on the several-positives side, the first ``fold_images * n_folds`` of them are also
    evaluated in folds of ``fold_images`` (the COCO 1K protocol) and averaged.
    """
    settings = FULL_EVAL
    swap = layout.protocol == "images_per_text"
    if swap:
        owners, members, owner_of = text[layout.text_positions], image, layout.text_index
    else:
        owners, members = image[layout.image_positions], text[layout.text_positions]
        owner_of = layout.image_index[layout.text_positions] if layout.protocol != "pairs" else None
    options = {"ks": settings["recall_ks"], "map_k": settings["map_k"]}
    result: dict[str, Any] = {"protocol": layout.protocol}
    every = full_ranking_metrics(owners, members, owner_of, **options)
    result["all"] = _swap_directions(every) if swap else every
    n_owners = len(owners)
    if n_owners >= settings["min_images_for_folds"]:
        n_folds = n_owners // settings["fold_images"]
        kept = n_folds * settings["fold_images"]
        owner_ids = np.arange(len(members)) if owner_of is None else np.asarray(owner_of)
        in_folds = owner_ids < kept
        folds = coco_folds(owners[:kept], members[in_folds], owner_ids[in_folds], n_folds, **options)
        mean = _swap_directions(folds["mean"]) if swap else folds["mean"]
        result["folds_1k"] = {"n_folds": n_folds, "fold_images": folds["fold_images"], "mean": mean}
    return result


def calibration(
    image: np.ndarray, text: np.ndarray, group_ids: np.ndarray, layout: RetrievalLayout
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Global PR curve and PR-AUC (Veit & Wilber §4.3) and text-query score distributions (§4.5, Fig. 4).

    The PR curve scores every (image row, text row) of the test pairs (positives: same group); above
    ``pr_max_pairs`` pairs a fixed-seed sample of pairs is used so the n^2 sort stays bounded. Score
    distributions take ``score_queries`` distinct test texts as queries against the distinct test
    images. Returns the JSON summary and the arrays for ``curves.npz``.
    """
    settings = FULL_EVAL
    n = len(image)
    rows = np.arange(n)
    if n > settings["pr_max_pairs"]:
        rng = np.random.default_rng(EVAL_SEED)
        rows = np.sort(rng.choice(n, size=settings["pr_max_pairs"], replace=False))
    pr = precision_recall(image[rows], text[rows], group_ids[rows], settings["pr_curve_points"])
    distribution = score_distribution(
        image[layout.image_positions],
        text[layout.text_positions],
        n_queries=settings["score_queries"],
        seed=EVAL_SEED,
        bins=settings["score_bins"],
        direction="t2i",
    )
    summary = {
        "pr": {
            "pr_auc": pr["pr_auc"],
            "n_positives": pr["n_positives"],
            "n_scores": pr["n_scores"],
            "n_pairs": int(len(rows)),
        },
        "score_distribution": {
            "direction": "t2i",
            "n_queries": int(len(distribution["query_indices"])),
            "n_bins": int(len(distribution["bin_centres"])),
            "gallery_size": int(len(layout.image_positions)),
        },
    }
    arrays = {
        "pr_precision": pr["precision"],
        "pr_recall": pr["recall"],
        "pr_thresholds": pr["thresholds"],
        **{f"score_{key}": np.asarray(value) for key, value in distribution.items()},
    }
    return summary, arrays


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
    """Neighbour preservation per modality at every usable k, from one ranking of each space.

    The ks are those of ``preservation_ks`` below n (a k of n - 1 or more is every other item), the paper's
    ``preservation_k`` capped at n - 1, and the headline k (:func:`headline_preservation_k`). Returns the
    legacy ``neighbour_preservation`` entry (the paper's k, as Table 3 always reported it), the
    ``neighbour_preservation_at_k`` entry (per k: chance level, and per modality mean and lift) and the
    per-sample arrays at the headline k, keyed as ``HEADLINE_PRESERVATION`` names them.
    """
    n = len(doc_vectors)
    paper_k = int(min(preservation_k, n - 1))
    headline_k = headline_preservation_k(preservation_ks, n, paper_ratio)
    ks = sorted({int(k) for k in preservation_ks if 1 <= k <= n - 1} | {paper_k, headline_k})
    reference_ranking = nearest_neighbour_ranking(doc_vectors, ks[-1])
    by_modality = {
        modality: neighbour_preservation_at_ks(embeddings, None, ks, reference_ranking=reference_ranking)
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
    """Table 1 (n-way R@1 both directions) and Table 3 (neighbour preservation per modality) metrics.

    ``image`` / ``text`` are ``[n, d]`` or ``[n, K, d]`` (PVSE); see :func:`similarity_summary`.
    Neighbour preservation is computed at the paper's ``preservation_k`` and at every k of
    ``preservation_ks`` (see :func:`preservation_at_ks`); with ``topics``, topic precision at ``topic_k``
    cross-modally (I→T, T→I) and within each modality (I→I, T→T, at most n - 1 neighbours).
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
    metrics["neighbour_preservation"] = legacy
    metrics["neighbour_preservation_at_k"] = at_k
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


class Evaluate(VariantParams, DatasetParams, HashedTask):
    def requires(self) -> dict[str, HashedTask]:
        return {
            "train": self.clone(Train),
            "split": self.clone(Split),
            "prepared": self.clone(PrepareDataset),
            "words": self.clone(TrainWordVectors),
            "doc2vec": self.clone(TrainDoc2Vec),
            **trunk_inputs(self, self.train_settings()),
        }

    def config(self) -> dict[str, Any]:
        return {"eval": self.settings.section("eval"), "eval_seed": EVAL_SEED, "full_eval": FULL_EVAL}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = {name: self.input_dir(task) for name, task in self.requires().items()}
        t = self.train_settings()
        data, manifest = load_pair_data(
            inputs["split"], inputs["prepared"], inputs["words"], t.max_text_tokens, inputs.get("features")
        )
        model, best_epoch = load_trained_model(
            self.variant_spec(), t, inputs["words"], inputs["train"], feature_width(data)
        )
        test_rows = np.flatnonzero((manifest["split"] == "test").to_numpy())
        image, text = encode_pairs(model, data, test_rows, t.image_size)
        doc_vectors = np.load(inputs["doc2vec"] / DOC_VECTORS)[test_rows]
        topics = None
        ground_truth = read_ground_truth(inputs["prepared"])
        if ground_truth is not None and "topic" in ground_truth.columns:
            topic_of = dict(zip(ground_truth["pair_id"], ground_truth["topic"], strict=True))
            topics = manifest["pair_id"].iloc[test_rows].map(topic_of).to_numpy()
        e = self.settings.eval
        metrics, arrays = evaluate_embeddings(
            image,
            text,
            doc_vectors,
            e.n_way,
            e.redraws,
            e.preservation_k,
            group_ids=data.group_ids[test_rows],
            topics=topics,
            topic_k=e.topic_k,
            preservation_ks=e.preservation_ks,
            paper_preservation_ratio=e.paper_preservation_ratio,
        )
        test_manifest = manifest.iloc[test_rows]
        layout = retrieval_layout(
            data.group_ids[test_rows], test_manifest["cache_row"].to_numpy(), test_manifest["text"].to_numpy()
        )
        metrics["full_ranking"] = full_ranking(image, text, layout)
        calibration_summary, curves = calibration(image, text, data.group_ids[test_rows], layout)
        metrics.update(calibration_summary)
        metrics.update(
            {
                "variant": self.variant,
                "label": self.variant_spec()["label"],
                "seed": self.seed,
                "best_epoch": best_epoch,
                "n_test": len(test_rows),
            }
        )
        save_array(work_dir / TEST_IMAGE, image)
        save_array(work_dir / TEST_TEXT, text)
        save_array(work_dir / TEST_ROWS, test_rows)
        for name, value in arrays.items():
            save_array(work_dir / f"{name}.npy", value)
        with open(work_dir / CURVES, "wb") as handle:
            np.savez_compressed(handle, **curves)
        write_json(work_dir / "metrics.json", metrics)
        return metrics
