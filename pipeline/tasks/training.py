"""Cross-modal training of one method variant with one seed (paper §3.2–3.3)."""

from __future__ import annotations

from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import luigi
import numpy as np
import torch
from luigi.freezing import recursively_unfreeze
from torch import nn

from models.encoders import EncoderConfig, build_model, model_class
from models.losses import build_loss
from models.training import BEST_CHECKPOINT, HISTORY_FILE, PairData, Trainer, pick_device
from pipeline.base import META_FILE, HashedTask
from pipeline.io import read_json
from pipeline.profiles import TrainSettings
from pipeline.steps.neighbors import sampling_pool
from pipeline.steps.text import encode_texts, tokenize
from pipeline.tasks.data import (
    PrepareDataset,
    Split,
    integer_group_ids,
    load_prepared_images,
    read_manifest,
)
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.representations import (
    DISTANCES,
    NEIGHBORS,
    TRAIN_ROWS,
    NeighborTables,
    TrainWordVectors,
    load_trunk_features,
    load_vocabulary,
    trunk_features_task,
)
from pipeline.variants import resolve_variant


class VariantParams:
    variant = luigi.Parameter(default="ours", description="method variant (pipeline/variants.py)")
    variant_overrides = luigi.DictParameter(
        default={}, description='loss parameter changes, e.g. {"within_modality": {"alpha": 0.5}}'
    )
    seed = luigi.IntParameter(default=0, description="training seed (model init, batches, flips)")

    def variant_spec(self) -> dict[str, Any]:
        return resolve_variant(
            self.variant, recursively_unfreeze(self.variant_overrides), self.settings.loss_defaults
        )

    def train_settings(self) -> TrainSettings:
        """The profile's training settings with this variant's ``train`` overrides applied."""
        overrides = self.variant_spec().get("train", {})
        unknown = set(overrides) - {f.name for f in fields(TrainSettings)}
        if unknown:
            raise KeyError(
                f"unknown training settings {sorted(unknown)}; see TrainSettings in pipeline/profiles.py"
            )
        return replace(self.settings.train, **overrides)


def encoder_config(
    t: TrainSettings, word_vectors: np.ndarray, feature_dim: int | None = None
) -> EncoderConfig:
    """Encoder sizes from the training settings; word dimension and vocabulary from the word vectors."""
    vocab_size, word_dim = word_vectors.shape
    return EncoderConfig(
        backbone=t.backbone,
        pretrained=t.pretrained,
        embed_dim=t.embed_dim,
        word_dim=word_dim,
        gru_hidden=t.gru_hidden,
        vocab_size=vocab_size,
        trunk=t.trunk,
        feature_dim=feature_dim,
    )


def load_pair_data(
    split_dir: Path,
    prepared_dir: Path,
    words_dir: Path,
    max_tokens: int,
    features_dir: Path | None = None,
) -> tuple[PairData, Any]:
    """Tokenised texts, the image cache and, for a frozen trunk, its cached features (``features_dir``)."""
    manifest = read_manifest(split_dir)
    vocab, _ = load_vocabulary(words_dir)
    tokens, lengths = encode_texts((tokenize(t) for t in manifest["text"]), vocab, max_tokens)
    data = PairData(
        images=load_prepared_images(prepared_dir),
        image_rows=manifest["cache_row"].to_numpy(),
        tokens=tokens,
        lengths=lengths,
        group_ids=integer_group_ids(manifest).to_numpy(),
        image_features=None if features_dir is None else load_trunk_features(features_dir),
    )
    return data, manifest


def model_needs_spatial_features(spec: dict[str, Any]) -> bool:
    """Whether the variant's model attends over the trunk's feature map (PVSE) rather than its pooled vector."""
    return bool(getattr(model_class(spec["model"]), "needs_spatial_features", False))


def trunk_inputs(task: VariantParams, t: TrainSettings) -> dict[str, HashedTask]:
    """The cached trunk features a frozen-trunk variant trains and is evaluated on (nothing when fine-tuned)."""
    if t.trunk != "frozen":
        return {}
    return {
        "features": trunk_features_task(task, t, spatial=model_needs_spatial_features(task.variant_spec()))
    }


def build_variant_model(
    spec: dict[str, Any], t: TrainSettings, word_vectors: np.ndarray, feature_dim: int | None = None
) -> nn.Module:
    config = encoder_config(t, word_vectors, feature_dim)
    return build_model(spec["model"], config, word_vectors, **spec["model_options"])


