"""PVSE+Ours (Thomas & Kovashka, Table 1): the within-modality semantic-neighborhood constraints of Eq. 6
(text) and Eq. 7 (image) on PVSE's multiple-instance similarity. A PVSE+Ours variant lists this loss next
to ``pvse_mil`` (model ``pvse``, text neighbors), as "Ours" lists ``within_modality`` next to ``angular``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from common.settings import at_least, setting
from models.losses.base import NEIGHBOR_KEYWORDS, Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.checks import (
    Neighbors,
    check_multi_embeddings,
    check_pair_embeddings,
    mil_similarity,
    value_checks_enabled,
)
from models.losses.distances import NEGATIVES, Negatives, negatives_named
from models.losses.pair_terms import (
    NeighborPairs,
    NeighborTerm,
    neighbor_contributions,
    neighbor_pairs,
)
from models.losses.settings import LossSettings, choice


def paired_mil_similarity(first: Tensor, second: Tensor) -> Tensor:
    """Row-wise MIL similarity ``[M]``: ``max_{k, l} <first[m, k], second[m, l]>`` for ``[M, K, D]`` inputs."""
    check_multi_embeddings("first", first)
    if first.shape != second.shape:
        raise LossPreconditionError(
            f"paired sets must have the same shape, got {tuple(first.shape)} and {tuple(second.shape)}"
        )
    return torch.einsum("mkd,mld->mkl", first, second).flatten(1).amax(dim=-1)


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
    keep: Negatives,
) -> Tensor:
    """Mean over anchors of ``[margin + s(a, n) - s(a, p)]_+`` with ``s`` the MIL similarity, reduced over the
    valid negatives ``n`` by their maximum ("hardest") or their sum ("all", the N-pairs sum of Eq. 3).

    ``anchors``/``positives`` are ``[M, K, D]`` (row m: an anchor and its sampled neighbor), ``candidates``
    ``[B, K, D]`` the batch rows, ``valid_negative`` ``[M, B]`` bool. Anchors without a valid negative add 0.
    """
    if anchors.shape[0] == 0:
        return candidates.sum() * 0.0  # keeps the graph so a batch without neighbors still backpropagates
    violations = within_modality_violations(anchors, positives, candidates, margin).clamp(min=0)
    violations = violations.masked_fill(~valid_negative, 0.0)
    return keep.hinged(violations).mean()


def within_modality_contributions(
    anchors: Tensor,
    positives: Tensor,
    candidates: Tensor,
    valid_negative: Tensor,
    margin: float,
    keep: Negatives,
) -> Tensor:
    """``LongTensor[M]``: negatives in each anchor's gradient in :func:`within_modality_hinge` (COCOS C^q,
    Bleeker & de Rijke §4): the violating valid negatives for "all"; for "hardest", 1 when the hardest valid
    negative breaks the margin (exactly when some valid negative does), else 0."""
    violating = (within_modality_violations(anchors, positives, candidates, margin) > 0) & valid_negative
    return keep.contributing(violating)


@dataclass(frozen=True)
class PvseWithinModalitySettings(LossSettings):
    #: the paper's values for L_OURS_trip (§3.3)
    text_weight: float = setting(0.3, "α of Eq. 8, the weight of L_text (the paper's for Ours (Trip))", at_least(0))
    image_weight: float = setting(0.1, "β of Eq. 8, the weight of L_img", at_least(0))
    within_margin: float = setting(0.1, "the hinge's margin on the MIL similarity (PVSE's 0.1)", at_least(0))
    negatives: str = setting("hardest", "the negatives a hinge takes: the hardest (as PVSE's ranking terms) or all", choice(NEGATIVES))


@register_loss("pvse_within_modality", model="pvse")
class PvseWithinModality(Loss[NeighborPairs]):
    """``text_weight * L_text + image_weight * L_img`` (α, β of Thomas & Kovashka Eq. 6-8) on PVSE's multiple-instance similarity.

    For row m of the neighbor tensors, the anchor is batch row ``i = neighbor_of[m]`` and the positive its
    sampled semantic neighbor ``i'`` (Eq. 5): ``neighbor_text[m]`` for L_text (Eq. 6) and ``neighbor_image[m]``
    for L_img (Eq. 7). Negatives are the batch rows of the same modality whose group differs from both the
    anchor's and the neighbor's (``neighbor_group_ids``), so the neighbor's own row is never a negative.

    Why a hinge on the MIL similarity rather than the angular loss of Eq. 6-7 on the best-matching pair:
    a PVSE instance is a *set* of K embeddings compared by ``max_{k,l}`` (the score retrieval ranks by and
    the PVSE ranking terms use). The hinge constrains exactly that score, so "neighbors stay closer than
    non-neighbors" holds in the similarity the model is evaluated with. The angular form needs single
    points: picking the max-pair embeddings of anchor and positive leaves no principled choice of which of
    the negative's K embeddings to compare with their centre ``C_i``, and the result would constrain a
    geometry (distances to ``C_i``) that retrieval never reads. The hinge is the paper's triplet variant
    (Eq. 1 with ``||a - b||^2 = 2 - 2 a.b`` on unit vectors), so the defaults ``text_weight = 0.3``, ``image_weight = 0.1``
    are the paper's values for L_OURS_trip (§3.3); the margin is PVSE's 0.1. ``negatives="hardest"`` reduces
    like the PVSE ranking terms this is added to (VSE++ hardest negative); ``"all"`` sums over every valid
    negative as the N-pairs form of Eq. 3 does.

    The PVSE ranking, diversity and MMD terms are not repeated here: they come from ``pvse_mil``.
    """

    graph_safe = True

    needs: ClassVar[frozenset[str]] = frozenset(NEIGHBOR_KEYWORDS)
    #: the output identity spells Eq. 8's weights by the paper's symbols α, β (``LossSpec.as_dict``)
    identity_names: ClassVar[dict[str, str]] = {"text_weight": "alpha", "image_weight": "beta"}

    settings_class = PvseWithinModalitySettings

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.negatives = negatives_named(self.settings.negatives)

    def prepare(
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
    ) -> NeighborPairs:
        """Guards, then the text (Eq. 6) and image (Eq. 7) terms and their ``[M, B]`` valid-negative mask.
        Unlike ``within_modality`` it takes ``[M, K, D]`` sets and an empty neighbor set (a batch whose
        anchors drew no neighbor)."""
        if neighbor_image is None or neighbor_text is None or neighbor_of is None:
            raise LossPreconditionError(
                "pvse_within_modality needs neighbor_image, neighbor_text [M, K, D] and neighbor_of [M]: sample "
                "semantic neighbors (Eq. 5) for the batch and encode them with the PVSE model"
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
        # a value guard (two read-backs): off with the others after a run's first step and in a CUDA graph
        checked = num_neighbors and value_checks_enabled()
        if checked and (int(neighbor_of.min()) < 0 or int(neighbor_of.max()) >= batch):
            raise LossPreconditionError(f"neighbor_of must index batch rows 0..{batch - 1}")
        if neighbor_group_ids is not None and neighbor_group_ids.shape != (num_neighbors,):
            raise LossPreconditionError(
                f"neighbor_group_ids must have shape ({num_neighbors},), got {tuple(neighbor_group_ids.shape)}"
            )
        neighbors = Neighbors(neighbor_image, neighbor_text, neighbor_of, neighbor_group_ids)
        return neighbor_pairs(image, text, neighbors, group_ids, self.text_weight, self.image_weight)

    def compute(self, pairs: NeighborPairs) -> LossOutput:
        return {
            f"{term.modality}_within_modality_loss": term.weight
            * within_modality_hinge(
                term.anchors,
                term.positives,
                term.pool,
                pairs.negative_mask,
                self.within_margin,
                self.negatives,
            )
            for term in pairs.terms
        }

    def contributions(self, pairs: NeighborPairs) -> dict[str, Tensor]:
        """COCOS per neighbor pair, keyed ``within_text`` / ``within_image`` as ``within_modality`` reports
        it. A batch without neighbor pairs has no queries for this loss and reports nothing (an empty count
        would have no per-query mean)."""
        if pairs.negative_mask.shape[0] == 0:
            return {}
        return neighbor_contributions(pairs, self._count)

    def _count(self, term: NeighborTerm, negative_mask: Tensor) -> Tensor:
        return within_modality_contributions(
            term.anchors, term.positives, term.pool, negative_mask, self.within_margin, self.negatives
        )
