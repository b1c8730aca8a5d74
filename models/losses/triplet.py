"""Cross-modal triplet loss: Thomas & Kovashka (ECCV 2020) Eq. 1, in the two negative-selection forms
compared by Bleeker & de Rijke (ECIR 2022): the sum over all in-batch negatives (their Eq. 3, Trip+NP+Sym)
and VSE++'s hardest negative (max violation, their Eq. 1-2).

Every form is written as [m + d(a,p) − d(a,n)]_+; with ``cosine`` d = 1 − s this is [m − s(a,p) + s(a,n)]_+.
The term itself is in ``pair_terms``: the within-modality loss of Eq. 6-7 reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.settings import redeclared, setting
from models.losses.base import register_loss
from models.losses.distances import NEGATIVES, distance_named, negatives_named
from models.losses.pair_terms import CrossModalTermLoss, TermSettings, TripletTerm
from models.losses.settings import LossSettings, Shared, choice


@dataclass(frozen=True)
class TripletSettings(LossSettings):
    distance: str = redeclared(TermSettings, "distance")
    negatives: str = setting("all", "the negatives a query's hinge sums over: all (Eq. 3, Trip+NP+Sym) or the hardest (VSE++)", choice(NEGATIVES))
    margin: float = redeclared(TermSettings, "margin")
    symmetric: bool = redeclared(Shared, "symmetric")


@register_loss("triplet")
class Triplet(CrossModalTermLoss):
    """Triplet loss over in-batch negatives, image→text and (``symmetric``) text→image.

    Negatives of query i are the other modality's rows of another group; each direction is the mean over
    the batch's anchor-positive pairs (VSE++ sums instead: multiply by the batch size to compare).
    """

    settings_class = TripletSettings

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.term = TripletTerm(distance_named(self.distance), self.margin, negatives_named(self.negatives))
