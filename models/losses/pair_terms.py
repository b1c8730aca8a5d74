"""The pairwise terms several losses reuse (Thomas & Kovashka): the angular term of Eq. 2-3 and the triplet
term of Eq. 1, also used by their within-modality Eq. 6-7, the batch set-ups of those families and their
COCOS counts (Bleeker & de Rijke §4).

Builds on ``checks`` and ``base`` only. Operations are built in the order the losses always built them, so
gradients stay bit for bit as they were.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from models.losses.checks import (
    COCOS_EPS,
    LossPreconditionError,
    Neighbors,
    check_choice,
    check_embedding_matrix,
    check_negative_mask,
    check_pair_embeddings,
    contribution_summaries,
    default_group_ids,
    different_group_mask,
    neighbor_negative_mask,
)
from models.losses.distances import Distance, Negatives

ANGULAR_FORMS = ("smooth", "hinge")


# --------------------------------------------------------------- pairwise terms (Thomas & Kovashka Eq. 1-3)


def tan_squared(alpha_degrees: float) -> float:
    """tan²α of the angular loss (Wang et al. ICCV 2017); α=45° gives 1, as in the authors' released code."""
    if not 0.0 < alpha_degrees < 90.0:
        raise LossPreconditionError(
            f"alpha_degrees={alpha_degrees} is outside (0, 90): the angular bound needs an acute angle; "
            "the paper's code uses 45"
        )
    return math.tan(math.radians(alpha_degrees)) ** 2


def angular_npair_logits(
    anchor: Tensor, positive: Tensor, negatives: Tensor, form: str, tan_sq: float
) -> Tensor:
    """``[Q, P]`` per-(anchor-positive pair, negative) quantity of the angular loss.

    ``hinge``: the bracket of Eq. 2, ‖a−p‖² − 4tan²α‖n − C‖² with C = (a+p)/2.
    ``smooth``: the exponent of Wang et al.'s smooth N-pair angular loss, 4tan²α (a+p)·n − 2(1+tan²α) a·p,
    which equals the Eq. 2 bracket up to a constant on unit vectors.
    """
    check_choice("angular form", form, ANGULAR_FORMS)
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


def triplet_violations(anchor: Tensor, positive: Tensor, negatives: Tensor, distance: Distance, margin: float) -> Tensor:
    """``[Q, P]`` m + d(a_q, p_q) − d(a_q, n_p): positive where the triplet breaks the margin (Eq. 1)."""
    return margin + distance.paired(anchor, positive).unsqueeze(1) - distance.pairwise(anchor, negatives)


def triplet_terms(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    negative_mask: Tensor,
    distance: Distance,
    margin: float,
    keep: Negatives,
) -> Tensor:
    """``[Q]`` triplet loss of each anchor-positive pair over its masked negatives, the ones ``keep`` keeps
    (all of them, Bleeker Eq. 3; or the hardest, VSE++'s max violation, Eq. 1). A pair with no negatives
    contributes 0."""
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    return keep.triplet(triplet_violations(anchor, positive, negatives, distance, margin), negative_mask)


def triplet_contributions(
    anchor: Tensor,
    positive: Tensor,
    negatives: Tensor,
    negative_mask: Tensor,
    distance: Distance,
    margin: float,
    keep: Negatives,
) -> Tensor:
    """``LongTensor[Q]``: negatives in each pair's gradient (COCOS C^q, Bleeker §4): the violating ones of what
    ``keep`` keeps."""
    check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
    violating = (triplet_violations(anchor, positive, negatives, distance, margin) > 0) & negative_mask
    return keep.contributing(violating)


# ------------------------------------------------------------------- batch set-ups shared by several losses


class CrossModalPairs(NamedTuple):
    """``(name, anchors, candidate pool)`` per retrieval direction and the ``[B, B]`` valid-negative mask;
    the positive of anchor row i is row i of the pool."""

    directions: list[tuple[str, Tensor, Tensor]]
    negative_mask: Tensor


def cross_modal_pairs(
    image: Tensor, text: Tensor, group_ids: Tensor | None, *, symmetric: bool, unit_norm: bool
) -> CrossModalPairs:
    """After the input guards: image→text (and text→image when ``symmetric``) with negatives the rows of
    another group."""
    check_pair_embeddings(image, text)
    check_embedding_matrix("image", image, unit_norm=unit_norm)
    check_embedding_matrix("text", text, unit_norm=unit_norm)
    directions = [("image_to_text", image, text)]
    if symmetric:
        directions.append(("text_to_image", text, image))
    groups = default_group_ids(group_ids, image.shape[0], image.device)
    return CrossModalPairs(directions, different_group_mask(groups, groups))


class NeighborTerm(NamedTuple):
    """One within-modality term (Eq. 6 for ``text``, Eq. 7 for ``image``): row m pairs anchor m (batch row
    ``neighbor_of[m]``) with its sampled neighbor; the pool is the batch rows of the modality."""

    modality: str
    weight: float
    anchors: Tensor
    positives: Tensor
    pool: Tensor


class NeighborPairs(NamedTuple):
    """The two within-modality terms and their shared ``[M, B]`` valid-negative mask."""

    terms: list[NeighborTerm]
    negative_mask: Tensor


def neighbor_pairs(
    image: Tensor,
    text: Tensor,
    neighbors: Neighbors,
    group_ids: Tensor | None,
    text_weight: float,
    image_weight: float,
) -> NeighborPairs:
    """The text (α, Eq. 6) and image (β, Eq. 7) terms of already guarded neighbors."""
    groups = default_group_ids(group_ids, image.shape[0], image.device)
    mask = neighbor_negative_mask(groups, neighbors.of, neighbors.group_ids)
    terms = [
        NeighborTerm("text", text_weight, text[neighbors.of], neighbors.text, text),
        NeighborTerm("image", image_weight, image[neighbors.of], neighbors.image, image),
    ]
    return NeighborPairs(terms, mask)


def neighbor_contributions(
    pairs: NeighborPairs, count: Callable[[NeighborTerm, Tensor], Tensor]
) -> dict[str, Tensor]:
    """COCOS of each within-modality term, keyed ``within_text`` / ``within_image``, from
    ``count(term, negative_mask)``; a switched-off term (weight 0, the Table 4 ablations) sends no gradient
    to any negative."""
    counts = {}
    for term in pairs.terms:
        if term.weight == 0:
            counts[f"within_{term.modality}"] = term.anchors.new_zeros(
                term.anchors.shape[0], dtype=torch.long
            )
        else:
            counts[f"within_{term.modality}"] = count(term, pairs.negative_mask)
    return contribution_summaries(counts)
