"""Input guards, masks, the PVSE similarity and the lookup of a choice by name (:func:`chosen`) that several
losses of this package build on, and the COCOS keys (Bleeker & de Rijke, ECIR 2022, §4) every loss reports, with the package's one ``COCOS_EPS``.

Imports nothing of the package; ``base``, the term modules (``pair_terms``, ``softmax_terms``) and the losses
import it. Every function is pure: it reads its arguments and returns new tensors, built in the order the
losses always built them, which keeps gradients bit for bit as they were (autograd sums a tensor's incoming
gradients in the order of the graph).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

from common.registry import Registry

Choice = TypeVar("Choice")

#: the keywords that carry sampled semantic neighbors (Eq. 5), in the order the input guards name them
NEIGHBOR_KEYWORDS: tuple[str, ...] = ("neighbor_image", "neighbor_text", "neighbor_of")


class LossPreconditionError(ValueError):
    """Raised when a loss is given inputs it cannot work with; the message says how to fix it."""


#: Bleeker & de Rijke §5: a candidate whose gradient weight is below this counts as not contributing.
COCOS_EPS = 0.01
#: loose enough for bf16 autocast outputs (eps 7.8e-3), tight enough to catch un-normalised embeddings.
UNIT_NORM_TOLERANCE = 1e-2


# --------------------------------------------------------------------------------------------- input guards

#: whether the guards that read tensor values back to the host (unit norms, positives per query) run;
#: shape and type guards always do. The trainer runs them on its first step only: a read-back per step
#: makes the host wait for the GPU every step, and the model and batch layout do not change between steps.
_VALUE_CHECKS: ContextVar[bool] = ContextVar("loss_value_checks", default=True)


@contextmanager
def value_checks(enabled: bool) -> Iterator[None]:
    """Run the block with the value guards on or off (on by default, outside the trainer's steps)."""
    token = _VALUE_CHECKS.set(enabled)
    try:
        yield
    finally:
        _VALUE_CHECKS.reset(token)


def value_checks_enabled() -> bool:
    return _VALUE_CHECKS.get()


def chosen(registry: Registry[Choice], name: str) -> Choice:
    """The entry ``name`` of ``registry`` (a distance, a negatives rule, an angular form...); a
    :class:`LossPreconditionError` with the registry's one message for an unknown name otherwise."""
    if name not in registry:
        raise LossPreconditionError(registry.unknown_message(name))
    return registry.get(name)


def check_pair_embeddings(image: Tensor, text: Tensor, *, min_batch: int = 2) -> None:
    """Paired embeddings of one shape with at least ``min_batch`` rows."""
    if image.shape != text.shape:
        raise LossPreconditionError(
            f"image {tuple(image.shape)} and text {tuple(text.shape)} embeddings must have the same shape: "
            "row i of image is paired with row i of text"
        )
    if image.shape[0] < min_batch:
        raise LossPreconditionError(
            f"batch of {image.shape[0]} rows: in-batch negatives need at least {min_batch}; raise batch_size"
        )


def default_group_ids(group_ids: Tensor | None, batch_size: int, device: torch.device) -> Tensor:
    """``group_ids`` if given, else every row its own group."""
    if group_ids is None:
        return torch.arange(batch_size, device=device)
    if group_ids.shape != (batch_size,):
        raise LossPreconditionError(
            f"group_ids must have shape ({batch_size},), got {tuple(group_ids.shape)}; pass one id per batch row"
        )
    return group_ids


def check_embedding_matrix(name: str, embeddings: Tensor, *, unit_norm: bool) -> None:
    """``embeddings`` is ``[N, D]`` and, where the loss's algebra assumes it, has L2-normalised rows."""
    if embeddings.dim() != 2:
        raise LossPreconditionError(
            f"{name} embeddings have shape {tuple(embeddings.shape)}; this loss takes [N, D] rows "
            "(multi-embedding [B, K, D] outputs need a loss that matches the K embeddings first)"
        )
    if unit_norm and embeddings.shape[0] > 0 and value_checks_enabled():
        norms = embeddings.detach().norm(dim=1)
        if bool(((norms - 1.0).abs() > UNIT_NORM_TOLERANCE).any()):
            raise LossPreconditionError(
                f"{name} embeddings are not L2-normalised (row norms from {norms.min().item():.4f} to "
                f"{norms.max().item():.4f}); apply torch.nn.functional.normalize(x, dim=-1) in the encoder"
            )


def check_multi_embeddings(name: str, embeddings: Tensor) -> None:
    """PVSE keywords are ``[B, K, D]`` (K embeddings per instance)."""
    if embeddings.dim() != 3:
        raise LossPreconditionError(
            f"{name} must be [B, K, D] (K embeddings per instance, as PVSEModel returns), got "
            f"{tuple(embeddings.shape)}; a single-embedding model's [B, D] becomes K=1 with .unsqueeze(1)"
        )


def check_negative_mask(negative_mask: Tensor, num_queries: int, num_candidates: int) -> None:
    """One boolean row of candidate negatives per query."""
    if negative_mask.dtype != torch.bool or negative_mask.shape != (num_queries, num_candidates):
        raise LossPreconditionError(
            f"negative_mask must be a bool tensor of shape ({num_queries}, {num_candidates}), got "
            f"{negative_mask.dtype} {tuple(negative_mask.shape)}: True where a candidate is a negative"
        )


class Neighbors(NamedTuple):
    """The sampled-neighbor keywords of a batch, after :func:`require_neighbors`."""

    image: Tensor
    text: Tensor
    of: Tensor
    group_ids: Tensor | None


def require_neighbors(image: Tensor, group_ids: Tensor | None, inputs: Mapping[str, Tensor]) -> Neighbors:
    """Neighbor keywords of ``inputs`` present, ``[M, D]`` in the batch's width and pointing at rows of the
    batch ``image``; ``group_ids`` are the batch rows' (needed to read ``neighbor_group_ids``)."""
    missing = [name for name in NEIGHBOR_KEYWORDS if inputs.get(name) is None]
    if missing:
        raise LossPreconditionError(
            f"this loss needs sampled semantic neighbors but got no {', '.join(missing)}: train with a "
            "neighbor_source (e.g. Doc2Vec neighbors, Eq. 5) so every batch carries neighbor_image, "
            "neighbor_text and neighbor_of"
        )
    batch_size, dim = image.shape[0], image.shape[-1]
    neighbor_of, neighbor_group_ids = inputs["neighbor_of"], inputs.get("neighbor_group_ids")
    num_neighbors = neighbor_of.shape[0]
    if (
        neighbor_of.dim() != 1
        or num_neighbors == 0
        or neighbor_of.dtype.is_floating_point
        or neighbor_of.dtype == torch.bool
    ):
        raise LossPreconditionError(
            f"neighbor_of must be a non-empty 1-D integer index tensor, got {neighbor_of.dtype} "
            f"{tuple(neighbor_of.shape)}: one batch row index per sampled neighbor"
        )
    for name in ("neighbor_image", "neighbor_text"):
        if inputs[name].shape != (num_neighbors, dim):
            raise LossPreconditionError(
                f"{name} has shape {tuple(inputs[name].shape)}, expected ({num_neighbors}, {dim}): one row "
                "per entry of neighbor_of, in the batch's embedding width"
            )
    # a value guard (two read-backs): off with the others after a run's first step and in a CUDA graph
    if value_checks_enabled() and (int(neighbor_of.min()) < 0 or int(neighbor_of.max()) >= batch_size):
        raise LossPreconditionError(
            f"neighbor_of holds indices outside [0, {batch_size}): it must index rows of this batch (offset "
            "indices when gathering batches from several processes)"
        )
    if neighbor_group_ids is not None:
        if neighbor_group_ids.shape != (num_neighbors,):
            raise LossPreconditionError(
                f"neighbor_group_ids has shape {tuple(neighbor_group_ids.shape)}, "
                f"expected ({num_neighbors},): one group id per neighbor row"
            )
        if group_ids is None:
            raise LossPreconditionError(
                "neighbor_group_ids was given without group_ids: pass the batch rows' group_ids in the same "
                "id space, otherwise the neighbor's own batch row cannot be recognised and excluded as a "
                "negative"
            )
    return Neighbors(inputs["neighbor_image"], inputs["neighbor_text"], neighbor_of, neighbor_group_ids)


# ---------------------------------------------------------------------------------------------------- masks


def different_group_mask(query_groups: Tensor, candidate_groups: Tensor) -> Tensor:
    """``[Q, P]`` bool: candidate p may serve as a negative for query q (their groups differ)."""
    return query_groups.unsqueeze(1) != candidate_groups.unsqueeze(0)


def neighbor_negative_mask(
    group_ids: Tensor, neighbor_of: Tensor, neighbor_group_ids: Tensor | None
) -> Tensor:
    """``[M, B]`` bool: batch row j is a negative for neighbor pair m (Eq. 6-7, i ≠ j): its group is
    neither the anchor's nor, when known, the neighbor's."""
    mask = group_ids.unsqueeze(0) != group_ids[neighbor_of].unsqueeze(1)
    if neighbor_group_ids is not None:
        mask &= group_ids.unsqueeze(0) != neighbor_group_ids.unsqueeze(1)
    return mask


def same_group_mask(group_ids: Tensor | None, batch_size: int, device: torch.device) -> Tensor:
    """``[B, B]`` bool, true where two rows share a group id (so are positives of each other)."""
    groups = default_group_ids(group_ids, batch_size, device)
    if groups.unique().numel() < 2:
        raise LossPreconditionError(
            f"all {batch_size} rows share one group id, so no query has an in-batch negative; "
            "sample batches that hold at least two different items"
        )
    return groups[:, None] == groups[None, :]


# -------------------------------------------------------------------------------------- PVSE's similarity


def mil_similarity(image: Tensor, text: Tensor) -> Tensor:
    """Multiple-instance similarity ``s(i, t) = max_{k, l} <image[i, k], text[t, l]>`` -> ``[B_image, B_text]``.

    PVSE scores an image-text pair by its best-matching pair of embeddings, so one of an instance's K
    meanings suffices to match. ``image`` is ``[B, K, D]``, ``text`` is ``[B', K', D]``.
    """
    check_multi_embeddings("image", image)
    check_multi_embeddings("text", text)
    if image.shape[-1] != text.shape[-1]:
        raise LossPreconditionError(
            f"embedding widths differ: image {tuple(image.shape)}, text {tuple(text.shape)}; both must be D"
        )
    pair_scores = torch.einsum("ikd,tld->itkl", image, text)
    return pair_scores.flatten(2).amax(dim=-1)


# ----------------------------------------------------------------------- COCOS keys (Bleeker & de Rijke §4)


def contribution_summary(prefix: str, counts: Tensor) -> dict[str, Tensor]:
    """Per-query COCOS in the keys every loss here reports: ``{prefix}_contributing_negatives`` (C^q) and
    ``{prefix}_no_gradient`` (True where C^q = 0; its batch sum is C⁰)."""
    return {f"{prefix}_contributing_negatives": counts, f"{prefix}_no_gradient": counts == 0}


def contribution_summaries(counts: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """:func:`contribution_summary` of each named count, in order."""
    summary: dict[str, Tensor] = {}
    for prefix, per_query in counts.items():
        summary.update(contribution_summary(prefix, per_query))
    return summary
