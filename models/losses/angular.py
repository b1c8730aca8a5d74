"""Cross-modal angular N-pair loss with the symmetric constraint: Thomas & Kovashka (ECCV 2020) Eq. 2-4.

The angular term itself (Eq. 2-3) is in ``pair_terms``: the within-modality loss of Eq. 6-7 reuses it.
"""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, register_loss
from models.losses.checks import COCOS_EPS, check_choice, contribution_summaries
from models.losses.pair_terms import (
    ANGULAR_FORMS,
    CrossModalPairs,
    angular_npair_contributions,
    angular_npair_terms,
    cross_modal_pairs,
    tan_squared,
)


@register_loss("angular")
class Angular(Loss[CrossModalPairs]):
    """Angular N-pair loss over in-batch negatives, both retrieval directions (Eq. 4).

    Image→text: anchor image i, positive text i, negatives every text row of another group; text→image
    swaps the modalities. Each direction is the mean over the batch's anchor-positive pairs.
    """

    graph_safe = True

    def __init__(
        self,
        form: str = "smooth",
        alpha_degrees: float = 45.0,
        symmetric: bool = True,
        cocos_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        check_choice("Angular form", form, ANGULAR_FORMS)
        self.form = form
        self.alpha_degrees = alpha_degrees
        self.tan_sq = tan_squared(alpha_degrees)
        self.symmetric = symmetric
        self.cocos_eps = cocos_eps

    def prepare(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> CrossModalPairs:
        # the smooth form's algebra (Wang et al.) assumes unit vectors; the hinge form does not
        return cross_modal_pairs(
            image, text, group_ids, symmetric=self.symmetric, unit_norm=self.form == "smooth"
        )

    def compute(self, pairs: CrossModalPairs) -> LossOutput:
        return {
            f"{name}_loss": angular_npair_terms(
                anchors, others, others, pairs.negative_mask, self.form, self.tan_sq
            ).mean()
            for name, anchors, others in pairs.directions
        }

    def contributions(self, pairs: CrossModalPairs) -> dict[str, Tensor]:
        return contribution_summaries(
            {
                name: angular_npair_contributions(
                    anchors, others, others, pairs.negative_mask, self.form, self.tan_sq, self.cocos_eps
                )
                for name, anchors, others in pairs.directions
            }
        )
