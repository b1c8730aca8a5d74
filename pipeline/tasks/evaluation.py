"""The Evaluate task: encode one trained variant's test split and write every metric of it.

Why the task holds only loading, encoding and writing: the metrics themselves are computed from arrays by
:func:`evaluation.evaluate.evaluate_test_split` (n-way retrieval, neighbor preservation, topic precision,
full ranking and calibration), which tests can call without training a model. The fixed protocol behind
them (:data:`evaluation.protocol.EVAL_SEED`, :data:`evaluation.protocol.FULL_EVAL`) is hashed into the
task's output path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from data_recipes.manifest import image_ids
from evaluation.evaluate import HEADLINE_PRESERVATION, evaluate_test_split, topics_of_pairs
from evaluation.protocol import EVAL_SEED, FULL_EVAL, METRICS_SCHEMA
from models.inference import embed_pairs
from pipeline.tasks.base import PipelineTask
from pipeline.tasks.data import check_split_fits
from pipeline.tasks.representations import TrainDoc2Vec
from pipeline.tasks.train_inputs import load_pair_data, load_trained_model, pair_inputs, trunk_inputs
from pipeline.tasks.training import Train, VariantParams
from task_engine.gpus import task_device
from task_engine.outputs import save_array, write_json
from task_engine.task import HashedTask


class Evaluate(VariantParams, PipelineTask):
    """Encodes the test split with one trained (variant, seed) and writes ``metrics.json``, the test
    embeddings, the per-item arrays the report bootstraps and the calibration curves."""

    tokenizes = True
    outputs = {
        "metrics": "metrics.json",
        "test_image": "test_image.npy",
        "test_text": "test_text.npy",
        "test_rows": "test_rows.npy",
        # PR curve and score-distribution arrays, kept out of metrics.json
        "curves": "curves.npz",
        # per test item, what the report bootstraps
        "i2t_hits": "i2t_hits.npy",
        "t2i_hits": "t2i_hits.npy",
        **{name: f"{name}.npy" for name in HEADLINE_PRESERVATION.values()},
    }

    def requires(self) -> dict[str, HashedTask]:
        return {
            "train": self.clone(Train),
            **pair_inputs(self),
            "doc2vec": self.clone(TrainDoc2Vec),
            **trunk_inputs(self, self.train_settings()),
        }

    def config(self) -> dict[str, Any]:
        return {
            "eval": self.settings.section("eval"),
            "eval_seed": EVAL_SEED,
            "full_eval": FULL_EVAL,
            "metrics_schema": METRICS_SCHEMA,
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = self.requires()
        check_split_fits(inputs["split"])
        t = self.train_settings()
        data, manifest = load_pair_data(inputs, t.max_text_tokens)
        model, best_epoch = load_trained_model(inputs)
        device = task_device()
        test_rows = np.flatnonzero((manifest["split"] == "test").to_numpy())
        embedded = embed_pairs(model, device, data, test_rows, t.image_size)
        image, text = embedded["image"], embedded["text"]
        doc_vectors = inputs["doc2vec"].load("doc_vectors")[test_rows]
        test_manifest = manifest.iloc[test_rows]
        e = self.settings.eval
        metrics, arrays, curves = evaluate_test_split(
            image,
            text,
            doc_vectors,
            group_ids=data.group_ids[test_rows],
            image_ids=image_ids(test_manifest),
            texts=test_manifest["text"].to_numpy(),
            topics=topics_of_pairs(inputs["prepared"].ground_truth(), test_manifest["pair_id"]),
            **e.test_split_options(),
        )
        metrics.update(
            {
                "variant": self.variant,
                "label": self.variant_spec().label,
                "seed": self.seed,
                "best_epoch": best_epoch,
                "n_test": len(test_rows),
            }
        )
        for name, value in {"test_image": image, "test_text": text, "test_rows": test_rows, **arrays}.items():
            save_array(self.work_path(work_dir, name), value)
        with open(self.work_path(work_dir, "curves"), "wb") as handle:
            np.savez_compressed(handle, **curves)
        write_json(self.work_path(work_dir, "metrics"), metrics)
        return {**metrics, "device": str(device)}
