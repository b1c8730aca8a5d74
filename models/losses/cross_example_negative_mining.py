"""Cross-Example Negative Mining (Veit & Wilber Eq. 6): the hardest negative pairs of the whole batch."""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.sampled_softmax import (
    COCOS_EPS,
    check_mining_parameters,
    cocos_from_weights,
    kept_negative_count,
    masked_logsumexp,
    multi_positive_cross_entropy,
    per_query_gradient_weights,
    scaled_scores_and_positives,
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
class CrossExampleNegativeMining(Loss):
    """Cross-Example Negative Mining (Veit & Wilber Eq. 6) on logits ``scale · cos`` (λ = 20).

    ``k`` is ``top_k`` when given, else ``ceil(fraction * |N_B|)``; §4.2 keep the 50% largest. As for
    Cross-Example Softmax the mined set and the positives do not depend on which modality queries, so the
    loss is returned once as ``cross_example_loss``; ``diagnostics`` reports rows and columns.
    """

    def __init__(
        self,
        scale: float = 20.0,
        fraction: float = 0.5,
        top_k: int | None = None,
        diagnostic_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        if scale <= 0:
            raise LossPreconditionError(f"scale={scale} must be positive; Veit & Wilber §4.2 use λ = 20")
        check_mining_parameters(fraction, top_k)
        self.scale = scale
        self.fraction = fraction
        self.top_k = top_k
        self.diagnostic_eps = diagnostic_eps

    def _loss(self, logits: Tensor, positives: Tensor) -> Tensor:
        return cross_example_negative_mining_loss(logits, positives, self.fraction, self.top_k)

    def forward(self, **embeddings: Tensor) -> LossOutput:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        return {"cross_example_loss": self._loss(logits, positives)}

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        weights = per_query_gradient_weights(lambda x: self._loss(x, positives), logits)
        return cocos_from_weights(
            weights, positives, self.diagnostic_eps, "image_to_text"
        ) | cocos_from_weights(weights.T, positives, self.diagnostic_eps, "text_to_image")
