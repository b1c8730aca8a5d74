"""Test-split evaluation of one trained variant: n-way retrieval and neighbour preservation (§4.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from evaluation.metrics import n_way_recall_at_1, neighbour_preservation, topic_precision_at_k
from models.training import BEST_CHECKPOINT, encode_pairs, pick_device
from pipeline.base import HashedTask
from pipeline.io import save_array, write_json
from pipeline.tasks.data import PrepareDataset, Split, read_ground_truth
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.representations import DOC_VECTORS, TrainDoc2Vec, TrainWordVectors, load_vocabulary
from pipeline.tasks.training import Train, VariantParams, build_variant_model, load_pair_data

#: distractors are drawn with this seed for every variant and training seed, so rows compare the same task
EVAL_SEED = 0
TEST_IMAGE, TEST_TEXT, TEST_ROWS = "test_image.npy", "test_text.npy", "test_rows.npy"


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
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Table 1 (n-way R@1 both directions) and Table 3 (neighbour preservation per modality) metrics."""
    retrieval = n_way_recall_at_1(
        image, text, n_way, EVAL_SEED, redraws, group_ids=group_ids, return_hits=True
    )
    hits = {"i2t_hits": retrieval.pop("i2t_hits"), "t2i_hits": retrieval.pop("t2i_hits")}
    metrics: dict[str, Any] = {"retrieval": retrieval}
    preservation = {}
    for modality, embeddings in (("image", image), ("text", text)):
        result = neighbour_preservation(embeddings, doc_vectors, preservation_k)
        result.pop("per_sample")
        preservation[modality] = result
    metrics["neighbour_preservation"] = preservation
    if topics is not None:
        metrics["topic_precision"] = {
            "k": topic_k,
            "i2t": topic_precision_at_k(image, text, topics, topics, topic_k),
            "t2i": topic_precision_at_k(text, image, topics, topics, topic_k),
        }
    return metrics, hits


class Evaluate(VariantParams, DatasetParams, HashedTask):
    def requires(self) -> dict[str, HashedTask]:
        return {
            "train": self.clone(Train),
            "split": self.clone(Split),
            "prepared": self.clone(PrepareDataset),
            "words": self.clone(TrainWordVectors),
            "doc2vec": self.clone(TrainDoc2Vec),
        }

    def config(self) -> dict[str, Any]:
        return {"eval": self.settings.section("eval"), "eval_seed": EVAL_SEED}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = {name: self.input_dir(task) for name, task in self.requires().items()}
        t = self.settings.train
        data, manifest = load_pair_data(
            inputs["split"], inputs["prepared"], inputs["words"], t.max_text_tokens
        )
        _, word_vectors = load_vocabulary(inputs["words"])
        model = build_variant_model(self.variant_spec(), self.settings, word_vectors)
        state = torch.load(inputs["train"] / BEST_CHECKPOINT, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        model.to(pick_device())
        test_rows = np.flatnonzero((manifest["split"] == "test").to_numpy())
        image, text = encode_pairs(model, data, test_rows, t.image_size)
        doc_vectors = np.load(inputs["doc2vec"] / DOC_VECTORS)[test_rows]
        topics = None
        ground_truth = read_ground_truth(inputs["prepared"])
        if ground_truth is not None and "topic" in ground_truth.columns:
            topic_of = dict(zip(ground_truth["pair_id"], ground_truth["topic"], strict=True))
            topics = manifest["pair_id"].iloc[test_rows].map(topic_of).to_numpy()
        e = self.settings.eval
        metrics, hits = evaluate_embeddings(
            image,
            text,
            doc_vectors,
            e.n_way,
            e.redraws,
            e.preservation_k,
            group_ids=data.group_ids[test_rows],
            topics=topics,
            topic_k=e.topic_k,
        )
        metrics.update(
            {
                "variant": self.variant,
                "label": self.variant_spec()["label"],
                "seed": self.seed,
                "best_epoch": state["epoch"],
                "n_test": len(test_rows),
            }
        )
        save_array(work_dir / TEST_IMAGE, image)
        save_array(work_dir / TEST_TEXT, text)
        save_array(work_dir / TEST_ROWS, test_rows)
        for name, value in hits.items():
            save_array(work_dir / f"{name}.npy", value)
        write_json(work_dir / "metrics.json", metrics)
        return metrics
