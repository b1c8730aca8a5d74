"""Cross-modal triplet loss: Thomas & Kovashka (ECCV 2020) Eq. 1, in the two negative-selection forms
compared by Bleeker & de Rijke (ECIR 2022): the sum over all in-batch negatives (their Eq. 3, Trip+NP+Sym)
and VSE++'s hardest negative (max violation, their Eq. 1-2).

Every form is written as [m + d(a,p) − d(a,n)]_+; with ``cosine`` d = 1 − s this is [m − s(a,p) + s(a,n)]_+.
The term itself is in ``pair_terms``: the within-modality loss of Eq. 6-7 reuses it.
"""

from __future__ import annotations

from torch import Tensor

from models.losses.base import Loss, LossOutput, register_loss
from models.losses.checks import contribution_summaries
from models.losses.distances import distance_named, negatives_named
from models.losses.pair_terms import (
    CrossModalPairs,
    cross_modal_pairs,
    triplet_contributions,
    triplet_terms,
)


@register_loss("triplet")
class Triplet(Loss[CrossModalPairs]):
    """Triplet loss over in-batch negatives, image→text and (``symmetric``) text→image.

    Negatives of query i are the other modality's rows of another group; each direction is the mean over
    the batch's anchor-positive pairs (VSE++ sums instead: multiply by the batch size to compare).
    """

    graph_safe = True

    def __init__(
        self,
        distance: str = "squared_l2",
        negatives: str = "all",
        margin: float = 0.2,
        symmetric: bool = True,
    ) -> None:
        super().__init__()
        self.distance = distance_named(distance)
        self.negatives = negatives_named(negatives)
        self.margin = margin
        self.symmetric = symmetric

    def prepare(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> CrossModalPairs:
        # cosine distance is 1 − a·b only for unit vectors; the Euclidean forms need no normalisation
        unit_norm = self.distance.needs_unit_norm
        return cross_modal_pairs(image, text, group_ids, symmetric=self.symmetric, unit_norm=unit_norm)

    def compute(self, pairs: CrossModalPairs) -> LossOutput:
        return {
            f"{name}_loss": triplet_terms(
                anchors, others, others, pairs.negative_mask, self.distance, self.margin, self.negatives
            ).mean()
            for name, anchors, others in pairs.directions
        }

    def contributions(self, pairs: CrossModalPairs) -> dict[str, Tensor]:
        return contribution_summaries(
            {
                name: triplet_contributions(
                    anchors, others, others, pairs.negative_mask, self.distance, self.margin, self.negatives
                )
                for name, anchors, others in pairs.directions
            }
        )
