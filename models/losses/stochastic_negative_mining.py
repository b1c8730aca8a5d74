"""Stochastic Negative Mining (Veit & Wilber Eq. 3): each query's partition holds only its hardest negatives."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from common.settings import redeclared
from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import MiningSettings, Shared
from models.losses.softmax_terms import (
    ScoredPairs,
    direction_losses,
    kept_negative_count,
    masked_logsumexp,
    multi_positive_cross_entropy,
    query_cocos,
    scored_pairs,
    top_k_mask,
    trained_directions,
)


def stochastic_negative_mining_loss(
    logits: Tensor, positives: Tensor, fraction: float, top_k: int | None
) -> Tensor:
    """Veit & Wilber Eq. 3 for the queries in the rows of ``logits``: the partition of query ``q`` holds
    ``topk(N_q)``, its ``k`` highest-scoring negatives."""
    negatives = ~positives
    keep = kept_negative_count(negatives.sum(dim=1), fraction, top_k)
    hardest = top_k_mask(logits, negatives, keep)
    return multi_positive_cross_entropy(logits, positives, masked_logsumexp(logits, hardest))


@dataclass(frozen=True)
class StochasticNegativeMiningSettings(MiningSettings):
    symmetric: bool = redeclared(Shared, "symmetric")


@register_loss("stochastic_negative_mining")
class StochasticNegativeMining(Loss[ScoredPairs]):
    """Sampled Softmax whose per-query partition keeps only the hardest negatives (Veit & Wilber Eq. 3).

    ``k`` is ``top_k`` when given, else ``ceil(fraction * #negatives of the query)``; Veit & Wilber
    §4.2 keep "the 50% largest scores". Logits are ``scale · cos`` (λ = 20). Both directions 0.5/0.5
    by default; ``symmetric=False`` trains the paper's text-to-image direction only.
    """

    settings_class = StochasticNegativeMiningSettings

    def _loss(self, logits: Tensor, positives: Tensor) -> Tensor:
        return stochastic_negative_mining_loss(logits, positives, self.fraction, self.top_k)

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs, self.scale)

    def compute(self, logits: ScoredPairs) -> LossOutput:
        directions = trained_directions(logits.scores, self.symmetric)
        return direction_losses(directions, logits.positives, self._loss)

    def contributions(self, logits: ScoredPairs) -> dict[str, Tensor]:
        directions = trained_directions(logits.scores, self.symmetric)
        return query_cocos(directions, logits.positives, self._loss, self.cocos_eps)
