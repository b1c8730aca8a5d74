"""NT-Xent (Bleeker & de Rijke Eq. 4) for image-caption retrieval, both directions weighted 0.5/0.5."""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.checks import COCOS_EPS
from models.losses.softmax_terms import ScoredPairs, query_cocos, sampled_softmax_loss, scored_pairs


@register_loss("nt_xent")
class NtXent(Loss[ScoredPairs]):
    """NT-Xent, Bleeker & de Rijke Eq. 4:
    ``L = -1/|B| sum_q log(exp(s+/τ) / sum_{s_i in S_Ω^q} exp(s_i/τ))``.

    Every image is a query over the batch captions and every caption a query over the batch images; the
    two direction losses are weighted 0.5 each. With ``group_ids``, each same-group candidate is a
    positive with its own term whose partition is that positive plus the query's negatives (the
    per-positive-pair form of pytorch-metric-learning's ``NTXentLoss``), averaged per query. This is
    Sampled Softmax (Veit & Wilber Eq. 2) with logits ``cos / τ``.

    ``diagnostics`` gives COCOS (§4): per query, C^{qv-} = #negatives with ``exp(s-/τ)/Z(q) > eps``,
    their summed weight W^{qv-}, the positive weight ``1 - exp(s+/τ)/Z(q)`` and whether no negative
    contributes.
    """

    def __init__(self, temperature: float = 0.1, cocos_eps: float = COCOS_EPS) -> None:
        super().__init__()
        if temperature <= 0:
            raise LossPreconditionError(
                f"temperature={temperature} must be positive; Bleeker & de Rijke use 0.1"
            )
        self.temperature = temperature
        self.cocos_eps = cocos_eps

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs, 1.0 / self.temperature)

    def compute(self, logits: ScoredPairs) -> LossOutput:
        return {
            "image_to_text_loss": 0.5 * sampled_softmax_loss(logits.scores, logits.positives),
            "text_to_image_loss": 0.5 * sampled_softmax_loss(logits.scores.T, logits.positives),
        }

    def contributions(self, logits: ScoredPairs) -> dict[str, Tensor]:
        directions = [("image_to_text", logits.scores), ("text_to_image", logits.scores.T)]
        return query_cocos(directions, logits.positives, sampled_softmax_loss, self.cocos_eps)
