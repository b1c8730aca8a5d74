"""Within-modality semantic-neighbourhood constraints of Thomas & Kovashka (ECCV 2020): L_text (Eq. 6) and
L_img (Eq. 7) in N-pair form, weighted by α and β as in Eq. 8.

For sampled neighbour row m of batch row i = ``neighbor_of[m]``: anchor text_i (image_i), positive the
neighbour's text (image), negatives every batch row j of the same modality that belongs neither to i's
group nor to the neighbour's group (so the neighbour item, when it is also in the batch, is no negative).
"""

from __future__ import annotations

import torch
from torch import Tensor

from models.losses.angular import (
    ANGULAR_FORMS,
    COCOS_EPS,
    angular_npair_contributions,
    angular_npair_terms,
    check_embedding_matrix,
    contribution_summary,
    tan_squared,
)
from models.losses.base import (
    Loss,
    LossOutput,
    LossPreconditionError,
    check_pair_embeddings,
    default_group_ids,
    register_loss,
)
from models.losses.triplet import DISTANCES, triplet_contributions, triplet_terms

#: α (weight of L_text) and β (weight of L_img) chosen on held-out data in §3.3 of the paper.
PAPER_WEIGHTS: dict[str, dict[str, float]] = {
    "angular": {"alpha": 0.2, "beta": 0.3},
    "triplet": {"alpha": 0.3, "beta": 0.1},
}

NEIGHBOUR_KEYWORDS = ("neighbor_image", "neighbor_text", "neighbor_of")


def neighbour_negative_mask(
    group_ids: Tensor, neighbor_of: Tensor, neighbor_group_ids: Tensor | None
) -> Tensor:
    """``[M, B]`` bool: batch row j is a negative for neighbour pair m (Eq. 6-7, i ≠ j)."""
    mask = group_ids.unsqueeze(0) != group_ids[neighbor_of].unsqueeze(1)
    if neighbor_group_ids is not None:
        mask &= group_ids.unsqueeze(0) != neighbor_group_ids.unsqueeze(1)
    return mask


