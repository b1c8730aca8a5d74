"""Loss library: one loss per module, each registered by name (see ``base``); what several losses share is in
the helper modules ``checks`` (guards, masks, distances, COCOS keys), ``pair_terms`` (angular, triplet and
within-modality terms) and ``softmax_terms`` (the softmax family). Every other module is a loss and is
imported here so that its registration runs."""

import importlib
import pkgutil

from models.losses.base import LOSSES, Loss, LossOutput, LossPreconditionError, build_loss, register_loss

#: modules of this package that define no loss (a new shared helper module is added here)
HELPER_MODULES = ("base", "checks", "pair_terms", "softmax_terms")

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in HELPER_MODULES and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["LOSSES", "Loss", "LossOutput", "LossPreconditionError", "build_loss", "register_loss"]
