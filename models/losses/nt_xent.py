"""NT-Xent (Bleeker & de Rijke Eq. 4) for image-caption retrieval, both directions weighted 0.5/0.5."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from common.settings import redeclared
from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import LossSettings, Shared
from models.losses.softmax_terms import ScoredPairs, query_cocos, sampled_softmax_loss, scored_pairs


@dataclass(frozen=True)
class NtXentSettings(LossSettings):
    temperature: float = redeclared(Shared, "temperature")  # Bleeker & de Rijke use 0.1
    cocos_eps: float = redeclared(Shared, "cocos_eps")

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

    settings_class = NtXentSettings

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
