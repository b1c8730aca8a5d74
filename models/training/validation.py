"""The validation scores of a training run after each epoch, from one pass of the validation split through
the one inference path (:mod:`models.inference`): the mean neighbor-free loss over validation batches (what
the plateau LR decay follows, §3.3) and, from the same embeddings, the retrieval score a caller computes
(``validation_score``, e.g. the full-ranking rsum the pipeline passes: what checkpoints are selected by).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.batching import Batch
from models.distributed import Distributed, all_gather_objects, all_reduce_sum
from models.inference import chunks, forward_batches
from models.training.data import PairData
from models.training.loss_inputs import compute_losses, loss_inputs
from models.training.setup import TrainingSetup


def validation_order(val_positions: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Validation positions with group members adjacent, so validation batches hold group mates too."""
    val_positions = np.asarray(val_positions)
    return val_positions[np.argsort(np.asarray(group_ids)[val_positions], kind="stable")]


def has_negative(rows: np.ndarray, group_ids: torch.Tensor) -> bool:
    """A batch gives a loss over in-batch negatives only if it holds two groups."""
    return len(rows) >= 2 and bool((group_ids[rows] != group_ids[rows[0]]).any())


@dataclass
class ValidationPass:
    """What one pass over the validation split gives."""

    loss: float
    #: the embeddings of every validation position, in order (None when not asked for)
    image: np.ndarray | None = None
    text: np.ndarray | None = None


@torch.no_grad()
def validation_pass(
    setup: TrainingSetup,
    data: PairData,
    positions: np.ndarray,
    batch_size: int,
    image_size: int,
    distributed: Distributed,
    keep_embeddings: bool,
) -> ValidationPass:
    """The mean neighbor-free loss over validation batches of the global batch size (a loss over in-batch
    negatives depends on it; a batch of one group has none and is left out of it) and, with
    ``keep_embeddings``, every position's embeddings. Ranks take every world_size-th batch; the loss sums
    are added up and the embeddings gathered, so every rank ends with the same pass."""
    batches = chunks(positions, batch_size * distributed.world_size)
    if not keep_embeddings:
        batches = [rows for rows in batches if has_negative(rows, setup.group_ids)]
    mine = list(range(distributed.rank, len(batches), distributed.world_size))
    totals, weights, embedded = 0.0, 0, {}
    outputs = forward_batches(
        setup.model,
        setup.device,
        data,
        [batches[i] for i in mine],
        image_size,
        amp_dtype=setup.amp_dtype,
        loader=setup.loader,
    )
    for index, (rows, output) in zip(mine, outputs, strict=True):
        if keep_embeddings:
            embedded[index] = (output["image"].cpu().numpy(), output["text"].cpu().numpy())
        if not has_negative(rows, setup.group_ids):
            continue
        inputs = loss_inputs(output, Batch(rows=rows, n_main=len(rows)), setup.group_ids[rows].to(setup.device))
        parts = compute_losses(setup.val_losses, inputs)
        totals += float(torch.stack(list(parts.values())).sum()) * len(rows)
        weights += len(rows)
    if distributed.active:
        totals, weights = all_reduce_sum([totals, weights], setup.device)
        if keep_embeddings:
            embedded = {i: pair for part in all_gather_objects(embedded) for i, pair in part.items()}
    if weights == 0:
        raise ValueError("the validation split has fewer than 2 pairs: validation loss cannot be computed")
    result = ValidationPass(totals / weights)
    if keep_embeddings:
        result.image = np.concatenate([embedded[i][0] for i in range(len(batches))])
        result.text = np.concatenate([embedded[i][1] for i in range(len(batches))])
    return result
