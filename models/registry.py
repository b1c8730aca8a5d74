"""Models by name (``Variant.model``): each model module registers its class with :func:`register_model`; the
modules of this package are imported on first lookup (``MODELS`` is a lazy
:class:`common.registry.Registry`), so ``models.registry`` can be imported by the model modules themselves
and a model registers itself once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from torch import nn

from common.registry import Registry
from common.settings import read_declared
from models.config import ModelConfig

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


@dataclass(frozen=True)
class NoOptions:
    """The options of a model that takes none (``model_options`` empty)."""


def options_class(name: str) -> type:
    """The declared options of model ``name`` (its class's ``options_class``: each option's default, range and
    meaning, :mod:`common.settings`)."""
    return getattr(model_class(name), "options_class", NoOptions)


def option_names(name: str) -> list[str]:
    return [f.name for f in fields(options_class(name))]


def model_options(name: str, options: Mapping[str, Any], where: str = "") -> Any:
    """``options`` as model ``name``'s declared options object: no option it does not declare, each of its type
    and in its range; a :class:`common.settings.SettingValueError` naming the option (below ``where``) otherwise."""
    return read_declared(options_class(name), options, where, partial=True)


def needs_spatial_features(name: str) -> bool:
    """Whether model ``name`` attends over the trunk's feature map (PVSE) rather than its pooled vector: the one
    place that says which features a model's cache and record hold."""
    return bool(getattr(model_class(name), "needs_spatial_features", False))


def build_model(
    name: str, config: ModelConfig, word_vectors: np.ndarray | None = None, **options: Any
) -> nn.Module:
    """Model ``name`` of ``config``, its word embedding from ``word_vectors`` (None: every weight still to be
    set), with its declared ``options`` (checked first: :func:`model_options`)."""
    return model_class(name)(config, word_vectors, model_options(name, options))
