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
    if batch.neighbor_rows is None:
        return indexed_loss_inputs(outputs, batch.n_main, group_ids, None, None)
    rows = torch.from_numpy(batch.neighbor_rows).to(group_ids.device)
    return indexed_loss_inputs(
        outputs, batch.n_main, group_ids, rows, torch.from_numpy(batch.neighbor_of).to(group_ids.device)
    )


def indexed_loss_inputs(
    outputs: dict[str, Tensor],
    n_main: int,
    group_ids: Tensor,
    neighbor_rows: Tensor | None,
    neighbor_of: Tensor | None,
) -> dict[str, Tensor]:
    """:func:`loss_inputs` from index tensors already on the device (``group_ids`` of every encoded row): no
    host value is read, so the static training step runs it inside a CUDA graph."""
    inputs = {key: value[:n_main] for key, value in outputs.items()}
    inputs["group_ids"] = group_ids[:n_main]
    if neighbor_rows is not None:
        for key, value in outputs.items():
            inputs[f"neighbor_{key}"] = value.index_select(0, neighbor_rows)
        inputs["neighbor_of"] = neighbor_of
        inputs["neighbor_group_ids"] = group_ids.index_select(0, neighbor_rows)
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
    batch_groups = batch_group_ids(batch, group_ids, mask_neighbor_pairs)
    device = next(iter(outputs.values())).device
    return loss_inputs(outputs, batch, torch.from_numpy(batch_groups).to(device))


def batch_group_ids(batch: Batch, group_ids: Tensor, mask_neighbor_pairs: bool) -> np.ndarray:
    """Group id of each encoded row of ``batch`` (host), anchor and neighbor merged when asked."""
    batch_groups = group_ids[batch.rows].numpy()
    return cross_modal_group_ids(batch_groups, batch) if mask_neighbor_pairs else batch_groups


def compute_losses(losses: Sequence[Loss], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every loss's named sub-losses, keyed ``<loss name>.<sub-loss>``."""
    parts: dict[str, Tensor] = {}
    for loss in losses:
        for part, value in loss(**inputs).items():
            parts[f"{loss.name}.{part}"] = value
    return parts
