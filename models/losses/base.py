"""The loss interface every loss in this package follows, and the name registry.

A loss is an ``nn.Module`` whose ``forward`` takes the embeddings a model returns *by keyword* and
returns a dict of named, already-weighted scalar sub-losses; the trainer sums them and logs each one.

Keywords (all optional except ``image`` and ``text``; a loss guards the ones it needs):

``image``, ``text``
    ``[B, D]`` L2-normalised embeddings of the B pairs of the batch (PVSE models give ``[B, K, D]``).
    Row ``i`` of ``image`` is paired with row ``i`` of ``text``.
``group_ids``
    ``LongTensor[B]``; rows with equal ids are positives of each other (e.g. the five captions of one
    COCO image). ``None`` means every row is its own group (``arange(B)``).
``neighbor_image``, ``neighbor_text``
    ``[M, D]`` embeddings of sampled semantic neighbors (the ``i'`` of Eq. 5 of Thomas & Kovashka).
``neighbor_of``
    ``LongTensor[M]``; row ``m`` of the neighbor tensors is the neighbor of batch row ``neighbor_of[m]``.
``neighbor_group_ids``
    ``LongTensor[M]``; group id of each neighbor row, so that a batch row holding the same item is never
    used as its negative.

A loss whose ``needs`` holds ``"group_mates"`` only works when batches hold several rows per group (SmoothAP,
Struc with ground-truth groups); the trainer then fills batches group by group.

Rows may come from several processes (gathered and concatenated); nothing here assumes one device batch.

A loss implements three steps and :class:`Loss` runs them, so that the loss and its COCOS diagnostics
(Bleeker & de Rijke §4) always read the same guarded inputs, masks and scores: ``prepare`` (input guards
and the set-up shared by both), ``compute`` (the loss's equation) and ``contributions`` (its per-query
gradient-contribution counts). Adding a loss is one module defining these, its settings class (each parameter
declared once: :mod:`models.losses.settings`) and :func:`register_loss`.

``LOSSES`` is the project's one name table (:class:`common.registry.Registry`): ``name in LOSSES``,
``LOSSES[name]`` and ``sorted(LOSSES)`` read it like the dict it replaced, an unknown name says what is close
and what exists, and a renamed loss keeps its old name through ``LOSSES.deprecate(old, new)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import Tensor, nn

from common.registry import Registry

# the input guards live in checks; the loss interface re-exports the two names every loss file uses with it
from models.losses.checks import NEIGHBOR_KEYWORDS, LossPreconditionError
from models.losses.settings import LossSettings, NoSettings, loss_settings

__all__ = [
    "LOSSES",
    "NEIGHBOR_KEYWORDS",
    "Loss",
    "LossOutput",
    "LossPreconditionError",
    "build_loss",
    "cross_modal_loss_of",
    "register_loss",
]

LossOutput = dict[str, Tensor]

#: every loss class by name (filled when ``models.losses`` imports its modules)
LOSSES: Registry[type[Loss[Any]]] = Registry("loss")

#: what ``prepare`` hands to ``compute`` and ``contributions``; each loss picks its own type
Prepared = TypeVar("Prepared")


class Loss(nn.Module, Generic[Prepared]):
    """Base class: subclasses set ``name`` through :func:`register_loss`, declare their settings
    (``settings_class``) and implement ``prepare`` and ``compute`` (and ``contributions`` for COCOS); ``forward``
    and ``diagnostics`` are the same for all."""

    name: ClassVar[str] = ""
    #: the loss's parameters, declared once (default, range, meaning: :mod:`models.losses.settings`)
    settings_class: ClassVar[type[LossSettings]] = NoSettings
    #: keywords this loss needs besides ``image`` and ``text`` (and ``"group_mates"``); the trainer uses it to
    #: decide whether neighbors must be sampled and whether batches are filled group by group.
    needs: ClassVar[frozenset[str]] = frozenset()
    #: whether ``forward`` reads no value back to the host once the value checks are off (no ``.item()``, no
    #: boolean-mask indexing, no ``nonzero``/``unique``, no branch on a tensor's value), so a CUDA graph can
    #: capture it; set on the losses ``tests/test_static_step.py`` runs under a read-back guard
    graph_safe: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        """The loss with ``params`` (its declared settings; the others at their defaults), each checked by its
        declaration: ``self.settings``, and each setting an attribute of the loss too (``self.margin``)."""
        super().__init__()
        self.settings = loss_settings(self.settings_class, params, self.name or type(self).__name__)
        for field in fields(self.settings):
            setattr(self, field.name, getattr(self.settings, field.name))

    @property
    def needs_neighbors(self) -> bool:
        """Whether batches must carry sampled semantic neighbors for this loss."""
        return not self.needs.isdisjoint(NEIGHBOR_KEYWORDS)

    @property
    def reports_cocos(self) -> bool:
        """Whether :meth:`diagnostics` can report anything, so callers may skip a pass that would yield
        nothing (a subclass may also override ``diagnostics`` itself)."""
        cls = type(self)
        return cls.contributions is not Loss.contributions or cls.diagnostics is not Loss.diagnostics

    def forward(self, **inputs: Tensor) -> LossOutput:
        return self.compute(self.prepare(**inputs))

    def diagnostics(self, **inputs: Tensor) -> dict[str, Tensor]:
        """Per-query gradient-contribution counts (Bleeker et al. COCOS); does not change the loss or any
        gradient. A loss without ``contributions`` reports nothing and does not even check its inputs."""
        if type(self).contributions is Loss.contributions:
            return {}
        with torch.no_grad():
            return self.contributions(self.prepare(**inputs))

    def prepare(self, **inputs: Tensor) -> Prepared:  # pragma: no cover - interface
        """Guard the keyword inputs and build what both ``compute`` and ``contributions`` read."""
        raise NotImplementedError

    def compute(self, prepared: Prepared) -> LossOutput:  # pragma: no cover - interface
        """The named, weighted sub-losses."""
        raise NotImplementedError

    def contributions(self, prepared: Prepared) -> dict[str, Tensor]:
        """Per-query COCOS counts, keyed ``<direction>_<statistic>``; runs under ``torch.no_grad``."""
        return {}


LossClass = TypeVar("LossClass", bound=type[Loss[Any]])


def register_loss(name: str, *, model: str = "vse", eq8_cross_modal: bool = False) -> Callable[[LossClass], LossClass]:
    """Class decorator: make a loss selectable by ``name`` from task parameters; the class learns its name
    (``cls.name``) only once the name is known to be free. ``model``: the model (``models.registry``) whose
    outputs it reads (PVSE's losses take its K embeddings per item); ``eq8_cross_modal``: the cross-modal loss
    Eq. 8 pairs a within-modality loss with for that model (one per model: :func:`cross_modal_loss_of`)."""

    def decorate(cls: LossClass) -> LossClass:
        LOSSES.add(name, cls, model=model, eq8_cross_modal=eq8_cross_modal)
        cls.name = name
        return cls

    return decorate


def cross_modal_loss_of(model: str) -> str:
    """The loss registered as Eq. 8's cross-modal loss of ``model`` (``register_loss(..., eq8_cross_modal=True)``)."""
    (name,) = LOSSES.names(model=model, eq8_cross_modal=True)
    return name


def build_loss(name: str, **params: object) -> Loss[Any]:
    """Instantiate a registered loss by name, e.g. ``build_loss("angular", form="smooth")``; an unknown name is
    a ``KeyError`` (:class:`common.registry.UnknownNameError`) naming the close and the registered losses."""
    return LOSSES.get(name)(**params)
