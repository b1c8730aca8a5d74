"""Cross-modal angular N-pair loss with the symmetric constraint: Thomas & Kovashka (ECCV 2020) Eq. 2-4.

Also home of the pieces every pairwise loss here shares: the angular term itself (reused by the
within-modality loss of Eq. 6-7), input guards, and the COCOS gradient-contribution summary of
Bleeker & de Rijke (ECIR 2022, §4).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from models.losses.base import (
    Loss,
    LossOutput,
    LossPreconditionError,
    check_pair_embeddings,
    default_group_ids,
    register_loss,
)

ANGULAR_FORMS = ("smooth", "hinge")
#: Bleeker & de Rijke §5 threshold: a negative whose gradient weight is below it counts as not contributing.
COCOS_EPS = 0.01
#: loose enough for bf16 autocast outputs (eps 7.8e-3), tight enough to catch un-normalised embeddings.
UNIT_NORM_TOLERANCE = 1e-2


def tan_squared(alpha_degrees: float) -> float:
    """tan²α of the angular loss (Wang et al. ICCV 2017); α=45° gives 1, as in the authors' released code."""
    if not 0.0 < alpha_degrees < 90.0:
        raise LossPreconditionError(
            f"alpha_degrees={alpha_degrees} is outside (0, 90): the angular bound needs an acute angle; "
            "the paper's code uses 45"
        )
    return math.tan(math.radians(alpha_degrees)) ** 2


def check_embedding_matrix(name: str, embeddings: Tensor, *, unit_norm: bool) -> None:
    """Guard: ``embeddings`` is ``[N, D]`` and, where the loss's algebra assumes it, L2-normalised rows."""
    if embeddings.dim() != 2:
        raise LossPreconditionError(
            f"{name} embeddings have shape {tuple(embeddings.shape)}; this loss takes [N, D] rows "
            "(multi-embedding [B, K, D] outputs need a loss that matches the K embeddings first)"
        )
    if unit_norm and embeddings.shape[0] > 0:
        norms = embeddings.detach().norm(dim=1)
        if bool(((norms - 1.0).abs() > UNIT_NORM_TOLERANCE).any()):
            raise LossPreconditionError(
                f"{name} embeddings are not L2-normalised (row norms from {norms.min().item():.4f} to "
                f"{norms.max().item():.4f}); apply torch.nn.functional.normalize(x, dim=-1) in the encoder"
            )


def check_negative_mask(negative_mask: Tensor, num_queries: int, num_candidates: int) -> None:
    """Guard: one boolean row of candidate negatives per query."""
    if negative_mask.dtype != torch.bool or negative_mask.shape != (num_queries, num_candidates):
        raise LossPreconditionError(
            f"negative_mask must be a bool tensor of shape ({num_queries}, {num_candidates}), got "
            f"{negative_mask.dtype} {tuple(negative_mask.shape)}: True where a candidate is a negative"
        )


def different_group_mask(query_groups: Tensor, candidate_groups: Tensor) -> Tensor:
    """``[Q, P]`` bool: candidate p may serve as a negative for query q (their groups differ)."""
    return query_groups.unsqueeze(1) != candidate_groups.unsqueeze(0)


def angular_npair_logits(
    anchor: Tensor, positive: Tensor, negatives: Tensor, form: str, tan_sq: float
) -> Tensor:
    """``[Q, P]`` per-(anchor-positive pair, negative) quantity of the angular loss.

    ``hinge``: the bracket of Eq. 2, ‖a−p‖² − 4tan²α‖n − C‖² with C = (a+p)/2.
    ``smooth``: the exponent of Wang et al.'s smooth N-pair angular loss, 4tan²α (a+p)·n − 2(1+tan²α) a·p,
    which equals the Eq. 2 bracket up to a constant on unit vectors.
    """
    if form not in ANGULAR_FORMS:
        raise LossPreconditionError(f"angular form {form!r} is unknown; choose one of {ANGULAR_FORMS}")
    if form == "smooth":
        anchor_dot_positive = (anchor * positive).sum(dim=1, keepdim=True)
        return 4.0 * tan_sq * (anchor + positive) @ negatives.T - 2.0 * (1.0 + tan_sq) * anchor_dot_positive
    # ‖a−p‖² taken directly so identical pairs give exactly 0; ‖n−C‖² expanded so no [Q, P, D] tensor is
    # built, and clamped because the expansion can round a true 0 to a tiny negative.
    anchor_positive_sq = (anchor - positive).pow(2).sum(dim=1, keepdim=True)
    center = (anchor + positive) / 2.0
    negative_center_sq = (
        negatives.pow(2).sum(dim=1).unsqueeze(0)
        - 2.0 * center @ negatives.T
        + center.pow(2).sum(dim=1, keepdim=True)
    ).clamp_min(0.0)
    return anchor_positive_sq - 4.0 * tan_sq * negative_center_sq


