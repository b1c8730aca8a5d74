"""PVSE+Ours (Thomas & Kovashka, Table 1): the within-modality semantic-neighbourhood constraints of Eq. 6
(text) and Eq. 7 (image) on PVSE's multiple-instance similarity. A PVSE+Ours variant lists this loss next
to ``pvse_mil`` (model ``pvse``, text neighbours), as "Ours" lists ``within_modality`` next to ``angular``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from models.losses.angular import contribution_summary
from models.losses.base import (
    NEIGHBOR_KEYWORDS,
    Loss,
    LossOutput,
    LossPreconditionError,
    check_pair_embeddings,
    default_group_ids,
    register_loss,
)
from models.losses.pvse_mil import check_multi_embeddings, mil_similarity, paired_mil_similarity
from models.losses.within_modality import neighbour_negative_mask

NEGATIVE_MODES = ("hardest", "all")


def within_modality_violations(
    anchors: Tensor, positives: Tensor, candidates: Tensor, margin: float
) -> Tensor:
    """``[M, B]`` ``margin + s(a_m, n_b) - s(a_m, p_m)`` with ``s`` the MIL similarity: positive where batch
    row b, if a valid negative, breaks the margin for anchor m."""
    positive = paired_mil_similarity(anchors, positives)
    return margin + mil_similarity(anchors, candidates) - positive.unsqueeze(1)


def within_modality_hinge(
    anchors: Tensor,
    positives: Tensor,
    candidates: Tensor,
    valid_negative: Tensor,
    margin: float,
    negatives: str,
) -> Tensor:
    """Mean over anchors of ``[margin + s(a, n) - s(a, p)]_+`` with ``s`` the MIL similarity, reduced over the
    valid negatives ``n`` by their maximum ("hardest") or their sum ("all", the N-pairs sum of Eq. 3).

    ``anchors``/``positives`` are ``[M, K, D]`` (row m: an anchor and its sampled neighbour), ``candidates``
    ``[B, K, D]`` the batch rows, ``valid_negative`` ``[M, B]`` bool. Anchors without a valid negative add 0.
    """
    if anchors.shape[0] == 0:
        return candidates.sum() * 0.0  # keeps the graph so a batch without neighbours still backpropagates
    violations = within_modality_violations(anchors, positives, candidates, margin).clamp(min=0)
    violations = violations.masked_fill(~valid_negative, 0.0)
    per_anchor = violations.amax(dim=1) if negatives == "hardest" else violations.sum(dim=1)
    return per_anchor.mean()


def within_modality_contributions(
    anchors: Tensor,
    positives: Tensor,
    candidates: Tensor,
    valid_negative: Tensor,
    margin: float,
    negatives: str,
) -> Tensor:
    """``LongTensor[M]``: negatives in each anchor's gradient in :func:`within_modality_hinge` (COCOS C^q,
    Bleeker & de Rijke §4): the violating valid negatives for "all"; for "hardest", 1 when the hardest valid
    negative breaks the margin (exactly when some valid negative does), else 0."""
    violating = (within_modality_violations(anchors, positives, candidates, margin) > 0) & valid_negative
    return violating.any(dim=1).long() if negatives == "hardest" else violating.sum(dim=1)


@register_loss("pvse_within_modality")
class PvseWithinModality(Loss):
    """``alpha * L_text + beta * L_img`` (Thomas & Kovashka Eq. 6-8) on PVSE's multiple-instance similarity.

    For row m of the neighbour tensors, the anchor is batch row ``i = neighbor_of[m]`` and the positive its
    sampled semantic neighbour ``i'`` (Eq. 5): ``neighbor_text[m]`` for L_text (Eq. 6) and ``neighbor_image[m]``
    for L_img (Eq. 7). Negatives are the batch rows of the same modality whose group differs from both the
    anchor's and the neighbour's (``neighbor_group_ids``), so the neighbour's own row is never a negative.

    Why a hinge on the MIL similarity rather than the angular loss of Eq. 6-7 on the best-matching pair:
    a PVSE instance is a *set* of K embeddings compared by ``max_{k,l}`` (the score retrieval ranks by and
    the PVSE ranking terms use). The hinge constrains exactly that score, so "neighbours stay closer than
    non-neighbours" holds in the similarity the model is evaluated with. The angular form needs single
    points: picking the max-pair embeddings of anchor and positive leaves no principled choice of which of
    the negative's K embeddings to compare with their centre ``C_i``, and the result would constrain a
    geometry (distances to ``C_i``) that retrieval never reads. The hinge is the paper's triplet variant
    (Eq. 1 with ``||a - b||^2 = 2 - 2 a.b`` on unit vectors), so the defaults ``alpha = 0.3``, ``beta = 0.1``
    are the paper's values for L_OURS_trip (§3.3); the margin is PVSE's 0.1. ``negatives="hardest"`` reduces
    like the PVSE ranking terms this is added to (VSE++ hardest negative); ``"all"`` sums over every valid
    negative as the N-pairs form of Eq. 3 does.

    The PVSE ranking, diversity and MMD terms are not repeated here: they come from ``pvse_mil``.
    """

    needs: ClassVar[frozenset[str]] = NEIGHBOR_KEYWORDS

    def __init__(
        self,
        alpha: float = 0.3,
        beta: float = 0.1,
        within_margin: float = 0.1,
        negatives: str = "hardest",
    ) -> None:
        super().__init__()
        if alpha < 0 or beta < 0 or within_margin < 0:
            raise ValueError(
                f"alpha, beta and within_margin must be >= 0, got {alpha}, {beta}, {within_margin}"
            )
        if negatives not in NEGATIVE_MODES:
            raise ValueError(f"negatives must be one of {NEGATIVE_MODES}, got {negatives!r}")
        self.alpha = alpha
        self.beta = beta
        self.within_margin = within_margin
        self.negatives = negatives

    def _modalities(
        self,
        image: Tensor,
        text: Tensor,
        neighbor_image: Tensor | None,
        neighbor_text: Tensor | None,
        neighbor_of: Tensor | None,
        neighbor_group_ids: Tensor | None,
        group_ids: Tensor | None,
    ) -> tuple[list[tuple[str, float, Tensor, Tensor, Tensor]], Tensor]:
        """Guards, then ``(modality, weight, anchors, positives, batch rows)`` for text (Eq. 6) and image
        (Eq. 7), and the ``[M, B]`` mask of valid negatives."""
        if neighbor_image is None or neighbor_text is None or neighbor_of is None:
            raise LossPreconditionError(
                "pvse_within_modality needs neighbor_image, neighbor_text [M, K, D] and neighbor_of [M]: sample "
                "semantic neighbours (Eq. 5) for the batch and encode them with the PVSE model"
            )
        check_multi_embeddings("image", image)
        check_multi_embeddings("text", text)
        check_pair_embeddings(image, text)
        check_multi_embeddings("neighbor_image", neighbor_image)
        check_multi_embeddings("neighbor_text", neighbor_text)
        batch, num_neighbors = image.shape[0], neighbor_of.shape[0]
        if (
            neighbor_image.shape != (num_neighbors, *image.shape[1:])
            or neighbor_text.shape != neighbor_image.shape
        ):
            raise LossPreconditionError(
                f"neighbor_image {tuple(neighbor_image.shape)} and neighbor_text {tuple(neighbor_text.shape)} must "
                f"be [M, K, D] = [{num_neighbors}, {image.shape[1]}, {image.shape[2]}]: one row per neighbor_of entry"
            )
        if num_neighbors and (int(neighbor_of.min()) < 0 or int(neighbor_of.max()) >= batch):
            raise LossPreconditionError(f"neighbor_of must index batch rows 0..{batch - 1}")
        if neighbor_group_ids is not None and neighbor_group_ids.shape != (num_neighbors,):
            raise LossPreconditionError(
                f"neighbor_group_ids must have shape ({num_neighbors},), got {tuple(neighbor_group_ids.shape)}"
            )
        groups = default_group_ids(group_ids, batch, image.device)
        valid_negative = neighbour_negative_mask(groups, neighbor_of, neighbor_group_ids)
        modalities = [
            ("text", self.alpha, text[neighbor_of], neighbor_text, text),
            ("image", self.beta, image[neighbor_of], neighbor_image, image),
        ]
        return modalities, valid_negative

    def forward(
        self,
        *,
        image: Tensor,
        text: Tensor,
        neighbor_image: Tensor | None = None,
        neighbor_text: Tensor | None = None,
        neighbor_of: Tensor | None = None,
        neighbor_group_ids: Tensor | None = None,
        group_ids: Tensor | None = None,
        **_: Tensor,
    ) -> LossOutput:
        modalities, valid_negative = self._modalities(
            image, text, neighbor_image, neighbor_text, neighbor_of, neighbor_group_ids, group_ids
        )
        losses: LossOutput = {}
        for modality, weight, anchors, positives, pool in modalities:
            term = within_modality_hinge(
                anchors, positives, pool, valid_negative, self.within_margin, self.negatives
            )
            losses[f"{modality}_within_modality_loss"] = weight * term
        return losses

    @torch.no_grad()
    def diagnostics(
        self,
        *,
        image: Tensor,
        text: Tensor,
        neighbor_image: Tensor | None = None,
        neighbor_text: Tensor | None = None,
        neighbor_of: Tensor | None = None,
        neighbor_group_ids: Tensor | None = None,
        group_ids: Tensor | None = None,
        **_: Tensor,
    ) -> dict[str, Tensor]:
        """COCOS per neighbour pair, keyed ``within_text`` / ``within_image`` as ``within_modality`` reports
        it. A batch without neighbour pairs has no queries for this loss and reports nothing (an empty count
        would have no per-query mean)."""
        modalities, valid_negative = self._modalities(
            image, text, neighbor_image, neighbor_text, neighbor_of, neighbor_group_ids, group_ids
        )
        if valid_negative.shape[0] == 0:
            return {}
        summary: dict[str, Tensor] = {}
        for modality, weight, anchors, positives, pool in modalities:
            if weight == 0:  # a switched-off term (an ablation) sends no gradient to any negative
                counts = anchors.new_zeros(anchors.shape[0], dtype=torch.long)
            else:
                counts = within_modality_contributions(
                    anchors, positives, pool, valid_negative, self.within_margin, self.negatives
                )
            summary.update(contribution_summary(f"within_{modality}", counts))
        return summary
