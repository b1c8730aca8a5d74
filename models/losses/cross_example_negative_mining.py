"""Cross-Example Negative Mining (Veit & Wilber Eq. 6): the hardest negative pairs of the whole batch."""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import MiningSettings
from models.losses.softmax_terms import (
    ScoredPairs,
    batch_cocos,
    kept_negative_count,
    masked_logsumexp,
    multi_positive_cross_entropy,
    scored_pairs,
    top_k_mask,
)


def cross_example_negative_mining_loss(
    logits: Tensor, positives: Tensor, fraction: float, top_k: int | None
) -> Tensor:
    """Veit & Wilber Eq. 6: each positive pair against ``topk(N_B)``, the ``k`` highest negative entries of
    the whole batch matrix (they may all come from a few queries)."""
    negatives = ~positives.reshape(1, -1)
    keep = kept_negative_count(negatives.sum(dim=1), fraction, top_k)
    hardest = top_k_mask(logits.reshape(1, -1), negatives, keep)
    return multi_positive_cross_entropy(logits, positives, masked_logsumexp(logits.reshape(1, -1), hardest))


@register_loss("cross_example_negative_mining")
class CrossExampleNegativeMining(Loss[ScoredPairs]):
    """Cross-Example Negative Mining (Veit & Wilber Eq. 6) on logits ``scale · cos`` (λ = 20).

    ``k`` is ``top_k`` when given, else ``ceil(fraction * |N_B|)``; §4.2 keep the 50% largest. As for
    Cross-Example Softmax the mined set and the positives do not depend on which modality queries, so the
    loss is returned once as ``cross_example_loss``; ``diagnostics`` reports rows and columns.
    """

    settings_class = MiningSettings

    def _loss(self, logits: Tensor, positives: Tensor) -> Tensor:
        return cross_example_negative_mining_loss(logits, positives, self.fraction, self.top_k)

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs, self.scale)

    def compute(self, logits: ScoredPairs) -> LossOutput:
        return {"cross_example_loss": self._loss(logits.scores, logits.positives)}

    def contributions(self, logits: ScoredPairs) -> dict[str, Tensor]:
        return batch_cocos(logits.scores, logits.positives, self._loss, self.cocos_eps)
