"""Representations computed before cross-modal training: Doc2Vec (Ω), word vectors for the GRU, initial
CNN features, and the k-NN tables of Eq. 5 over both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi
import numpy as np

from pipeline.base import HashedTask
from pipeline.io import read_json, save_array, save_frame, write_json
from pipeline.steps.doc2vec import document_vectors, train_doc2vec
from pipeline.steps.features import backbone_features
from pipeline.steps.neighbors import annoy_neighbor_table, recall_against_exact
from pipeline.steps.text import tokenize
from pipeline.steps.word_vectors import train_word_vectors
from pipeline.tasks.data import PrepareDataset, Split, load_prepared_images, read_manifest
from pipeline.tasks.params import DatasetParams

DOC_VECTORS = "doc_vectors.npy"
WORD_VECTORS = "word_vectors.npy"
VOCAB = "vocab.json"
FEATURES = "features.npy"
NEIGHBORS = "neighbors.npy"
TRAIN_ROWS = "train_rows.npy"


class TrainDoc2Vec(DatasetParams, HashedTask):
    """gensim Doc2Vec on train texts; a vector for every pair (trained for train, inferred otherwise)."""

    def requires(self) -> Split:
        return self.clone(Split)

    def config(self) -> dict[str, Any]:
        return {"doc2vec": self.settings.section("doc2vec"), "seed": self.data_seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = read_manifest(self.input_dir(self.requires()))
        tokens = [tokenize(text) for text in manifest["text"]]
        is_train = (manifest["split"] == "train").to_numpy()
        train_tokens = [t for t, train in zip(tokens, is_train, strict=True) if train]
        other_tokens = [t for t, train in zip(tokens, is_train, strict=True) if not train]
        settings = self.settings.doc2vec
        model = train_doc2vec(train_tokens, settings, self.data_seed)
        train_vectors, other_vectors = document_vectors(
            model, train_tokens, other_tokens, settings.infer_epochs
        )
        vectors = np.zeros((len(manifest), settings.vector_size), dtype=np.float32)
        vectors[is_train] = train_vectors
        vectors[~is_train] = other_vectors
        save_array(work_dir / DOC_VECTORS, vectors)
        model.save(str(work_dir / "doc2vec.model"))
        return {"n_documents": len(vectors), "n_train": int(is_train.sum()), "vocab_size": len(model.wv)}


class TrainWordVectors(DatasetParams, HashedTask):
    """200-d word vectors on train texts (vocabulary from train only) to initialise the GRU."""

    def requires(self) -> Split:
        return self.clone(Split)

    def config(self) -> dict[str, Any]:
        return {"word_vectors": self.settings.section("word_vectors"), "seed": self.data_seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = read_manifest(self.input_dir(self.requires()))
        train_texts = manifest.loc[manifest["split"] == "train", "text"]
        vocab, matrix = train_word_vectors(
            [tokenize(t) for t in train_texts], self.settings.word_vectors, self.data_seed
        )
        save_array(work_dir / WORD_VECTORS, matrix)
        write_json(work_dir / VOCAB, vocab)
        return {"vocab_size": len(vocab) + 2, "dim": int(matrix.shape[1])}


def load_vocabulary(task_dir: Path) -> tuple[dict[str, int], np.ndarray]:
    return read_json(Path(task_dir) / VOCAB), np.load(Path(task_dir) / WORD_VECTORS)


class ImageFeatures(DatasetParams, HashedTask):
    """Average-pooled features of the initial image backbone for every pair's image."""

    def requires(self) -> dict[str, HashedTask]:
        return {"split": self.clone(Split), "prepared": self.clone(PrepareDataset)}

    def config(self) -> dict[str, Any]:
        t = self.settings.train
        return {
            "backbone": t.backbone,
            "pretrained": t.pretrained,
            "image_size": t.image_size,
            "seed": self.data_seed,
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = read_manifest(self.input_dir(self.requires()["split"]))
        images = load_prepared_images(self.input_dir(self.requires()["prepared"]))
        t = self.settings.train
        features, loaded = backbone_features(
            images, manifest["cache_row"].to_numpy(), t.backbone, t.pretrained, t.image_size, self.data_seed
        )
        save_array(work_dir / FEATURES, features)
        return {"shape": list(features.shape), "imagenet_weights_loaded": loaded}


class NeighborTables(DatasetParams, HashedTask):
    """k nearest train neighbours of every train pair (itself excluded) with Annoy, in Doc2Vec space
    (``space=text``) or initial CNN-feature space (``space=image``); recall@k against exact search.
    """

    space = luigi.ChoiceParameter(choices=["text", "image"], default="text")

    def requires(self) -> dict[str, HashedTask]:
        source = self.clone(TrainDoc2Vec) if self.space == "text" else self.clone(ImageFeatures)
        return {"split": self.clone(Split), "vectors": source}

    def config(self) -> dict[str, Any]:
        return {"space": self.space, "neighbors": self.settings.section("neighbors"), "seed": self.data_seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = read_manifest(self.input_dir(self.requires()["split"]))
        name = DOC_VECTORS if self.space == "text" else FEATURES
        vectors = np.load(self.input_dir(self.requires()["vectors"]) / name)
        train_rows = np.flatnonzero((manifest["split"] == "train").to_numpy())
        settings = self.settings.neighbors
        table = annoy_neighbor_table(
            vectors[train_rows],
            settings.k,
            settings.n_trees,
            settings.search_k,
            self.data_seed,
            save_to=work_dir / "index.ann",
        )
        recall = recall_against_exact(
            vectors[train_rows], table.neighbors, settings.recall_queries, self.data_seed
        )
        save_array(work_dir / NEIGHBORS, table.neighbors)
        save_array(work_dir / TRAIN_ROWS, train_rows)
        save_frame(
            work_dir / "row_pair_ids.parquet", manifest.loc[train_rows, ["pair_id"]].reset_index(drop=True)
        )
        summary = {"annoy": table.settings, "recall_vs_exact": recall}
        write_json(work_dir / "neighbors.json", summary)
        return summary
