"""The in-batch softmax machinery of the softmax family (sampled softmax, NT-Xent, negative mining,
cross-example, instance cross-entropy, Smooth-AP's scores) and its COCOS counts from gradient weights
(Bleeker & de Rijke §4-5).

Builds on ``checks`` and ``base`` only. Operations are built in the order the losses always built them, so
gradients stay bit for bit as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import NamedTuple

import torch
from torch import Tensor

from models.losses.checks import (
    UNIT_NORM_TOLERANCE,
    LossPreconditionError,
    check_pair_embeddings,
    same_group_mask,
    value_checks_enabled,
)

# ------------------------------------------------------------------------------------ scores and partitions


class ScoredPairs(NamedTuple):
    """``[B, B]`` image-text scores (image queries in rows; text queries are rows of ``scores.T``) and the
    ``[B, B]`` mask of positives (same group)."""

    scores: Tensor
    positives: Tensor


def pairwise_cosine(image: Tensor, text: Tensor) -> Tensor:
    """``[B, B]`` similarities ``s[q, j] = <image_q, text_j>`` of L2-normalised paired embeddings.

    The softmax family's own guard (``[B, D]`` only; norms within ``allclose``), not
    :func:`check_embedding_matrix`: the two families have always accepted slightly different inputs and
    worded their refusals differently, and both are kept as they were.
    """
    check_pair_embeddings(image, text)
    if image.dim() != 2:
        raise LossPreconditionError(
            f"this loss takes [B, D] embeddings, got {tuple(image.shape)}; pool multi-embedding (PVSE) "
            "outputs into one vector per item first"
        )
    checked = (("image", image), ("text", text)) if value_checks_enabled() else ()
    for name, embedding in checked:
        norms = embedding.detach().norm(dim=1)
        if not torch.allclose(norms, torch.ones_like(norms), atol=UNIT_NORM_TOLERANCE):
            raise LossPreconditionError(
                f"{name} embeddings are not L2-normalised (norms from {norms.min().item():.3f} to "
                f"{norms.max().item():.3f}); apply torch.nn.functional.normalize(x, dim=1) before the loss"
            )
    return image @ text.T


def scored_pairs(inputs: Mapping[str, Tensor], scale: float | None = None) -> ScoredPairs:
    """Cosines (times ``scale`` when given: the logits) and positives of the keyword inputs of a batch."""
    image, text = inputs.get("image"), inputs.get("text")
    if image is None or text is None:
        raise LossPreconditionError("pass the batch embeddings by keyword: loss(image=..., text=...)")
    scores = pairwise_cosine(image, text)
    positives = same_group_mask(inputs.get("group_ids"), image.shape[0], image.device)
    return ScoredPairs(scores if scale is None else scale * scores, positives)


def trained_directions(logits: Tensor, symmetric: bool) -> list[tuple[str, Tensor]]:
    """``(name, query-row logits)`` of the directions a query-specific loss trains: both, or Veit &
    Wilber's text-to-image only."""
    if symmetric:
        return [("image_to_text", logits), ("text_to_image", logits.T)]
    return [("text_to_image", logits.T)]


def direction_losses(
    directions: list[tuple[str, Tensor]], positives: Tensor, loss_of: Callable[[Tensor, Tensor], Tensor]
) -> dict[str, Tensor]:
    """``{direction}_loss``: ``loss_of(queries, positives)`` of each direction, the directions weighted
    equally (0.5/0.5 when both are trained)."""
    weight = 1.0 / len(directions)
    return {f"{name}_loss": weight * loss_of(queries, positives) for name, queries in directions}


def masked_logsumexp(logits: Tensor, mask: Tensor) -> Tensor:
    """Row-wise ``log sum_{j: mask[q, j]} exp(logits[q, j])`` as ``[rows, 1]``; masked entries get no gradient."""
    return logits.masked_fill(~mask, float("-inf")).logsumexp(dim=1, keepdim=True)


def positive_pair_nll(logits: Tensor, negative_logsumexp: Tensor) -> Tensor:
    """``[B, B]``: ``-log(e^{l_qj} / (e^{l_qj} + sum_n e^{l_qn}))`` for every entry, the partition ``sum_n``
    given as its log (``[B, 1]`` per query or ``[1, 1]`` shared by the batch)."""
    return torch.logaddexp(logits, negative_logsumexp) - logits


def multi_positive_cross_entropy(logits: Tensor, positives: Tensor, negative_logsumexp: Tensor) -> Tensor:
    """Mean over queries of the mean over each query's positives of :func:`positive_pair_nll`: each positive
    gets its own softmax term against the query's negatives, so with one positive per query this is exactly
    the single-positive equation of each paper."""
    nll = torch.where(positives, positive_pair_nll(logits, negative_logsumexp), 0.0)
    return (nll.sum(dim=1) / positives.sum(dim=1)).mean()


