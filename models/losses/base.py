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
    ``[M, D]`` embeddings of sampled semantic neighbours (the ``i'`` of Eq. 5 of Thomas & Kovashka).
``neighbor_of``
    ``LongTensor[M]``; row ``m`` of the neighbour tensors is the neighbour of batch row ``neighbor_of[m]``.
``neighbor_group_ids``
    ``LongTensor[M]``; group id of each neighbour row, so that a batch row holding the same item is never
    used as its negative.

A loss whose ``needs`` holds ``"group_mates"`` only works when batches hold several rows per group (SmoothAP,
Struc with ground-truth groups); the trainer then fills batches group by group.

Rows may come from several processes (gathered and concatenated); nothing here assumes one device batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn

LossOutput = dict[str, Tensor]

LOSSES: dict[str, type[Loss]] = {}

#: the keywords that carry sampled semantic neighbours (Eq. 5)
NEIGHBOR_KEYWORDS = frozenset({"neighbor_image", "neighbor_text", "neighbor_of"})


class LossPreconditionError(ValueError):
    """Raised when a loss is given inputs it cannot work with; the message says how to fix it."""


class Loss(nn.Module):
    """Base class: subclasses set ``name`` through :func:`register_loss` and implement ``forward``."""

    name: ClassVar[str] = ""
    #: keywords this loss needs besides ``image`` and ``text`` (and ``"group_mates"``); the trainer uses it to
    #: decide whether neighbours must be sampled and whether batches are filled group by group.
    needs: ClassVar[frozenset[str]] = frozenset()

    @property
    def needs_neighbors(self) -> bool:
        """Whether batches must carry sampled semantic neighbours for this loss."""
        return bool(self.needs & NEIGHBOR_KEYWORDS)

    def forward(self, **embeddings: Tensor) -> LossOutput:  # pragma: no cover - interface
        raise NotImplementedError

    def diagnostics(self, **embeddings: Tensor) -> dict[str, Tensor]:
        """Per-query gradient-contribution counts (Bleeker et al. COCOS); does not change the loss."""
        return {}


def register_loss(name: str) -> Callable[[type[Loss]], type[Loss]]:
    """Class decorator: make a loss selectable by ``name`` from task parameters."""

    def decorate(cls: type[Loss]) -> type[Loss]:
        if name in LOSSES and LOSSES[name] is not cls:
            raise ValueError(
                f"loss name {name!r} is registered twice ({LOSSES[name].__name__}, {cls.__name__})"
            )
        cls.name = name
        LOSSES[name] = cls
        return cls

    return decorate


def build_loss(name: str, **params: object) -> Loss:
    """Instantiate a registered loss by name, e.g. ``build_loss("angular", form="smooth")``."""
    if name not in LOSSES:
        raise KeyError(f"unknown loss {name!r}; registered losses: {sorted(LOSSES)}")
    return LOSSES[name](**params)


def default_group_ids(group_ids: Tensor | None, batch_size: int, device: torch.device) -> Tensor:
    """``group_ids`` if given, else every row its own group."""
    if group_ids is None:
        return torch.arange(batch_size, device=device)
    if group_ids.shape != (batch_size,):
        raise LossPreconditionError(
            f"group_ids must have shape ({batch_size},), got {tuple(group_ids.shape)}; pass one id per batch row"
        )
    return group_ids


def check_pair_embeddings(image: Tensor, text: Tensor, *, min_batch: int = 2) -> None:
    """Common guard: paired [B, D] embeddings with at least ``min_batch`` rows."""
    if image.shape != text.shape:
        raise LossPreconditionError(
            f"image {tuple(image.shape)} and text {tuple(text.shape)} embeddings must have the same shape: "
            "row i of image is paired with row i of text"
        )
    if image.shape[0] < min_batch:
        raise LossPreconditionError(
            f"batch of {image.shape[0]} rows: in-batch negatives need at least {min_batch}; raise batch_size"
        )