def load_neighbor_table(neighbors_dir: Path, train_positions: np.ndarray, sample_k: int | None) -> np.ndarray:
    """The pool each train pair's neighbour i' is drawn from: the first ``sample_k`` non-duplicate entries of
    NeighborTables' k-NN table (all k with ``None``), checked to be over exactly these train pairs."""
    if not np.array_equal(np.load(neighbors_dir / TRAIN_ROWS), train_positions):
        raise RuntimeError("neighbour table rows do not match the train split; rerun NeighborTables")
    return sampling_pool(np.load(neighbors_dir / NEIGHBORS), np.load(neighbors_dir / DISTANCES), sample_k)


def feature_width(data: PairData) -> int | None:
    return None if data.image_features is None else int(data.image_features.shape[1])


def load_trained_model(
    spec: dict[str, Any], t: TrainSettings, words_dir: Path, train_dir: Path, feature_dim: int | None = None
) -> tuple[nn.Module, int]:
    """The variant's model with the best checkpoint of its Train task loaded (on the automatic device), and
    the epoch of that checkpoint."""
    _, word_vectors = load_vocabulary(words_dir)
    model = build_variant_model(spec, t, word_vectors, feature_dim)
    state = torch.load(train_dir / BEST_CHECKPOINT, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    return model.to(pick_device()), state["epoch"]


def imagenet_weights_loaded(model: nn.Module, features_dir: Path | None) -> bool:
    """Whether the image trunk started from ImageNet weights: the cached features' record when frozen."""
    if features_dir is not None:
        return bool(read_json(Path(features_dir) / META_FILE)["summary"]["imagenet_weights_loaded"])
    encoder = model.image_encoder
    return bool(getattr(getattr(encoder, "cnn", encoder), "pretrained_loaded", False))


class Train(VariantParams, DatasetParams, HashedTask):
    """Trains a variant; keeps the best checkpoint by validation loss; resumes a killed run."""

    resumable = True

    def requires(self) -> dict[str, HashedTask]:
        required = {
            "split": self.clone(Split),
            "prepared": self.clone(PrepareDataset),
            "words": self.clone(TrainWordVectors),
        }
        source = self.variant_spec()["neighbor_source"]
        if source:
            required["neighbors"] = self.clone(NeighborTables, space=source)
        required.update(trunk_inputs(self, self.train_settings()))
        return required

    def config(self) -> dict[str, Any]:
        spec = self.variant_spec()
        spec.pop("label")  # presentation only
        spec.pop("train", None)  # resolved into "train" below
        return {
            "variant": spec,
            "train": asdict(self.train_settings()),
            "neighbor_sample_k": self.settings.neighbors.sample_k if spec["neighbor_source"] else None,
            "seed": self.seed,
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = {name: self.input_dir(task) for name, task in self.requires().items()}
        t = self.train_settings()
        data, manifest = load_pair_data(
            inputs["split"], inputs["prepared"], inputs["words"], t.max_text_tokens, inputs.get("features")
        )
        _, word_vectors = load_vocabulary(inputs["words"])
        split = manifest["split"].to_numpy()
        train_positions = np.flatnonzero(split == "train")
        sample_k = self.settings.neighbors.sample_k
        neighbors = (
            load_neighbor_table(inputs["neighbors"], train_positions, sample_k)
            if "neighbors" in inputs
            else None
        )
        spec = self.variant_spec()
        torch.manual_seed(self.seed)
        model = build_variant_model(spec, t, word_vectors, feature_width(data))
        losses = [build_loss(loss["name"], **loss["params"]) for loss in spec["losses"]]
        trainer = Trainer(
            model,
            losses,
            data,
            train_positions,
            np.flatnonzero(split == "val"),
            t,
            self.seed,
            work_dir,
            neighbors=neighbors,
            device=pick_device(),
        )
        result = trainer.fit()
        epoch_seconds = [row["train_seconds"] for row in result.history]
        return {
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "epochs": len(result.history),
            "resumed_from_epoch": result.resumed_from_epoch,
            "mean_epoch_seconds": float(np.mean(epoch_seconds)) if epoch_seconds else None,
            "stopped_early_at": result.stopped_early_at,
            "device": str(trainer.device),
            "trunk": t.trunk,
            "imagenet_weights_loaded": imagenet_weights_loaded(model, inputs.get("features")),
            "checkpoint": BEST_CHECKPOINT,
            "history": HISTORY_FILE,
        }
