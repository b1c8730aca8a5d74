"""Cross-Example Softmax (Veit & Wilber Eq. 5): every non-matching pair of the batch is in every partition."""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.sampled_softmax import (
    COCOS_EPS,
    cocos_from_weights,
    masked_logsumexp,
    multi_positive_cross_entropy,
    per_query_gradient_weights,
    scaled_scores_and_positives,
)


def cross_example_softmax_loss(logits: Tensor, positives: Tensor) -> Tensor:
    """Veit & Wilber Eq. 5: each positive pair against ``N_B``, every negative entry of the batch matrix."""
    batch_partition = masked_logsumexp(logits.reshape(1, -1), ~positives.reshape(1, -1))
    return multi_positive_cross_entropy(logits, positives, batch_partition)


@register_loss("cross_example_softmax")
class CrossExampleSoftmax(Loss):
    """Cross-Example Softmax cross-entropy (Veit & Wilber Eq. 5) on logits ``scale · cos`` (λ = 20).

    The partition ``N_B`` (Eq. 4) is every off-diagonal (with ``group_ids``: every cross-group) entry of
    the image-text score matrix, shared by all queries. That set and the positive entries are the same
    whether images or captions are the queries, so the loss has no direction: it is returned once, as
    ``cross_example_loss``. ``diagnostics`` still reports COCOS per image query (matrix rows) and per
    caption query (columns); a negative entry's weight includes its share of the other queries' terms.
    """

    def __init__(self, scale: float = 20.0, diagnostic_eps: float = COCOS_EPS) -> None:
        super().__init__()
        if scale <= 0:
            raise LossPreconditionError(f"scale={scale} must be positive; Veit & Wilber §4.2 use λ = 20")
        self.scale = scale
        self.diagnostic_eps = diagnostic_eps

    def forward(self, **embeddings: Tensor) -> LossOutput:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        return {"cross_example_loss": cross_example_softmax_loss(logits, positives)}

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        logits, positives = scaled_scores_and_positives(embeddings, self.scale)
        weights = per_query_gradient_weights(lambda x: cross_example_softmax_loss(x, positives), logits)
        return cocos_from_weights(
            weights, positives, self.diagnostic_eps, "image_to_text"
        ) | cocos_from_weights(weights.T, positives, self.diagnostic_eps, "text_to_image")
