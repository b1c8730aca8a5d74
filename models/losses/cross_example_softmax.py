"""Cross-Example Softmax (Veit & Wilber Eq. 5): every non-matching pair of the batch is in every partition."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from common.settings import redeclared
from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import LossSettings, Shared
from models.losses.softmax_terms import (
    ScoredPairs,
    batch_cocos,
    masked_logsumexp,
    multi_positive_cross_entropy,
    scored_pairs,
)


def cross_example_softmax_loss(logits: Tensor, positives: Tensor) -> Tensor:
    """Veit & Wilber Eq. 5: each positive pair against ``N_B``, every negative entry of the batch matrix."""
    batch_partition = masked_logsumexp(logits.reshape(1, -1), ~positives.reshape(1, -1))
    return multi_positive_cross_entropy(logits, positives, batch_partition)


@dataclass(frozen=True)
class CrossExampleSoftmaxSettings(LossSettings):
    scale: float = redeclared(Shared, "scale")
    cocos_eps: float = redeclared(Shared, "cocos_eps")

@register_loss("cross_example_softmax")
class CrossExampleSoftmax(Loss[ScoredPairs]):
    """Cross-Example Softmax cross-entropy (Veit & Wilber Eq. 5) on logits ``scale · cos`` (λ = 20).

    The partition ``N_B`` (Eq. 4) is every off-diagonal (with ``group_ids``: every cross-group) entry of
    the image-text score matrix, shared by all queries. That set and the positive entries are the same
    whether images or captions are the queries, so the loss has no direction: it is returned once, as
    ``cross_example_loss``. ``diagnostics`` still reports COCOS per image query (matrix rows) and per
    caption query (columns); a negative entry's weight includes its share of the other queries' terms.
    """

    settings_class = CrossExampleSoftmaxSettings

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs, self.scale)

    def compute(self, logits: ScoredPairs) -> LossOutput:
        return {"cross_example_loss": cross_example_softmax_loss(logits.scores, logits.positives)}

    def contributions(self, logits: ScoredPairs) -> dict[str, Tensor]:
        return batch_cocos(logits.scores, logits.positives, cross_example_softmax_loss, self.cocos_eps)
