"""From model outputs to the keywords every loss takes (``models.losses.base``): main rows, neighbor rows and
group ids, with an in-batch anchor and its sampled neighbor merged into one group; and the losses' named
sub-losses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from models.batching import Batch
from models.losses import Loss


def loss_inputs(outputs: dict[str, Tensor], batch: Batch, group_ids: Tensor) -> dict[str, Tensor]:
    """Slice model outputs into the keywords of ``models.losses.base``: main rows and neighbor rows."""
    inputs = {key: value[: batch.n_main] for key, value in outputs.items()}
    inputs["group_ids"] = group_ids[: batch.n_main]
    if batch.neighbor_rows is not None:
        index = torch.from_numpy(batch.neighbor_rows).to(group_ids.device)
        for key, value in outputs.items():
            inputs[f"neighbor_{key}"] = value.index_select(0, index)
        inputs["neighbor_of"] = torch.from_numpy(batch.neighbor_of).to(group_ids.device)
        inputs["neighbor_group_ids"] = group_ids.index_select(0, index)
    return inputs


def cross_modal_group_ids(group_ids: np.ndarray, batch: Batch) -> np.ndarray:
    """Group ids of the batch rows with each in-batch anchor and its sampled neighbor merged into one group.

    In the ``in_batch`` layout the neighbor pair i' is a row of the cross-modal batch; left as is, image_i
    vs text_i' and image_i' vs text_i would be negatives, so L_sym would push apart the pairs L_text and
    L_img pull together. Rows of one group are never negatives of each other (``models.losses.base``), so
    merging the groups masks exactly those cross pairs (and keeps any group the rows already shared).
    """
    merged = np.array(group_ids, dtype=np.int64, copy=True)
    if batch.neighbor_rows is None:
        return merged
    for anchor, neighbor in zip(batch.neighbor_of, batch.neighbor_rows, strict=True):
        if neighbor >= batch.n_main:
            continue  # an extra row: outside the cross-modal pool
        keep, drop = merged[anchor], merged[neighbor]
        if keep != drop:
            merged[merged == drop] = keep
    return merged


def batch_loss_inputs(
    outputs: dict[str, Tensor], batch: Batch, group_ids: Tensor, mask_neighbor_pairs: bool
) -> dict[str, Tensor]:
    """The loss keywords of one training batch: ``group_ids`` (of every pair) taken at the batch's rows, an
    in-batch anchor and its neighbor merged into one group when ``mask_neighbor_pairs``."""
    batch_groups = group_ids[batch.rows].numpy()
    if mask_neighbor_pairs:
        batch_groups = cross_modal_group_ids(batch_groups, batch)
    device = next(iter(outputs.values())).device
    return loss_inputs(outputs, batch, torch.from_numpy(batch_groups).to(device))


def compute_losses(losses: Sequence[Loss], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every loss's named sub-losses, keyed ``<loss name>.<sub-loss>``."""
    parts: dict[str, Tensor] = {}
    for loss in losses:
        for part, value in loss(**inputs).items():
            parts[f"{loss.name}.{part}"] = value
    return parts
