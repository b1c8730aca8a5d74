"""Loss library: one loss per module, each registered by name (see ``base``); what several losses share is in
the helper modules ``checks`` (guards, masks, COCOS keys), ``settings`` (the declarations of their settings), ``distances`` (distances and which negatives a hinge keeps, by name), ``pair_terms`` (angular, triplet and
within-modality terms) and ``softmax_terms`` (the softmax family). Every other module is a loss and is
imported here so that its registration runs."""

from common.registry import import_submodules
from models.losses.base import (
    LOSSES,
    Loss,
    LossOutput,
    LossPreconditionError,
    build_loss,
    cross_modal_loss_of,
    register_loss,
)

#: modules of this package that define no loss (a new shared helper module is added here)
HELPER_MODULES = ("base", "checks", "distances", "pair_terms", "settings", "softmax_terms")

import_submodules(__name__, __path__, skip=HELPER_MODULES)

__all__ = ["LOSSES", "Loss", "LossOutput", "LossPreconditionError", "build_loss", "cross_modal_loss_of", "register_loss"]
