"""Representations computed before cross-modal training: Doc2Vec (Ω), word vectors for the GRU, image-trunk
features, and the k-NN tables of Eq. 5 over Doc2Vec and over the trunk's pooled features.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi
import numpy as np

from models.cached_views import CachedViews
from models.settings import TrainSettings
from pipeline.config.checks import RunConfigurationError, check_backbone, check_trunk_stages
from pipeline.steps.doc2vec import document_vectors, train_doc2vec
from pipeline.steps.features import trunk_feature_batches
from pipeline.steps.neighbors import (
    annoy_neighbor_table,
    recall_against_exact,
    same_topic_share,
    sampling_pool,
)
from pipeline.steps.text import tokenize, vocabulary_coverage
from pipeline.steps.word_vectors import train_word_vectors
from pipeline.tasks.base import IdentityIntParameter, PipelineTask
from pipeline.tasks.data import PrepareDataset, Split, check_split_fits
from task_engine.gpus import task_device
from task_engine.outputs import save_array, save_array_blocks, save_frame, write_json
from task_engine.task import HashedTask

#: the spaces NeighborTables finds neighbors in
SPACES = ("text", "image")


class TrainDoc2Vec(PipelineTask):
    """gensim Doc2Vec on train texts; a vector for every pair (trained for train, inferred otherwise)."""

    tokenizes = True
    outputs = {"doc_vectors": "doc_vectors.npy", "model": "doc2vec.model"}

    def requires(self) -> Split:
        return self.clone(Split)

    def config(self) -> dict[str, Any]:
        return {"doc2vec": self.settings.section("doc2vec"), "seed": self.run_plan.data_seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = self.requires().manifest()
        tokens = [tokenize(text) for text in manifest["text"]]
        is_train = (manifest["split"] == "train").to_numpy()
        train_tokens = [t for t, train in zip(tokens, is_train, strict=True) if train]
        other_tokens = [t for t, train in zip(tokens, is_train, strict=True) if not train]
        settings = self.settings.doc2vec
        model = train_doc2vec(train_tokens, settings, self.run_plan.data_seed)
        train_vectors, other_vectors = document_vectors(
            model, train_tokens, other_tokens, settings.infer_epochs
        )
        vectors = np.zeros((len(manifest), settings.vector_size), dtype=np.float32)
        vectors[is_train] = train_vectors
        vectors[~is_train] = other_vectors
        save_array(self.work_path(work_dir, "doc_vectors"), vectors)
        model.save(str(self.work_path(work_dir, "model")))
        return {"n_documents": len(vectors), "n_train": int(is_train.sum()), "vocab_size": len(model.wv)}


class TrainWordVectors(PipelineTask):
    """200-d word vectors on train texts (vocabulary from train only) to initialise the GRU."""

    tokenizes = True
    outputs = {"word_vectors": "word_vectors.npy", "vocab": "vocab.json", "coverage": "coverage.json"}

    def requires(self) -> Split:
        return self.clone(Split)

    def config(self) -> dict[str, Any]:
        return {"word_vectors": self.settings.section("word_vectors"), "seed": self.run_plan.data_seed}

    def vocabulary(self) -> tuple[dict[str, int], np.ndarray]:
        """Token -> row of the word-vector matrix, and the matrix (rows 0 and 1: padding and unknown)."""
        return self.load("vocab"), self.load("word_vectors")

    def produce(self, work_dir: Path) -> dict[str, Any]:
        manifest = self.requires().manifest()
        tokens = [tokenize(t) for t in manifest["text"]]
        split = manifest["split"].to_numpy()
        vocab, matrix = train_word_vectors(
            [t for t, s in zip(tokens, split, strict=True) if s == "train"], self.settings.word_vectors, self.run_plan.data_seed
        )
        # how well the train vocabulary covers each split: a user sees at once when it does not fit the data
        coverage = {
            name: vocabulary_coverage([t for t, s in zip(tokens, split, strict=True) if s == name], vocab)
            for name in ("train", "val", "test")
        }
        save_array(self.work_path(work_dir, "word_vectors"), matrix)
        write_json(self.work_path(work_dir, "vocab"), vocab)
        write_json(self.work_path(work_dir, "coverage"), coverage)
        return {"vocab_size": len(vocab) + 2, "dim": int(matrix.shape[1]), "coverage": coverage}


class TrunkFeatures(PipelineTask):
    """Image-trunk features of every cached image, computed once per dataset x backbone x resolution and
    reused by every variant and seed that trains on a cached trunk and by the image-neighbor table.
    ``spatial`` keeps the map before pooling (PVSE attends over its cells); otherwise the pooled vector.
    ``trained_stages`` k >= 1: the float32 map under the trunk's top k stages instead, which a ``top<k>`` model
    trains on (those stages are the model's).
    """

    backbone = luigi.Parameter(description="trunk name (models/backbones.py)")
    pretrained = luigi.BoolParameter(default=True, parsing=luigi.BoolParameter.EXPLICIT_PARSING)
    image_size = IdentityIntParameter(description="side in pixels the cached images are resized to")
    spatial = luigi.BoolParameter(default=False, parsing=luigi.BoolParameter.EXPLICIT_PARSING)
    trained_stages = IdentityIntParameter(default=0, description="cache the map under the trunk's top k stages (0: all)")
    views = IdentityIntParameter(default=1, description="views cached per image under trained stages (1: the image itself)")
    crop_scale = luigi.FloatParameter(
        default=TrainSettings.trunk_crop_scale, description="the smallest area share of a cached view's crop"
    )
    outputs = {"features": "features.npy"}
    runs_network = True

    def check_identity(self) -> None:
        check_backbone(self.backbone, "--backbone")
        if self.image_size < 8:
            raise RunConfigurationError(f"--image-size {self.image_size}: must be >= 8")
        if self.trained_stages:
            check_trunk_stages(self.backbone, self.trained_stages, "--trained-stages")
        if self.views > 1 and not self.trained_stages:
            raise RunConfigurationError(f"--views {self.views}: augmented views are cached under trained stages only")
        try:
            self.cached_views()
        except ValueError as error:
            raise RunConfigurationError(f"--views / --crop-scale: {error}") from None

    def cached_views(self) -> CachedViews:
        """The views of each image this cache holds (:mod:`models.cached_views`)."""
        return CachedViews(self.views, self.crop_scale)

    def features(self) -> np.ndarray:
        """One row per image-cache row, memory-mapped: pooled ``[R, C]``, a map ``[R, C, h, w]``, or with augmented
        views a map per view ``[R, V, C, h, w]`` (view 0 the image itself)."""
        return self.load("features", mmap_mode="r")

    def requires(self) -> PrepareDataset:
        return self.clone(PrepareDataset)

    def config(self) -> dict[str, Any]:
        return {
            "backbone": self.backbone,
            "pretrained": self.pretrained,
            "image_size": self.image_size,
            "spatial": self.spatial,
            "seed": self.run_plan.data_seed,
            # only when set: the whole trunk's caches keep the paths they had before trunks could train
            **({"trained_stages": self.trained_stages} if self.trained_stages else {}),
            # only with augmented views: a cache of the image alone keeps the path it had before views existed
            **({"views": self.cached_views().record()} if self.views > 1 else {}),
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        images = self.requires().images()
        device = task_device()
        batches, trunk = trunk_feature_batches(
            images, self.backbone, self.pretrained, self.image_size, self.spatial, self.run_plan.data_seed,
            device=str(device), trained_stages=self.trained_stages, views=self.cached_views(),
        )
        # batch by batch to disk: at 1M images the pooled features alone are 5 GB
        shape, dtype = save_array_blocks(self.work_path(work_dir, "features"), len(images), batches)
        return {
            "shape": list(shape),
            "dtype": str(dtype),
            "imagenet_weights_loaded": trunk.pretrained_loaded,
            "weights_source": trunk.weights_source,
            "device": str(device),
            **({"views": self.cached_views().record()} if self.views > 1 else {}),
        }


def trunk_features_task(
    task: HashedTask, settings: TrainSettings, spatial: bool, trained_stages: int = 0
) -> TrunkFeatures:
    """The TrunkFeatures task of ``settings``' backbone and resolution, with ``task``'s dataset parameters
    (``trained_stages``: the map under that many top stages, for each of ``settings``' cached views)."""
    views = settings.trunk_views if trained_stages else 1
    return task.clone(
        TrunkFeatures,
        backbone=settings.backbone,
        pretrained=settings.pretrained,
        image_size=settings.image_size,
        spatial=spatial,
        trained_stages=trained_stages,
        views=views,
        crop_scale=settings.trunk_crop_scale if views > 1 else TrainSettings.trunk_crop_scale,
    )


class NeighborTables(PipelineTask):
    """k nearest train neighbors of every train pair (itself excluded) with Annoy, in Doc2Vec space
    (``space=text``) or initial CNN-feature space (``space=image``); recall@k against exact search.
    """

    space = luigi.Parameter(default="text", description="text (Doc2Vec space) or image (the trunk's features)")

    outputs = {
        "neighbors": "neighbors.npy",
        "distances": "distances.npy",
        "train_rows": "train_rows.npy",
        "row_pair_ids": "row_pair_ids.parquet",
        "index": "index.ann",
        "summary": "neighbors.json",
    }

    def check_identity(self) -> None:
        if self.space not in SPACES:
            raise RunConfigurationError(f"--space {self.space!r}: expected one of {', '.join(SPACES)}")

    def sampling_pool(self, train_positions: np.ndarray, sample_k: int | None) -> np.ndarray:
        """The pool each train pair's neighbor i' is drawn from: the first ``sample_k`` non-duplicate entries
        of the k-NN table (all k with ``None``), checked to be over exactly these train pairs."""
        if not np.array_equal(self.load("train_rows"), train_positions):
            raise RuntimeError("neighbor table rows do not match the train split; rerun NeighborTables")
        return sampling_pool(self.load("neighbors"), self.load("distances"), sample_k)

    def requires(self) -> dict[str, HashedTask]:
        if self.space == "text":
            source = self.clone(TrainDoc2Vec)
        else:
            source = trunk_features_task(self, self.settings.train, spatial=False)
        return {"split": self.clone(Split), "vectors": source, "prepared": self.clone(PrepareDataset)}

    def config(self) -> dict[str, Any]:
        return {"space": self.space, "neighbors": self.settings.section("neighbors"), "seed": self.run_plan.data_seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = self.requires()
        check_split_fits(inputs["split"])
        manifest = inputs["split"].manifest()
        train_rows = np.flatnonzero((manifest["split"] == "train").to_numpy())
        if self.space == "text":
            vectors = inputs["vectors"].load("doc_vectors")[train_rows]
        else:
            # one gather of the train rows from the memory-mapped features: no copy of every manifest row
            cache_rows = manifest["cache_row"].to_numpy()[train_rows]
            vectors = np.asarray(inputs["vectors"].features()[cache_rows], dtype=np.float32)
        settings = self.settings.neighbors
        table = annoy_neighbor_table(
            vectors,
            settings.k,
            settings.n_trees,
            settings.search_k,
            self.run_plan.data_seed,
            save_to=self.work_path(work_dir, "index"),
        )
        recall = recall_against_exact(vectors, table.neighbors, settings.recall_queries, self.run_plan.data_seed)
        save_array(self.work_path(work_dir, "neighbors"), table.neighbors)
        save_array(self.work_path(work_dir, "distances"), table.distances)
        save_array(self.work_path(work_dir, "train_rows"), train_rows)
        save_frame(
            self.work_path(work_dir, "row_pair_ids"),
            manifest.loc[train_rows, ["pair_id"]].reset_index(drop=True),
        )
        summary = {"annoy": table.settings, "recall_vs_exact": recall}
        ground_truth = inputs["prepared"].ground_truth()
        if ground_truth is not None and "topic" in ground_truth.columns:
            topic_of = dict(zip(ground_truth["pair_id"], ground_truth["topic"], strict=True))
            topics = manifest["pair_id"].iloc[train_rows].map(topic_of).to_numpy()
            pool = sampling_pool(table.neighbors, table.distances, settings.sample_k)
            summary["same_topic_share"] = {
                "all_k": same_topic_share(topics, table.neighbors),
                "sample_pool": same_topic_share(topics, pool),
                "sample_k": settings.sample_k,
            }
        write_json(self.work_path(work_dir, "summary"), summary)
        return summary
