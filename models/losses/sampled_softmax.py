"""Sampled Softmax (Veit & Wilber, Eq. 2): the member of the in-batch softmax family every other one
modifies (NT-Xent changes the scale, negative mining shrinks the partition, cross-example softmax widens
it, ICE reweights it). The family's shared pieces are in ``softmax_terms``.

Conventions shared by the family:

* ``scores[q, j]`` is the cosine of image ``q`` and text ``j``; image-to-text queries are rows,
  text-to-image queries are rows of the transpose.
* ``positives[q, j]`` is true when rows ``q`` and ``j`` share a group id. A same-group candidate is
  never a negative; each positive gets its own softmax term against the query's negatives (it never
  sits in another positive's partition), and a query's loss is the mean of its positive terms. With
  one positive per query this is exactly the single-positive equation of each paper.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from common.settings import redeclared
from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import LossSettings, Shared
from models.losses.softmax_terms import (
    ScoredPairs,
    direction_losses,
    query_cocos,
    sampled_softmax_loss,
    scored_pairs,
    trained_directions,
)


@dataclass(frozen=True)
class SampledSoftmaxSettings(LossSettings):
    scale: float = redeclared(Shared, "scale")
    symmetric: bool = redeclared(Shared, "symmetric")
    cocos_eps: float = redeclared(Shared, "cocos_eps")

@register_loss("sampled_softmax")
class SampledSoftmax(Loss[ScoredPairs]):
    """Sampled Softmax cross-entropy (Veit & Wilber Eq. 2) on cosines scaled by ``scale`` (λ, §4.1).

    Each query's positive is ranked against the in-batch documents of *that query* only. Veit & Wilber
    train text-to-image only (``symmetric=False`` reproduces that); by default both directions are
    trained, weighted 0.5/0.5, because this project evaluates bidirectional retrieval. The logit is
    ``λ · cos`` ("output logits are scaled with a factor of λ = 20").
    """

    settings_class = SampledSoftmaxSettings

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs, self.scale)

    def compute(self, logits: ScoredPairs) -> LossOutput:
        directions = trained_directions(logits.scores, self.symmetric)
        return direction_losses(directions, logits.positives, sampled_softmax_loss)

    def contributions(self, logits: ScoredPairs) -> dict[str, Tensor]:
        directions = trained_directions(logits.scores, self.symmetric)
        return query_cocos(directions, logits.positives, sampled_softmax_loss, self.cocos_eps)
