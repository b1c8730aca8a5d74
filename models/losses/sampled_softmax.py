"""Sampled Softmax (Veit & Wilber, Eq. 2) and the in-batch softmax machinery of the softmax family.

Sampled Softmax is the member of the family every other one modifies (NT-Xent changes the scale,
negative mining shrinks the partition, cross-example softmax widens it, ICE reweights it), so the
shared, pure helpers live here and the sibling modules import them.

Conventions shared by the family:

* ``scores[q, j]`` is the cosine of image ``q`` and text ``j``; image-to-text queries are rows,
  text-to-image queries are rows of the transpose.
* ``positives[q, j]`` is true when rows ``q`` and ``j`` share a group id. A same-group candidate is
  never a negative; each positive gets its own softmax term against the query's negatives (it never
  sits in another positive's partition), and a query's loss is the mean of its positive terms. With
  one positive per query this is exactly the single-positive equation of each paper.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import torch
from torch import Tensor

from models.losses.base import (
    Loss,
    LossOutput,
    LossPreconditionError,
    check_pair_embeddings,
    default_group_ids,
    register_loss,
)

#: Bleeker & de Rijke §5 use eps = 0.01 to decide that a sample's gradient weight is negligible.
COCOS_EPS = 0.01
#: how far from 1 an embedding norm may be; loose enough for reduced-precision forward passes.
UNIT_NORM_TOLERANCE = 1e-2


def pairwise_cosine(image: Tensor, text: Tensor) -> Tensor:
    """``[B, B]`` similarities ``s[q, j] = <image_q, text_j>`` of L2-normalised paired embeddings."""
    check_pair_embeddings(image, text)
    if image.dim() != 2:
        raise LossPreconditionError(
            f"this loss takes [B, D] embeddings, got {tuple(image.shape)}; pool multi-embedding (PVSE) "
            "outputs into one vector per item first"
        )
    for name, embedding in (("image", image), ("text", text)):
        norms = embedding.detach().norm(dim=1)
        if not torch.allclose(norms, torch.ones_like(norms), atol=UNIT_NORM_TOLERANCE):
            raise LossPreconditionError(
                f"{name} embeddings are not L2-normalised (norms from {norms.min().item():.3f} to "
                f"{norms.max().item():.3f}); apply torch.nn.functional.normalize(x, dim=1) before the loss"
            )
    return image @ text.T


def same_group_mask(group_ids: Tensor | None, batch_size: int, device: torch.device) -> Tensor:
    """``[B, B]`` bool, true where two rows share a group id (so are positives of each other)."""
    groups = default_group_ids(group_ids, batch_size, device)
    if groups.unique().numel() < 2:
        raise LossPreconditionError(
            f"all {batch_size} rows share one group id, so no query has an in-batch negative; "
            "sample batches that hold at least two different items"
        )
    return groups[:, None] == groups[None, :]


def scaled_scores_and_positives(embeddings: dict[str, Tensor], scale: float) -> tuple[Tensor, Tensor]:
    """``(scale * cosine [B, B], same-group mask [B, B])`` from the keyword embeddings of a batch."""
    image, text = embeddings.get("image"), embeddings.get("text")
    if image is None or text is None:
        raise LossPreconditionError("pass the batch embeddings by keyword: loss(image=..., text=...)")
    scores = pairwise_cosine(image, text)
    positives = same_group_mask(embeddings.get("group_ids"), image.shape[0], image.device)
    return scale * scores, positives


def masked_logsumexp(logits: Tensor, mask: Tensor) -> Tensor:
    """Row-wise ``log sum_{j: mask[q, j]} exp(logits[q, j])`` as ``[rows, 1]``; masked entries get no gradient."""
    return logits.masked_fill(~mask, float("-inf")).logsumexp(dim=1, keepdim=True)


def positive_pair_nll(logits: Tensor, negative_logsumexp: Tensor) -> Tensor:
    """``[B, B]``: ``-log(e^{l_qj} / (e^{l_qj} + sum_n e^{l_qn}))`` for every entry, the partition ``sum_n``
    given as its log (``[B, 1]`` per query or ``[1, 1]`` shared by the batch)."""
    return torch.logaddexp(logits, negative_logsumexp) - logits


def multi_positive_cross_entropy(logits: Tensor, positives: Tensor, negative_logsumexp: Tensor) -> Tensor:
    """Mean over queries of the mean over each query's positives of :func:`positive_pair_nll`."""
    nll = torch.where(positives, positive_pair_nll(logits, negative_logsumexp), 0.0)
    return (nll.sum(dim=1) / positives.sum(dim=1)).mean()


