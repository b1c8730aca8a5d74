"""Cross-modal triplet loss: Thomas & Kovashka (ECCV 2020) Eq. 1, in the two negative-selection forms
compared by Bleeker & de Rijke (ECIR 2022): the sum over all in-batch negatives (their Eq. 3, Trip+NP+Sym)
and VSE++'s hardest negative (max violation, their Eq. 1-2).

Every form is written as [m + d(a,p) − d(a,n)]_+; with ``cosine`` d = 1 − s this is [m − s(a,p) + s(a,n)]_+.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from models.losses.angular import (
    check_negative_mask,
    contribution_summary,
    cross_modal_directions,
)
from models.losses.base import (
    Loss,
    LossOutput,
    LossPreconditionError,
    register_loss,
)

DISTANCES = ("squared_l2", "cosine", "euclidean")
NEGATIVE_MODES = ("all", "hardest")
#: below this squared distance sqrt's gradient is cut, so identical embeddings give 0 gradient, not NaN
EUCLIDEAN_FLOOR = 1e-16


def _check_distance(distance: str) -> None:
    if distance not in DISTANCES:
        raise LossPreconditionError(f"distance {distance!r} is unknown; choose one of {DISTANCES}")


def paired_distance(x: Tensor, y: Tensor, distance: str) -> Tensor:
    """``[N]`` distance between row i of ``x`` and row i of ``y`` (cosine distance is 1 − x·y)."""
    _check_distance(distance)
    if distance == "cosine":
        return 1.0 - (x * y).sum(dim=1)
    squared = (x - y).pow(2).sum(dim=1)
    return squared if distance == "squared_l2" else squared.clamp_min(EUCLIDEAN_FLOOR).sqrt()


def pairwise_distance(x: Tensor, y: Tensor, distance: str) -> Tensor:
    """``[N, P]`` distance between every row of ``x`` and every row of ``y``."""
    _check_distance(distance)
    if distance == "cosine":
        return 1.0 - x @ y.T
    # expanded so no [N, P, D] tensor is built; the clamp undoes rounding below 0
    squared = (
        x.pow(2).sum(dim=1, keepdim=True) - 2.0 * x @ y.T + y.pow(2).sum(dim=1).unsqueeze(0)
    ).clamp_min(0.0)
    return squared if distance == "squared_l2" else squared.clamp_min(EUCLIDEAN_FLOOR).sqrt()


def triplet_violations(
    anchor: Tensor, positive: Tensor, negatives: Tensor, distance: str, margin: float
) -> Tensor:
    """``[Q, P]`` m + d(a_q, p_q) − d(a_q, n_p): positive where the triplet breaks the margin (Eq. 1)."""
    return (
        margin
        + paired_distance(anchor, positive, distance).unsqueeze(1)
        - pairwise_distance(anchor, negatives, distance)
    )


def triplet_terms(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    negative_mask: Tensor,
    distance: str,
    margin: float,
    negatives_mode: str = "all",
) -> Tensor:
    """``[Q]`` triplet loss of each anchor-positive pair over its masked negatives.

    ``all``: Σ_n [m + d(a,p) − d(a,n)]_+ (Bleeker Eq. 3). ``hardest``: the term of the most violating
    negative only (VSE++ max violation, Bleeker Eq. 1). A pair with no negatives contributes 0.
    """
    if negatives_mode not in NEGATIVE_MODES:
        raise LossPreconditionError(
            f"negatives={negatives_mode!r} is unknown; choose one of {NEGATIVE_MODES}"
        )
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    violations = triplet_violations(anchor, positive, negatives, distance, margin)
    if negatives_mode == "all":
        return torch.relu(violations).masked_fill(~negative_mask, 0.0).sum(dim=1)
    hardest = violations.masked_fill(~negative_mask, -math.inf).max(dim=1).values
    return torch.where(negative_mask.any(dim=1), torch.relu(hardest), torch.zeros_like(hardest))


def triplet_contributions(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    negative_mask: Tensor,
    distance: str,
    margin: float,
    negatives_mode: str = "all",
) -> Tensor:
    """``LongTensor[Q]``: negatives in each pair's gradient (COCOS C^q, Bleeker §4): violating terms for
    ``all``; 1 if the hardest negative violates the margin, else 0, for ``hardest``."""
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    violating = (triplet_violations(anchor, positive, negatives, distance, margin) > 0) & negative_mask
    if negatives_mode == "hardest":
        return violating.any(dim=1).long()
    return violating.sum(dim=1)


@register_loss("triplet")
class Triplet(Loss):
    """Triplet loss over in-batch negatives, image→text and (``symmetric``) text→image.

    Negatives of query i are the other modality's rows of another group; each direction is the mean over
    the batch's anchor-positive pairs (VSE++ sums instead: multiply by the batch size to compare).
    """

    def __init__(
        self,
        distance: str = "squared_l2",
        negatives: str = "all",
        margin: float = 0.2,
        symmetric: bool = True,
    ) -> None:
        super().__init__()
        _check_distance(distance)
        if negatives not in NEGATIVE_MODES:
            raise LossPreconditionError(f"negatives={negatives!r} is unknown; choose one of {NEGATIVE_MODES}")
        self.distance = distance
        self.negatives = negatives
        self.margin = margin
        self.symmetric = symmetric

    def forward(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> LossOutput:
        directions, mask = cross_modal_directions(
            image, text, group_ids, symmetric=self.symmetric, unit_norm=self.distance == "cosine"
        )
        return {
            f"{name}_loss": triplet_terms(
                anchors, others, others, mask, self.distance, self.margin, self.negatives
            ).mean()
            for name, anchors, others in directions
        }

    @torch.no_grad()
    def diagnostics(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> dict[str, Tensor]:
        directions, mask = cross_modal_directions(
            image, text, group_ids, symmetric=self.symmetric, unit_norm=self.distance == "cosine"
        )
        summary: dict[str, Tensor] = {}
        for name, anchors, others in directions:
            counts = triplet_contributions(
                anchors, others, others, mask, self.distance, self.margin, self.negatives
            )
            summary.update(contribution_summary(name, counts))
        return summary
