"""Cross-modal angular N-pair loss with the symmetric constraint: Thomas & Kovashka (ECCV 2020) Eq. 2-4.

The angular term itself (Eq. 2-3) is in ``pair_terms``: the within-modality loss of Eq. 6-7 reuses it.
"""

from __future__ import annotations

from models.losses.base import register_loss
from models.losses.checks import COCOS_EPS, chosen
from models.losses.pair_terms import ANGULAR_FORMS, AngularTerm, CrossModalTermLoss, tan_squared


@register_loss("angular", eq8_cross_modal=True)
class Angular(CrossModalTermLoss):
    """Angular N-pair loss over in-batch negatives, both retrieval directions (Eq. 4).

    Image→text: anchor image i, positive text i, negatives every text row of another group; text→image
    swaps the modalities. Each direction is the mean over the batch's anchor-positive pairs. ``form``: the
    smooth N-pair form of Wang et al. (the authors' code) or Eq. 2's hinge (``pair_terms.ANGULAR_FORMS``).
    """

    def __init__(
        self,
        form: str = "smooth",
        alpha_degrees: float = 45.0,
        symmetric: bool = True,
        cocos_eps: float = COCOS_EPS,
    ) -> None:
        super().__init__()
        self.term = AngularTerm(chosen(ANGULAR_FORMS, form), tan_squared(alpha_degrees), cocos_eps)
        self.symmetric = symmetric
