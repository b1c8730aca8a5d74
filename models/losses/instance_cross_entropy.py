"""Instance Cross Entropy (Wang et al., ICE §3.2-3.4) across modalities, both directions weighted 0.5/0.5."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from common.settings import at_least, redeclared, setting
from models.losses.base import Loss, LossOutput, register_loss
from models.losses.settings import LossSettings, Shared
from models.losses.softmax_terms import (
    ScoredPairs,
    masked_logsumexp,
    positive_pair_nll,
    query_cocos,
    scored_pairs,
)


def instance_cross_entropy_loss(cosines: Tensor, positives: Tensor, scale: float, reweight: bool) -> Tensor:
    """ICE of the anchors in the rows of ``cosines`` (candidates in the columns), divided by the anchor count.

    Value: Eq. 5 / N, ``-1/N sum_a sum_{i in P_a} log p̂(i|a)`` with the scaled matching probability
    ``p̂(i|a) = e^{s·f_a·f_i} / (e^{s·f_a·f_i} + sum_{j in N_a} e^{s·f_a·f_j})`` (Eq. 3 with s, Eq. 11):
    one matching distribution per anchor-positive pair against all of the anchor's negatives.

    With ``reweight`` the gradient is the one Eq. 15 prescribes instead of the value's own: w.r.t. the
    cosine of a positive ``-w̄(i;a)`` and of a negative ``+w̄(j;a)`` (Eq. 13-14), so that per anchor the
    positive set and the negative set each carry 1/(2N), whatever s and however easy the anchor.
    """
    anchors = cosines.shape[0]
    logits = scale * cosines
    negative_logsumexp = masked_logsumexp(logits, ~positives)
    nll = torch.where(positives, positive_pair_nll(logits, negative_logsumexp), 0.0)
    value = nll.sum() / anchors
    if not reweight:
        return value
    # 1 - p̂(i|a) = sum_j p̂(j|a,i) written as a sigmoid, which keeps its precision as p̂ -> 1.
    positive_weights = torch.where(positives, torch.sigmoid(negative_logsumexp - logits), 0.0)
    anchor_weight = (
        positive_weights.sum(dim=1, keepdim=True).detach().clamp_min(torch.finfo(cosines.dtype).tiny)
    )
    # d nll_ai / d cos_ai = -s (1 - p̂): dividing by 2 N s W_a (held constant) turns it into -w̄(i;a).
    surrogate = (nll / anchor_weight).sum() / (2 * anchors * scale)
    return value.detach() + surrogate - surrogate.detach()


@dataclass(frozen=True)
class InstanceCrossEntropySettings(LossSettings):
    #: Wang et al. require s >= 1 (Eq. 11); their Table 2 favours 64
    scale: float = setting(64.0, "s: the logits are s·cos (Wang et al. Table 2: 64)", at_least(1))
    reweight: bool = setting(True, "backpropagate the normalised weights of Eq. 13-15 (Algorithm 1 step 3)")
    cocos_eps: float = redeclared(Shared, "cocos_eps")

@register_loss("instance_cross_entropy")
class InstanceCrossEntropy(Loss[ScoredPairs]):
    """Instance Cross Entropy (Wang et al. Eq. 5, L2-normalised features §3.3, reweighting §3.4).

    An image anchor matches against the batch captions and a caption anchor against the batch images;
    its positives are the candidates of its group (the paired one; all ``C`` captions of an image with
    ``group_ids``), each in its own distribution against all negatives. Default ``scale`` s = 64 is the
    best value of Wang et al. Table 2. ``reweight`` (default, Algorithm 1 step 3) backpropagates the
    normalised weights of Eq. 13-15; the reported value is ICE either way. ``diagnostics`` uses the
    per-anchor weights that reach the cosines (N·w̄, or ŵ of Eq. 11-12 without reweighting).
    """

    settings_class = InstanceCrossEntropySettings

    def _loss(self, cosines: Tensor, positives: Tensor) -> Tensor:
        return instance_cross_entropy_loss(cosines, positives, self.scale, self.reweight)

    def _logit_loss(self, logits: Tensor, positives: Tensor) -> Tensor:
        return self._loss(logits / self.scale, positives)

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        return scored_pairs(inputs)

    def compute(self, cosines: ScoredPairs) -> LossOutput:
        return {
            "image_to_text_loss": 0.5 * self._loss(cosines.scores, cosines.positives),
            "text_to_image_loss": 0.5 * self._loss(cosines.scores.T, cosines.positives),
        }

    def contributions(self, cosines: ScoredPairs) -> dict[str, Tensor]:
        directions = [("image_to_text", cosines.scores), ("text_to_image", cosines.scores.T)]
        if self.reweight:
            # the reweighted gradient on a cosine is already a weight (Eq. 15 has no factor s)
            return query_cocos(directions, cosines.positives, self._loss, self.cocos_eps)
        # without reweighting the weights are those of the logits s·cos (ŵ of Eq. 11-12)
        logits = [(name, anchors * self.scale) for name, anchors in directions]
        return query_cocos(logits, cosines.positives, self._logit_loss, self.cocos_eps)
