"""NT-Xent (Bleeker & de Rijke Eq. 4) for image-caption retrieval, both directions weighted 0.5/0.5."""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.sampled_softmax import (
    COCOS_EPS,
    cocos_from_weights,
    per_query_gradient_weights,
    sampled_softmax_loss,
    scaled_scores_and_positives,
)


@register_loss("nt_xent")
class NtXent(Loss):
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

    def __init__(self, temperature: float = 0.1, diagnostic_eps: float = COCOS_EPS) -> None:
        super().__init__()
        if temperature <= 0:
            raise LossPreconditionError(
                f"temperature={temperature} must be positive; Bleeker & de Rijke use 0.1"
            )
        self.temperature = temperature
        self.diagnostic_eps = diagnostic_eps

    def forward(self, **embeddings: Tensor) -> LossOutput:
        logits, positives = scaled_scores_and_positives(embeddings, 1.0 / self.temperature)
        return {
            "image_to_text_loss": 0.5 * sampled_softmax_loss(logits, positives),
            "text_to_image_loss": 0.5 * sampled_softmax_loss(logits.T, positives),
        }

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        logits, positives = scaled_scores_and_positives(embeddings, 1.0 / self.temperature)
        result = {}
        for name, queries in (("image_to_text", logits), ("text_to_image", logits.T)):
            weights = per_query_gradient_weights(lambda x: sampled_softmax_loss(x, positives), queries)
            result |= cocos_from_weights(weights, positives, self.diagnostic_eps, name)
        return result
