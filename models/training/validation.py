"""The validation score of a training run after each epoch: the mean neighbor-free loss over validation
batches, through the one inference path (:mod:`models.inference`)."""

from __future__ import annotations

import numpy as np
import torch

from models.batching import Batch
from models.distributed import Distributed, all_reduce_sum
from models.inference import chunks, forward_batches
from models.training.data import PairData
from models.training.loss_inputs import compute_losses, loss_inputs
from models.training.setup import TrainingSetup


def validation_order(val_positions: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Validation positions with group members adjacent, so validation batches hold group mates too."""
    val_positions = np.asarray(val_positions)
    return val_positions[np.argsort(np.asarray(group_ids)[val_positions], kind="stable")]


def validation_batches(positions: np.ndarray, group_ids: torch.Tensor, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of ``batch_size``, those without an in-batch negative left out (one group only)."""
    return [
        rows
        for rows in chunks(positions, batch_size)
        if len(rows) >= 2 and bool((group_ids[rows] != group_ids[rows[0]]).any())
    ]


@torch.no_grad()
def validation_loss(
    setup: TrainingSetup,
    data: PairData,
    positions: np.ndarray,
    batch_size: int,
    image_size: int,
    distributed: Distributed,
) -> float:
    """Mean neighbor-free loss over validation batches of the global batch size (a loss over in-batch
    negatives depends on it); ranks take every world_size-th batch and the sums are added up."""
    batches = validation_batches(positions, setup.group_ids, batch_size * distributed.world_size)
    mine = batches[distributed.rank :: distributed.world_size]
    totals, weights = 0.0, 0
    for rows, outputs in forward_batches(
        setup.model, setup.device, data, mine, image_size, amp_dtype=setup.amp_dtype, loader=setup.loader
    ):
        inputs = loss_inputs(outputs, Batch(rows=rows, n_main=len(rows)), setup.group_ids[rows].to(setup.device))
        parts = compute_losses(setup.val_losses, inputs)
        totals += float(torch.stack(list(parts.values())).sum()) * len(rows)
        weights += len(rows)
    if distributed.active:
        totals, weights = all_reduce_sum([totals, weights], setup.device)
    if weights == 0:
        raise ValueError("the validation split has fewer than 2 pairs: validation loss cannot be computed")
    return totals / weights