def angular_npair_terms(
    anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor, form: str, tan_sq: float
) -> Tensor:
    """``[Q]`` angular N-pair loss of each anchor-positive pair over its masked negatives (Eq. 3).

    ``hinge``: Σ_n [‖a−p‖² − 4tan²α‖n − C‖²]_+ (Eq. 2 summed over the negatives, Eq. 3).
    ``smooth``: log(1 + Σ_n exp(4tan²α (a+p)·n − 2(1+tan²α) a·p)), the smooth N-pair angular loss of
    Wang et al. (ICCV 2017).
    A pair with no negatives contributes 0.
    """
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    logits = angular_npair_logits(anchor, positive, negatives, form, tan_sq)
    if form == "hinge":
        return torch.relu(logits).masked_fill(~negative_mask, 0.0).sum(dim=1)
    # the appended zero column is the "1 +" inside the log and keeps rows without negatives finite
    masked = logits.masked_fill(~negative_mask, -math.inf)
    return torch.logsumexp(torch.cat([masked, masked.new_zeros(masked.shape[0], 1)], dim=1), dim=1)


def angular_npair_contributions(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    negative_mask: Tensor,
    form: str,
    tan_sq: float,
    eps: float = COCOS_EPS,
) -> Tensor:
    """``LongTensor[Q]``: negatives contributing to each pair's gradient (COCOS, Bleeker & de Rijke §4).

    ``hinge``: terms that violate the bound (non-zero hinge). ``smooth``: negatives whose weight
    exp(f_n) / (1 + Σ_k exp(f_k)) in the gradient of the log-sum-exp exceeds ``eps``.
    """
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    logits = angular_npair_logits(anchor, positive, negatives, form, tan_sq)
    if form == "hinge":
        return ((logits > 0) & negative_mask).sum(dim=1)
    masked = logits.masked_fill(~negative_mask, -math.inf)
    weights = torch.softmax(torch.cat([masked, masked.new_zeros(masked.shape[0], 1)], dim=1), dim=1)[:, :-1]
    return ((weights > eps) & negative_mask).sum(dim=1)


def contribution_summary(prefix: str, counts: Tensor) -> dict[str, Tensor]:
    """Per-query COCOS in the keys every loss here reports: ``{prefix}_contributing_negatives`` (C^q) and
    ``{prefix}_no_gradient`` (True where C^q = 0; its batch sum is C⁰)."""
    return {f"{prefix}_contributing_negatives": counts, f"{prefix}_no_gradient": counts == 0}


def cross_modal_directions(
    image: Tensor, text: Tensor, group_ids: Tensor | None, *, symmetric: bool, unit_norm: bool
) -> tuple[list[tuple[str, Tensor, Tensor]], Tensor]:
    """After the input guards: ``(name, anchors, candidate pool)`` per retrieval direction (image→text, and
    text→image when symmetric) and the ``[B, B]`` mask of valid negatives (rows of another group)."""
    check_pair_embeddings(image, text)
    check_embedding_matrix("image", image, unit_norm=unit_norm)
    check_embedding_matrix("text", text, unit_norm=unit_norm)
    directions = [("image_to_text", image, text)]
    if symmetric:
        directions.append(("text_to_image", text, image))
    groups = default_group_ids(group_ids, image.shape[0], image.device)
    return directions, different_group_mask(groups, groups)


@register_loss("angular")
class Angular(Loss):
    """Angular N-pair loss over in-batch negatives, both retrieval directions (Eq. 4).

    Image→text: anchor image i, positive text i, negatives every text row of another group; text→image
    swaps the modalities. Each direction is the mean over the batch's anchor-positive pairs.
    """

    def __init__(
        self,
        form: str = "smooth",
        alpha_degrees: float = 45.0,
        symmetric: bool = True,
        cocos_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        if form not in ANGULAR_FORMS:
            raise LossPreconditionError(f"Angular form {form!r} is unknown; choose one of {ANGULAR_FORMS}")
        self.form = form
        self.alpha_degrees = alpha_degrees
        self.tan_sq = tan_squared(alpha_degrees)
        self.symmetric = symmetric
        self.cocos_eps = cocos_eps

    def forward(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> LossOutput:
        directions, mask = cross_modal_directions(
            image, text, group_ids, symmetric=self.symmetric, unit_norm=self.form == "smooth"
        )
        return {
            f"{name}_loss": angular_npair_terms(anchors, others, others, mask, self.form, self.tan_sq).mean()
            for name, anchors, others in directions
        }

    @torch.no_grad()
    def diagnostics(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> dict[str, Tensor]:
        directions, mask = cross_modal_directions(
            image, text, group_ids, symmetric=self.symmetric, unit_norm=self.form == "smooth"
        )
        summary: dict[str, Tensor] = {}
        for name, anchors, others in directions:
            counts = angular_npair_contributions(
                anchors, others, others, mask, self.form, self.tan_sq, self.cocos_eps
            )
            summary.update(contribution_summary(name, counts))
        return summary
