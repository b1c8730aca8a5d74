"""Stochastic Negative Mining (Veit & Wilber Eq. 3): each query's partition holds only its hardest negatives."""

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


@register_loss("stochastic_negative_mining")
class StochasticNegativeMining(Loss):
    """Sampled Softmax whose per-query partition keeps only the hardest negatives (Veit & Wilber Eq. 3).

    ``k`` is ``top_k`` when given, else ``ceil(fraction * #negatives of the query)``; Veit & Wilber
    §4.2 keep "the 50% largest scores". Logits are ``scale · cos`` (λ = 20). Both directions 0.5/0.5
    by default; ``symmetric=False`` trains the paper's text-to-image direction only.
    """

    def __init__(
        self,
        scale: float = 20.0,
        fraction: float = 0.5,
        top_k: int | None = None,
        symmetric: bool = True,
        diagnostic_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        if scale <= 0:
            raise LossPreconditionError(f"scale={scale} must be positive; Veit & Wilber §4.2 use λ = 20")
        check_mining_parameters(fraction, top_k)
        self.scale = scale
        self.fraction = fraction
        self.top_k = top_k
        self.symmetric = symmetric
        self.diagnostic_eps = diagnostic_eps

    def _loss(self, logits: Tensor, positives: Tensor) -> Tensor:
        return stochastic_negative_mining_loss(logits, positives, self.fraction, self.top_k)

    def forward(self, **embeddings: Tensor) -> LossOutput:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        directions = trained_directions(logits, self.symmetric)
        weight = 1.0 / len(directions)
        return {f"{name}_loss": weight * self._loss(queries, positives) for name, queries in directions}

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        result = {}
        for name, queries in trained_directions(logits, self.symmetric):
            weights = per_query_gradient_weights(lambda x: self._loss(x, positives), queries)
            result |= cocos_from_weights(weights, positives, self.diagnostic_eps, name)
        return result