def require_neighbours(
    batch_size: int,
    dim: int,
    neighbor_image: Tensor | None,
    neighbor_text: Tensor | None,
    neighbor_of: Tensor | None,
    neighbor_group_ids: Tensor | None,
    group_ids: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Guard: neighbour tensors present, shaped alike, and pointing at rows of the batch; returns
    ``(neighbor_image, neighbor_text, neighbor_of)``."""
    missing = [
        name
        for name, value in zip(NEIGHBOUR_KEYWORDS, (neighbor_image, neighbor_text, neighbor_of), strict=True)
        if value is None
    ]
    if missing:
        raise LossPreconditionError(
            f"this loss needs sampled semantic neighbours but got no {', '.join(missing)}: train with a "
            "neighbor_source (e.g. Doc2Vec neighbours, Eq. 5) so every batch carries neighbor_image, "
            "neighbor_text and neighbor_of"
        )
    assert neighbor_image is not None and neighbor_text is not None and neighbor_of is not None  # for mypy
    num_neighbours = neighbor_of.shape[0]
    if (
        neighbor_of.dim() != 1
        or num_neighbours == 0
        or neighbor_of.dtype.is_floating_point
        or neighbor_of.dtype == torch.bool
    ):
        raise LossPreconditionError(
            f"neighbor_of must be a non-empty 1-D integer index tensor, got {neighbor_of.dtype} "
            f"{tuple(neighbor_of.shape)}: one batch row index per sampled neighbour"
        )
    for name, value in (("neighbor_image", neighbor_image), ("neighbor_text", neighbor_text)):
        if value.shape != (num_neighbours, dim):
            raise LossPreconditionError(
                f"{name} has shape {tuple(value.shape)}, expected ({num_neighbours}, {dim}): one row per "
                "entry of neighbor_of, in the batch's embedding width"
            )
    if int(neighbor_of.min()) < 0 or int(neighbor_of.max()) >= batch_size:
        raise LossPreconditionError(
            f"neighbor_of holds indices outside [0, {batch_size}): it must index rows of this batch (offset "
            "indices when gathering batches from several processes)"
        )
    if neighbor_group_ids is not None:
        if neighbor_group_ids.shape != (num_neighbours,):
            raise LossPreconditionError(
                f"neighbor_group_ids has shape {tuple(neighbor_group_ids.shape)}, "
                f"expected ({num_neighbours},): one group id per neighbour row"
            )
        if group_ids is None:
            raise LossPreconditionError(
                "neighbor_group_ids was given without group_ids: pass the batch rows' group_ids in the same "
                "id space, otherwise the neighbour's own batch row cannot be recognised and excluded as a "
                "negative"
            )
    return neighbor_image, neighbor_text, neighbor_of


@register_loss("within_modality")
class WithinModality(Loss):
    """α·L_text + β·L_img (Eq. 6-8): pull each item's sampled semantic neighbour close in both modalities.

    ``form="angular"`` uses the angular N-pair term (``angular_form`` smooth/hinge, ``alpha_degrees``) as
    in "Ours (Ang)"; ``form="triplet"`` the all-negatives triplet term (``margin``, ``distance``) as in
    "Ours (Trip)". ``alpha``/``beta`` default to the paper's values for the form (``PAPER_WEIGHTS``).
    Each term is the mean over the neighbour pairs.
    """

    needs = frozenset(NEIGHBOUR_KEYWORDS)

    def __init__(
        self,
        form: str = "angular",
        alpha: float | None = None,
        beta: float | None = None,
        angular_form: str = "smooth",
        alpha_degrees: float = 45.0,
        margin: float = 0.2,
        distance: str = "squared_l2",
        cocos_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        if form not in PAPER_WEIGHTS:
            raise LossPreconditionError(
                f"within-modality form {form!r} is unknown; choose one of {sorted(PAPER_WEIGHTS)}"
            )
        if angular_form not in ANGULAR_FORMS:
            raise LossPreconditionError(
                f"angular_form {angular_form!r} is unknown; choose one of {ANGULAR_FORMS}"
            )
        if distance not in DISTANCES:
            raise LossPreconditionError(f"distance {distance!r} is unknown; choose one of {DISTANCES}")
        self.form = form
        self.alpha = PAPER_WEIGHTS[form]["alpha"] if alpha is None else alpha
        self.beta = PAPER_WEIGHTS[form]["beta"] if beta is None else beta
        self.angular_form = angular_form
        self.tan_sq = tan_squared(alpha_degrees)
        self.margin = margin
        self.distance = distance
        self.cocos_eps = cocos_eps

    def _unit_norm_needed(self) -> bool:
        if self.form == "angular":
            return self.angular_form == "smooth"
        return self.distance == "cosine"

    def _modalities(
        self,
        image: Tensor,
        text: Tensor,
        group_ids: Tensor | None,
        neighbor_image: Tensor | None,
        neighbor_text: Tensor | None,
        neighbor_of: Tensor | None,
        neighbor_group_ids: Tensor | None,
    ) -> tuple[list[tuple[str, float, Tensor, Tensor, Tensor]], Tensor]:
        """Guards, then (name, weight, anchors, positives, batch pool) per modality and the negative mask."""
        check_pair_embeddings(image, text)
        neighbor_image, neighbor_text, neighbor_of = require_neighbours(
            image.shape[0],
            image.shape[-1],
            neighbor_image,
            neighbor_text,
            neighbor_of,
            neighbor_group_ids,
            group_ids,
        )
        unit_norm = self._unit_norm_needed()
        for name, value in (
            ("image", image),
            ("text", text),
            ("neighbor_image", neighbor_image),
            ("neighbor_text", neighbor_text),
        ):
            check_embedding_matrix(name, value, unit_norm=unit_norm)
        groups = default_group_ids(group_ids, image.shape[0], image.device)
        mask = neighbour_negative_mask(groups, neighbor_of, neighbor_group_ids)
        modalities = [
            ("within_text", self.alpha, text[neighbor_of], neighbor_text, text),
            ("within_image", self.beta, image[neighbor_of], neighbor_image, image),
        ]
        return modalities, mask

    def forward(
        self,
        *,
        image: Tensor,
        text: Tensor,
        group_ids: Tensor | None = None,
        neighbor_image: Tensor | None = None,
        neighbor_text: Tensor | None = None,
        neighbor_of: Tensor | None = None,
        neighbor_group_ids: Tensor | None = None,
        **unused: Tensor,
    ) -> LossOutput:
        modalities, mask = self._modalities(
            image, text, group_ids, neighbor_image, neighbor_text, neighbor_of, neighbor_group_ids
        )
        losses: LossOutput = {}
        for name, weight, anchors, positives, pool in modalities:
            if self.form == "angular":
                terms = angular_npair_terms(anchors, positives, pool, mask, self.angular_form, self.tan_sq)
            else:
                terms = triplet_terms(anchors, positives, pool, mask, self.distance, self.margin, "all")
            losses[f"{name}_loss"] = weight * terms.mean()
        return losses

    @torch.no_grad()
    def diagnostics(
        self,
        *,
        image: Tensor,
        text: Tensor,
        group_ids: Tensor | None = None,
        neighbor_image: Tensor | None = None,
        neighbor_text: Tensor | None = None,
        neighbor_of: Tensor | None = None,
        neighbor_group_ids: Tensor | None = None,
        **unused: Tensor,
    ) -> dict[str, Tensor]:
        modalities, mask = self._modalities(
            image, text, group_ids, neighbor_image, neighbor_text, neighbor_of, neighbor_group_ids
        )
        summary: dict[str, Tensor] = {}
        for name, weight, anchors, positives, pool in modalities:
            if weight == 0:  # a switched-off term (Table 4 ablations) sends no gradient to any negative
                summary.update(
                    contribution_summary(name, anchors.new_zeros(anchors.shape[0], dtype=torch.long))
                )
                continue
            if self.form == "angular":
                counts = angular_npair_contributions(
                    anchors, positives, pool, mask, self.angular_form, self.tan_sq, self.cocos_eps
                )
            else:
                counts = triplet_contributions(
                    anchors, positives, pool, mask, self.distance, self.margin, "all"
                )
            summary.update(contribution_summary(name, counts))
        return summary
