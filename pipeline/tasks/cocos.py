"""COCOS of one trained variant (Bleeker & de Rijke 2022, §4–5): with the best checkpoint frozen, count per
training batch how many candidates contribute to each loss's gradient w.r.t. the query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from evaluation.metrics import cocos_summary
from models.batching import BatchSampler
from models.losses import build_loss
from models.losses.base import Loss
from models.training import PairData, loss_inputs
from pipeline.base import HashedTask
from pipeline.io import write_json
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.training import (
    Train,
    VariantParams,
    feature_width,
    load_neighbor_table,
    load_pair_data,
    load_trained_model,
)

#: Bleeker & de Rijke §5: the one hyper-parameter of COCOS, the weight below which a candidate is negligible
COCOS_EPS = 0.01
#: batches are drawn with this seed for every variant, so variants without neighbours see the same batches
COCOS_SEED = 0
COCOS_FILE = "cocos.json"
# the losses spell the COCOS threshold in one of these attributes
_EPS_ATTRIBUTES = ("cocos_eps", "diagnostic_eps")


@torch.no_grad()
def collect_cocos(
    model: torch.nn.Module,
    losses: list[torch.nn.Module],
    data: PairData,
    sampler: BatchSampler,
    image_size: int,
    device: torch.device,
) -> dict[str, dict[str, Any]]:
    """One pass of ``sampler`` (an epoch of training-size batches, neighbours sampled as in training) through
    the frozen ``model`` (eval mode: no dropout, no flips); per loss, :func:`cocos_summary` of the
    per-batch ``diagnostics()`` of that loss. Losses that report no diagnostics are left out; the model may
    give ``[B, D]`` or, as PVSE does, ``[B, K, D]`` embeddings (each loss reads what it was trained on).
    """
    # a loss that keeps the base class's diagnostics() reports nothing, so when no loss overrides it the
    # pass over the training set is skipped: its result would be empty anyway
    losses = [loss for loss in losses if type(loss).diagnostics is not Loss.diagnostics]
    if not losses:
        return {}
    model.eval()
    # a copy: group ids may be a read-only array (pandas copy-on-write), which torch.from_numpy would share
    group_ids = torch.tensor(np.asarray(data.group_ids, dtype=np.int64))
    per_loss: dict[str, list[dict[str, np.ndarray]]] = {loss.name: [] for loss in losses}
    for batch in sampler.epoch():
        images = data.image_batch(batch.rows, image_size).to(device)
        tokens, lengths = data.text_batch(batch.rows)
        outputs = model(images, tokens.to(device), lengths)
        inputs = loss_inputs(outputs, batch, group_ids[batch.rows].to(device))
        for loss in losses:
            diagnostics = loss.diagnostics(**inputs)
            if diagnostics:
                per_loss[loss.name].append({k: v.detach().cpu().numpy() for k, v in diagnostics.items()})
    return {name: cocos_summary(batches) for name, batches in per_loss.items() if batches}


class Cocos(VariantParams, DatasetParams, HashedTask):
    """COCOS over the training set at the best checkpoint (Bleeker & de Rijke §5), eps = 0.01."""

    def requires(self) -> dict[str, HashedTask]:
        train = self.clone(Train)
        return {**train.requires(), "train": train}

    def config(self) -> dict[str, Any]:
        return {"eps": COCOS_EPS, "sampling_seed": COCOS_SEED}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = {name: self.input_dir(task) for name, task in self.requires().items()}
        t = self.train_settings()
        data, manifest = load_pair_data(
            inputs["split"], inputs["prepared"], inputs["words"], t.max_text_tokens, inputs.get("features")
        )
        train_positions = np.flatnonzero((manifest["split"] == "train").to_numpy())
        spec = self.variant_spec()
        losses = [build_loss(loss["name"], **loss["params"]) for loss in spec["losses"]]
        for loss in losses:
            for attribute in _EPS_ATTRIBUTES:
                if hasattr(loss, attribute):
                    setattr(loss, attribute, COCOS_EPS)
        neighbors = None
        if any(loss.needs_neighbors for loss in losses):
            if "neighbors" not in inputs:
                raise ValueError(
                    f"variant {self.variant!r} has a loss that needs semantic neighbours but no neighbor_source"
                )
            neighbors = load_neighbor_table(
                inputs["neighbors"], train_positions, self.settings.neighbors.sample_k
            )
        model, best_epoch = load_trained_model(spec, t, inputs["words"], inputs["train"], feature_width(data))
        device = next(model.parameters()).device
        losses = [loss.to(device) for loss in losses]
        sampler = BatchSampler(
            train_positions, t.batch_size, np.random.default_rng(COCOS_SEED), neighbors, t.neighbor_mode
        )
        summary = collect_cocos(model, losses, data, sampler, t.image_size, device)
        result = {
            "variant": self.variant,
            "seed": self.seed,
            "best_epoch": best_epoch,
            "eps": COCOS_EPS,
            "batch_size": t.batch_size,
            "losses": summary,
        }
        write_json(work_dir / COCOS_FILE, result)
        return result