def sampled_softmax_loss(logits: Tensor, positives: Tensor) -> Tensor:
    """Veit & Wilber Eq. 2 for the queries in the rows of ``logits``: every in-batch negative in the
    partition (NT-Xent is this with logits ``cos / τ``)."""
    return multi_positive_cross_entropy(logits, positives, masked_logsumexp(logits, ~positives))


# ------------------------------------------------------------------------------------------ negative mining


def kept_negative_count(negative_counts: Tensor, fraction: float, top_k: int | None) -> Tensor:
    """How many of each query's ``negative_counts`` negatives a mining loss keeps.

    ``top_k`` (capped at the available count) when given, else ``ceil(fraction * count)``; the ceiling is
    taken in exact integer arithmetic so that e.g. 30% of 10 keeps 3, not 4.
    """
    if top_k is not None:
        return negative_counts.clamp(max=top_k)
    ratio = Fraction(fraction).limit_denominator(1_000_000)
    return (negative_counts * ratio.numerator + ratio.denominator - 1) // ratio.denominator


def top_k_mask(scores: Tensor, candidates: Tensor, k: Tensor) -> Tensor:
    """Row-wise: the ``k[q]`` highest-scoring entries among row ``q``'s ``candidates`` (ties by column order).

    Which of several tied entries is kept does not change the softmax partition's value.
    """
    ranked = scores.detach().masked_fill(~candidates, float("-inf"))
    order = ranked.argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(scores.shape[1], device=scores.device).expand_as(order))
    return candidates & (rank < k[:, None])


# ---------------------------------------------------- COCOS from gradient weights (Bleeker & de Rijke §4-5)


def per_query_gradient_weights(loss_of: Callable[[Tensor], Tensor], inputs: Tensor) -> Tensor:
    """``B * dL/d inputs``: the weight each entry carries in the gradient of a loss averaged over B queries.

    For a softmax cross-entropy this is the softmax probability of the entry (Bleeker & de Rijke Eq. 11
    without the 1/tau factor), negative for positives. Runs on a detached copy, so it neither changes the
    loss nor accumulates gradients into the caller's tensors, and it works under ``torch.no_grad``.
    """
    with torch.enable_grad():
        leaf = inputs.detach().requires_grad_(True)
        (gradient,) = torch.autograd.grad(loss_of(leaf), leaf)
    return gradient * inputs.shape[0]


def cocos_from_weights(weights: Tensor, positives: Tensor, eps: float, direction: str) -> dict[str, Tensor]:
    """COCOS counts of one retrieval direction from gradient weights; queries are rows of ``weights``.

    ``contributing_negatives`` is C^{qv-} (negatives whose weight exceeds ``eps``), ``negative_weight`` is
    W^{qv-} (their summed weight), ``positive_weight`` the per-query weight of the positives (W^{qv+}
    before the batch mean) and ``no_gradient`` marks queries with no contributing negative (C^0).
    """
    negative_weights = torch.where(positives, 0.0, weights)
    contributing = negative_weights > eps
    return {
        f"{direction}_contributing_negatives": contributing.sum(dim=1),
        f"{direction}_negative_weight": torch.where(contributing, negative_weights, 0.0).sum(dim=1),
        f"{direction}_positive_weight": -torch.where(positives, weights, 0.0).sum(dim=1),
        f"{direction}_no_gradient": ~contributing.any(dim=1),
    }


def query_cocos(
    directions: list[tuple[str, Tensor]],
    positives: Tensor,
    loss_of: Callable[[Tensor, Tensor], Tensor],
    eps: float,
) -> dict[str, Tensor]:
    """COCOS of a loss whose queries are the rows of each direction's matrix, from the gradient weights of
    ``loss_of(matrix, positives)``, that direction's loss."""
    result: dict[str, Tensor] = {}
    for name, queries in directions:
        weights = per_query_gradient_weights(lambda x: loss_of(x, positives), queries)
        result |= cocos_from_weights(weights, positives, eps, name)
    return result


def batch_cocos(
    logits: Tensor, positives: Tensor, loss_of: Callable[[Tensor, Tensor], Tensor], eps: float
) -> dict[str, Tensor]:
    """COCOS of a loss over the whole batch matrix (the cross-example losses): one gradient, read per image
    query (rows) and per caption query (columns); a negative's weight includes its share of other queries'
    terms."""
    weights = per_query_gradient_weights(lambda x: loss_of(x, positives), logits)
    return cocos_from_weights(weights, positives, eps, "image_to_text") | cocos_from_weights(
        weights.T, positives, eps, "text_to_image"
    )