def kept_negative_count(negative_counts: Tensor, fraction: float, top_k: int | None) -> Tensor:
    """How many of each query's ``negative_counts`` negatives a mining loss keeps.

    ``top_k`` (capped at the available count) when given, else ``ceil(fraction * count)``; the ceiling is
    taken in exact integer arithmetic so that e.g. 30% of 10 keeps 3, not 4.
    """
    if top_k is not None:
        return negative_counts.clamp(max=top_k)
    ratio = Fraction(fraction).limit_denominator(1_000_000)
    return (negative_counts * ratio.numerator + ratio.denominator - 1) // ratio.denominator


def check_mining_parameters(fraction: float, top_k: int | None) -> None:
    """Guard for the negative-mining losses' ``fraction`` / ``top_k``."""
    if top_k is not None and top_k < 1:
        raise LossPreconditionError(f"top_k={top_k} keeps no negative; use top_k >= 1 or top_k=None")
    if not 0.0 < fraction <= 1.0:
        raise LossPreconditionError(f"fraction={fraction} must be in (0, 1]; Veit & Wilber §4.2 use 0.5")


def top_k_mask(scores: Tensor, candidates: Tensor, k: Tensor) -> Tensor:
    """Row-wise: the ``k[q]`` highest-scoring entries among row ``q``'s ``candidates`` (ties by column order).

    Which of several tied entries is kept does not change the softmax partition's value.
    """
    ranked = scores.detach().masked_fill(~candidates, float("-inf"))
    order = ranked.argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(scores.shape[1], device=scores.device).expand_as(order))
    return candidates & (rank < k[:, None])


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
    """COCOS counts (Bleeker & de Rijke §4) of one retrieval direction; queries are rows of ``weights``.

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


def trained_directions(logits: Tensor, symmetric: bool) -> list[tuple[str, Tensor]]:
    """``(name, query-row logits)`` of the directions a query-specific loss trains: both, or Veit &
    Wilber's text-to-image only."""
    if symmetric:
        return [("image_to_text", logits), ("text_to_image", logits.T)]
    return [("text_to_image", logits.T)]


def sampled_softmax_loss(logits: Tensor, positives: Tensor) -> Tensor:
    """Veit & Wilber Eq. 2 for the queries in the rows of ``logits``: every in-batch negative in the partition."""
    return multi_positive_cross_entropy(logits, positives, masked_logsumexp(logits, ~positives))


@register_loss("sampled_softmax")
class SampledSoftmax(Loss):
    """Sampled Softmax cross-entropy (Veit & Wilber Eq. 2) on cosines scaled by ``scale`` (λ, §4.1).

    Each query's positive is ranked against the in-batch documents of *that query* only. Veit & Wilber
    train text-to-image only (``symmetric=False`` reproduces that); by default both directions are
    trained, weighted 0.5/0.5, because this project evaluates bidirectional retrieval. The logit is
    ``λ · cos`` ("output logits are scaled with a factor of λ = 20").
    """

    def __init__(
        self, scale: float = 20.0, symmetric: bool = True, diagnostic_eps: float = COCOS_EPS
    ) -> None:
        super().__init__()
        if scale <= 0:
            raise LossPreconditionError(f"scale={scale} must be positive; Veit & Wilber §4.2 use λ = 20")
        self.scale = scale
        self.symmetric = symmetric
        self.diagnostic_eps = diagnostic_eps

    def forward(self, **embeddings: Tensor) -> LossOutput:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        directions = trained_directions(logits, self.symmetric)
        weight = 1.0 / len(directions)
        return {
            f"{name}_loss": weight * sampled_softmax_loss(queries, positives) for name, queries in directions
        }

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        result = {}
        for name, queries in trained_directions(logits, self.symmetric):
            weights = per_query_gradient_weights(lambda x: sampled_softmax_loss(x, positives), queries)
            result |= cocos_from_weights(weights, positives, self.diagnostic_eps, name)
        return result
