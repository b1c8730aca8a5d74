"""A loss's settings, declared once (:mod:`common.settings`: each parameter's default, range or choices and meaning):
every loss names its settings class (``Loss.settings_class``, a :class:`LossSettings`), which is what a variant's
``<loss>.<parameter>`` sets, what ``python -m pipeline settings`` lists, what the loss is built from and what an
output hashes (``pipeline.config.variant_spec.LossSpec``). The declarations several losses share are here
(:class:`Shared`); a loss's settings class takes them with :func:`common.settings.redeclared`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from common.registry import Registry
from common.settings import (
    Limit,
    SettingValueError,
    above,
    between,
    check_declared,
    named,
    read_declared,
    redeclared,
    setting,
)
from models.losses.checks import COCOS_EPS, LossPreconditionError


def choice(registry: Registry) -> Limit:
    """A name of ``registry`` (its entries are the choices; an unknown name says what is close)."""
    return named(registry.names, registry.unknown_message)


def positive_top_k(value: Any) -> bool:
    return value is None or value >= 1


@dataclass(frozen=True)
class LossSettings:
    """A loss's settings: every field declared with :func:`common.settings.setting`, checked when made."""

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class Shared(LossSettings):
    """Declarations several losses share, each with the default most of them take."""

    symmetric: bool = setting(True, "train both retrieval directions (false: the one direction its paper trains)")
    cocos_eps: float = setting(
        COCOS_EPS, "COCOS: a candidate whose gradient weight is below this does not contribute (Bleeker & de Rijke §5)", above(0)
    )
    scale: float = setting(20.0, "λ: the logits are λ·cos (Veit & Wilber §4.2 use λ = 20)", above(0))
    temperature: float = setting(0.1, "τ: the logits are cos/τ", above(0))


@dataclass(frozen=True)
class MiningSettings(LossSettings):
    """The settings of the negative-mining losses (Veit & Wilber §4.2): which of the negatives they keep."""

    scale: float = redeclared(Shared, "scale")
    fraction: float = setting(0.5, "share of the negatives kept, the hardest (Veit & Wilber §4.2: 0.5)", between(0, 1))
    top_k: int | None = setting(None, "keep this many hardest negatives instead (null: fraction decides)", Limit(positive_top_k, ">= 1 or null"))
    cocos_eps: float = redeclared(Shared, "cocos_eps")


@dataclass(frozen=True)
class NoSettings(LossSettings):
    """The settings of a loss that has none."""


def loss_settings(settings_class: type, params: dict[str, Any], loss: str) -> LossSettings:
    """``params`` as ``settings_class``'s object (every parameter it does not give at its declared default), each of
    its declared type and in its range; a :class:`LossPreconditionError` naming ``loss`` and the parameter."""
    try:
        return read_declared(settings_class, params, loss, partial=True)
    except SettingValueError as error:
        raise LossPreconditionError(str(error)) from None


def parameter_names(settings_class: type) -> list[str]:
    return [field.name for field in fields(settings_class)]
