"""Models by name (``Variant.model``): each model module registers its class with :func:`register_model`; the
modules of this package are imported on first lookup (``MODELS`` is a lazy
:class:`common.registry.Registry`), so ``models.registry`` can be imported by the model modules themselves
and a model registers itself once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from torch import nn

from common.registry import Registry
from models.encoders import EncoderConfig

#: the modules that define models (imported on first lookup, so a model registers itself once)
MODEL_MODULES = ("models.vse", "models.pvse")
#: every model class by name; ``name in MODELS``, ``MODELS[name]`` and ``sorted(MODELS)`` import the modules first
MODELS: Registry[type[nn.Module]] = Registry("model", modules=MODEL_MODULES)


def register_model(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: make a model selectable by name (``Variant.model``)."""
    return MODELS.register(name)


def model_class(name: str) -> type[nn.Module]:
    """The class registered as ``name``; a ``KeyError`` naming the close and the available models otherwise."""
    return MODELS.get(name)


def needs_spatial_features(name: str) -> bool:
    """Whether model ``name`` attends over the trunk's feature map (PVSE) rather than its pooled vector: the one
    place that says which features a model's cache and record hold."""
    return bool(getattr(model_class(name), "needs_spatial_features", False))


def build_model(
    name: str, config: EncoderConfig, word_vectors: np.ndarray | None = None, **options
) -> nn.Module:
    return model_class(name)(config, word_vectors, **options)
