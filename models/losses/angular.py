"""Cross-modal angular N-pair loss with the symmetric constraint: Thomas & Kovashka (ECCV 2020) Eq. 2-4.

The angular term itself (Eq. 2-3) is in ``pair_terms``: the within-modality loss of Eq. 6-7 reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.settings import redeclared
from models.losses.base import register_loss
from models.losses.checks import chosen
from models.losses.pair_terms import ANGULAR_FORMS, AngularTerm, CrossModalTermLoss, TermSettings, tan_squared
from models.losses.settings import LossSettings, Shared


@dataclass(frozen=True)
class AngularSettings(LossSettings):
    form: str = redeclared(TermSettings, "angular_form")
    alpha_degrees: float = redeclared(TermSettings, "alpha_degrees")
    symmetric: bool = redeclared(Shared, "symmetric")
    cocos_eps: float = redeclared(Shared, "cocos_eps")


@register_loss("angular", eq8_cross_modal=True)
class Angular(CrossModalTermLoss):
    """Angular N-pair loss over in-batch negatives, both retrieval directions (Eq. 4).

    Image→text: anchor image i, positive text i, negatives every text row of another group; text→image
    swaps the modalities. Each direction is the mean over the batch's anchor-positive pairs. ``form``: the
    smooth N-pair form of Wang et al. (the authors' code) or Eq. 2's hinge (``pair_terms.ANGULAR_FORMS``).
    """

    settings_class = AngularSettings

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.term = AngularTerm(chosen(ANGULAR_FORMS, self.form), tan_squared(self.alpha_degrees), self.cocos_eps)
