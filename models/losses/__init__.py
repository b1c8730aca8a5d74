"""Loss library: one loss per module, each registered by name (see ``base``)."""

import importlib
import pkgutil

from models.losses.base import LOSSES, Loss, LossOutput, LossPreconditionError, build_loss, register_loss

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["LOSSES", "Loss", "LossOutput", "LossPreconditionError", "build_loss", "register_loss"]
