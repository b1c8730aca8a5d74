"""Models by name (``Variant.model``): each model module registers its class with :func:`register_model`; the
modules of this package are imported on first use, the way the loss library discovers its losses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
from torch import nn

from models.encoders import EncoderConfig

MODELS: dict[str, type[nn.Module]] = {}
#: the modules that define models (imported on first lookup, so a model registers itself once)
MODEL_MODULES = ("models.vse", "models.pvse")


def register_model(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: make a model selectable by name (``Variant.model``)."""

    def decorate(cls: type[nn.Module]) -> type[nn.Module]:
        if name in MODELS and MODELS[name] is not cls:
            raise ValueError(
                f"model name {name!r} is registered twice ({MODELS[name].__name__}, {cls.__name__})"
            )
        MODELS[name] = cls
        return cls

    return decorate


def model_class(name: str) -> type[nn.Module]:
    for module in MODEL_MODULES:
        importlib.import_module(module)
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; available: {sorted(MODELS)}")
    return MODELS[name]


def build_model(
    name: str, config: EncoderConfig, word_vectors: np.ndarray | None = None, **options
) -> nn.Module:
    return model_class(name)(config, word_vectors, **options)
