"""COCOS of one trained variant (Bleeker & de Rijke 2022, §4–5): with the best checkpoint frozen, count per
training batch how many candidates contribute to each loss's gradient w.r.t. the query.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evaluation.cocos import cocos_per_loss
from models.batching import BatchSampler
from models.inference import forward_batches
from models.losses import Loss, build_loss
from models.losses.checks import COCOS_EPS
from models.training import PairData, batch_loss_inputs
from pipeline.config.variant_spec import LossSpec
from pipeline.tasks.base import PipelineTask
from pipeline.tasks.train_inputs import load_pair_data, load_trained_model
from pipeline.tasks.training import Train, VariantParams
from task_engine.outputs import write_json
from task_engine.task import HashedTask

#: batches are drawn with this seed for every variant, so variants without neighbors see the same batches
COCOS_SEED = 0


def frozen_model_batches(
    model: torch.nn.Module,
    data: PairData,
    sampler: BatchSampler,
    image_size: int,
    device: torch.device,
    mask_neighbor_pairs: bool = True,
) -> Iterator[dict[str, torch.Tensor]]:
    """The loss keywords of each batch of one pass of ``sampler`` (an epoch of training-size batches,
    neighbors sampled as in training) through the frozen ``model`` (eval mode: no dropout, no flips), by the
    one inference path (:func:`models.inference.forward_batches`). The model may give ``[B, D]`` or, as PVSE
    does, ``[B, K, D]`` embeddings (each loss reads what it was trained on). Lazy: nothing runs, and the
    model is not switched to eval mode, until the first batch is asked for.
    """
    # a copy: group ids may be a read-only array (pandas copy-on-write), which torch.from_numpy would share
    group_ids = torch.tensor(np.asarray(data.group_ids, dtype=np.int64))
    batches = list(sampler.epoch())
    outputs = forward_batches(model, device, data, [batch.rows for batch in batches], image_size)
    for batch, (_, output) in zip(batches, outputs, strict=True):
        yield batch_loss_inputs(output, batch, group_ids, mask_neighbor_pairs)


def collect_cocos(
    model: torch.nn.Module,
    losses: Sequence[Loss],
    data: PairData,
    sampler: BatchSampler,
    image_size: int,
    device: torch.device,
    mask_neighbor_pairs: bool = True,
) -> dict[str, dict[str, Any]]:
    """COCOS of ``losses`` (:func:`evaluation.cocos.cocos_per_loss`) over one pass of ``sampler`` through the
    frozen ``model`` (batches built as in training); the pass is skipped when no loss reports diagnostics."""
    batches = frozen_model_batches(model, data, sampler, image_size, device, mask_neighbor_pairs)
    return cocos_per_loss(losses, batches)


def cocos_loss(loss: LossSpec) -> Loss:
    """A variant's loss as COCOS measures it: at the one shared ``COCOS_EPS`` (every loss's default
    threshold), whatever ``cocos_eps`` the variant trained with, since the result records one eps for all of
    them (the threshold changes no training loss, only its diagnostics)."""
    return build_loss(loss.name, **{key: value for key, value in loss.params.items() if key != "cocos_eps"})


class Cocos(VariantParams, PipelineTask):
    """COCOS over the training set at the best checkpoint (Bleeker & de Rijke §5), eps = 0.01."""

    tokenizes = True
    outputs = {"cocos": "cocos.json"}

    def requires(self) -> dict[str, HashedTask]:
        train = self.clone(Train)
        return {**train.requires(), "train": train}

    def config(self) -> dict[str, Any]:
        return {"eps": COCOS_EPS, "sampling_seed": COCOS_SEED}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        inputs = self.requires()
        t = self.train_settings()
        data, manifest = load_pair_data(inputs, t.max_text_tokens)
        train_positions = np.flatnonzero((manifest["split"] == "train").to_numpy())
        spec = self.variant_spec()
        losses = [cocos_loss(loss) for loss in spec.losses]
        neighbors = None
        if any(loss.needs_neighbors for loss in losses):
            if "neighbors" not in inputs:
                raise ValueError(
                    f"variant {self.variant!r} has a loss that needs semantic neighbors but no neighbor_source"
                )
            neighbors = inputs["neighbors"].sampling_pool(train_positions, self.settings.neighbors.sample_k)
        model, best_epoch = load_trained_model(inputs)
        device = next(model.parameters()).device
        losses = [loss.to(device) for loss in losses]
        sampler = BatchSampler(
            train_positions, t.batch_size, np.random.default_rng(COCOS_SEED), neighbors, t.neighbor_mode
        )
        summary = collect_cocos(model, losses, data, sampler, t.image_size, device, t.mask_neighbor_pairs)
        result = {
            "variant": self.variant,
            "seed": self.seed,
            "best_epoch": best_epoch,
            "eps": COCOS_EPS,
            "batch_size": t.batch_size,
            "losses": summary,
        }
        write_json(self.work_path(work_dir, "cocos"), result)
        return {**result, "device": str(device)}
