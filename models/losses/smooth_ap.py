"""SmoothAP (Bleeker & de Rijke Eq. 5-8, after Brown et al.) for queries with several positives."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from common.settings import redeclared
from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.checks import value_checks_enabled
from models.losses.settings import LossSettings, Shared
from models.losses.softmax_terms import ScoredPairs, scored_pairs


def smooth_ranks(scores: Tensor, positives: Tensor, temperature: float) -> tuple[Tensor, Tensor, Tensor]:
    """Smoothed ranks of every candidate ``i`` for every query ``q`` (rows of ``scores``), each ``[Q, B]``,
    plus ``G(D_qij; τ)`` as ``[Q, B, B]``.

    ``D_qij = s_qj - s_qi`` (Eq. 16: how far candidate ``j`` scores above ``i``) and ``G`` is the sigmoid of
    Eq. 7. Returns ``(R(i, S_P), R(i, S_Ω), G)`` with ``R(i, S_P) = 1 + sum_{j in P, j != i} G`` and
    ``R(i, S_Ω) = R(i, S_P) + sum_{j in N} G`` (Eq. 25-26).
    """
    candidates = scores.shape[1]
    above = torch.sigmoid((scores[:, None, :] - scores[:, :, None]) / temperature)
    other = ~torch.eye(candidates, dtype=torch.bool, device=scores.device)
    positive_others = positives[:, None, :] & other
    rank_among_positives = 1 + torch.where(positive_others, above, 0.0).sum(dim=2)
    rank_among_all = rank_among_positives + torch.where(positives[:, None, :], 0.0, above).sum(dim=2)
    return rank_among_positives, rank_among_all, above


def smooth_ap_loss(scores: Tensor, positives: Tensor, temperature: float) -> Tensor:
    """Eq. 8: ``1/|B| sum_q (1 - AP_q)`` with the smoothed ``AP_q = 1/|P| sum_{i in P} R(i,S_P) / R(i,S_Ω)``."""
    rank_among_positives, rank_among_all, _ = smooth_ranks(scores, positives, temperature)
    precision = torch.where(positives, rank_among_positives / rank_among_all, 0.0)
    average_precision = precision.sum(dim=1) / positives.sum(dim=1)
    return (1 - average_precision).mean()


def smooth_ap_contributing_triplets(
    scores: Tensor, positives: Tensor, temperature: float, eps: float
) -> Tensor:
    """C^q_Smooth of Eq. 13 per query: triplets ``(i in P, j != i)`` with ``sim(D_ij) / R(i,S_Ω)^2 > eps``,
    averaged over the query's positives, where ``sim = G (1 - G) / τ`` (Eq. 24)."""
    _, rank_among_all, above = smooth_ranks(scores, positives, temperature)
    sigmoid_slope = above * (1 - above) / temperature
    other = ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)
    contributing = (sigmoid_slope / rank_among_all[:, :, None] ** 2 > eps) & other & positives[:, :, None]
    return contributing.sum(dim=(1, 2)) / positives.sum(dim=1)


@dataclass(frozen=True)
class SmoothApSettings(LossSettings):
    temperature: float = redeclared(Shared, "temperature", 0.01)  # Bleeker & de Rijke Table 1: 0.01
    cocos_eps: float = redeclared(Shared, "cocos_eps")

@register_loss("smooth_ap")
class SmoothAp(Loss[ScoredPairs]):
    """SmoothAP (Bleeker & de Rijke Eq. 8) in both directions, weighted 0.5/0.5; τ = 0.01 as in Table 1.

    The candidates of a query are all batch items of the other modality; its positives are those of
    its group. With one positive per query the smoothed AP reduces to ``1 / (1 + sum_N G)``, a sigmoid
    hinge on single triplets rather than a ranking objective, so the loss refuses such batches: build
    them from P items times their C captions and pass ``group_ids`` (Bleeker & de Rijke §3 take all k
    captions of each image into a batch). ``diagnostics`` gives C^q_Smooth (Eq. 13) per query and
    whether it is zero (C^0).
    """

    needs = frozenset({"group_mates"})

    settings_class = SmoothApSettings

    def prepare(self, **inputs: Tensor) -> ScoredPairs:
        scores = scored_pairs(inputs)
        if value_checks_enabled() and bool((scores.positives.sum(dim=1) == 1).all()):
            raise LossPreconditionError(
                "every query has exactly one positive, where SmoothAP degenerates to a per-triplet sigmoid; "
                "build batches with several positives per query (sample P images x their C captions, "
                "repeat each image row per caption) and pass group_ids with one id per image"
            )
        return scores

    def compute(self, scores: ScoredPairs) -> LossOutput:
        return {
            "image_to_text_loss": 0.5 * smooth_ap_loss(scores.scores, scores.positives, self.temperature),
            "text_to_image_loss": 0.5 * smooth_ap_loss(scores.scores.T, scores.positives, self.temperature),
        }

    def contributions(self, scores: ScoredPairs) -> dict[str, Tensor]:
        result = {}
        for name, queries in (("image_to_text", scores.scores), ("text_to_image", scores.scores.T)):
            triplets = smooth_ap_contributing_triplets(
                queries, scores.positives, self.temperature, self.cocos_eps
            )
            result[f"{name}_contributing_triplets"] = triplets
            result[f"{name}_no_gradient"] = triplets == 0
        return result
