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

from models.encoders import EncoderConfig, build_model
from models.losses import build_loss
from models.training import BEST_CHECKPOINT, HISTORY_FILE, PairData, Trainer, pick_device
from pipeline.base import HashedTask
from pipeline.profiles import TrainSettings
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
    NEIGHBORS,
    TRAIN_ROWS,
    NeighborTables,
    TrainWordVectors,
    load_vocabulary,
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


def encoder_config(t: TrainSettings, word_vectors: np.ndarray) -> EncoderConfig:
    """Encoder sizes from the training settings; word dimension and vocabulary from the word vectors."""
    vocab_size, word_dim = word_vectors.shape
    return EncoderConfig(
        backbone=t.backbone,
        pretrained=t.pretrained,
        embed_dim=t.embed_dim,
        word_dim=word_dim,
        gru_hidden=t.gru_hidden,
        vocab_size=vocab_size,
    )


def load_pair_data(
    split_dir: Path, prepared_dir: Path, words_dir: Path, max_tokens: int
) -> tuple[PairData, Any]:
    manifest = read_manifest(split_dir)
    vocab, _ = load_vocabulary(words_dir)
    tokens, lengths = encode_texts((tokenize(t) for t in manifest["text"]), vocab, max_tokens)
    data = PairData(
        images=load_prepared_images(prepared_dir),
        image_rows=manifest["cache_row"].to_numpy(),
        tokens=tokens,
        lengths=lengths,
        group_ids=integer_group_ids(manifest).to_numpy(),
    )
    return data, manifest


def build_variant_model(spec: dict[str, Any], t: TrainSettings, word_vectors: np.ndarray) -> nn.Module:
    return build_model(spec["model"], encoder_config(t, word_vectors), word_vectors, **spec["model_options"])


def load_neighbor_table(neighbors_dir: Path, train_positions: np.ndarray) -> np.ndarray:
    """The k-NN table of NeighborTables, checked to be over exactly these train pairs."""
    if not np.array_equal(np.load(neighbors_dir / TRAIN_ROWS), train_positions):
        raise RuntimeError("neighbour table rows do not match the train split; rerun NeighborTables")
    return np.load(neighbors_dir / NEIGHBORS)


def load_trained_model(
    spec: dict[str, Any], t: TrainSettings, words_dir: Path, train_dir: Path
) -> tuple[nn.Module, int]:
    """The variant's model with the best checkpoint of its Train task loaded (on the automatic device), and
    the epoch of that checkpoint."""
    _, word_vectors = load_vocabulary(words_dir)
    model = build_variant_model(spec, t, word_vectors)
    state = torch.load(train_dir / BEST_CHECKPOINT, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    return model.to(pick_device()), state["epoch"]


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
        return required

    def config(self) -> dict[str, Any]:
        spec = self.variant_spec()
        spec.pop("label")  # presentation only
        spec.pop("train", None)  # resolved into "train" below
        return {"variant": spec, "train": asdict(self.train_settings()), "seed": self.seed}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = {name: self.input_dir(task) for name, task in self.requires().items()}
        t = self.train_settings()
        data, manifest = load_pair_data(
            inputs["split"], inputs["prepared"], inputs["words"], t.max_text_tokens
        )
        _, word_vectors = load_vocabulary(inputs["words"])
        split = manifest["split"].to_numpy()
        train_positions = np.flatnonzero(split == "train")
        neighbors = (
            load_neighbor_table(inputs["neighbors"], train_positions) if "neighbors" in inputs else None
        )
        spec = self.variant_spec()
        torch.manual_seed(self.seed)
        model = build_variant_model(spec, t, word_vectors)
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
            "device": str(trainer.device),
            "imagenet_weights_loaded": bool(getattr(model.image_encoder, "pretrained_loaded", False)),
            "checkpoint": BEST_CHECKPOINT,
            "history": HISTORY_FILE,
        }
