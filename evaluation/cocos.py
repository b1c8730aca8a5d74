"""COCOS of trained losses (Bleeker & de Rijke 2022, §4–5): per loss, how many candidates contribute to the
gradient w.r.t. each query, summarised over a pass of training batches.

The evaluation reads losses and batches only through what :class:`DiagnosedLoss` names, so it needs no
model code: the pipeline runs the frozen model and hands over each batch's loss keywords.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from evaluation.statistics import cocos_summary


class DiagnosedLoss(Protocol):
    """What COCOS reads of a loss (``models.losses.base.Loss`` provides it)."""

    name: str

    @property
    def reports_cocos(self) -> bool: ...

    def diagnostics(self, **inputs: Tensor) -> Mapping[str, Tensor]: ...


@torch.no_grad()
def cocos_per_loss(
    losses: Sequence[DiagnosedLoss], batches: Iterable[Mapping[str, Tensor]]
) -> dict[str, dict[str, Any]]:
    """Per loss, :func:`cocos_summary` of its ``diagnostics()`` on every batch of ``batches`` (the loss
    keywords of one batch each). Losses that report no diagnostics are left out; when none reports any,
    ``batches`` is never iterated, so a lazy pass over the training set (a model forward per batch) is
    skipped, its result being empty anyway.
    """
    losses = [loss for loss in losses if loss.reports_cocos]
    if not losses:
        return {}
    per_loss: dict[str, list[dict[str, Any]]] = {loss.name: [] for loss in losses}
    for inputs in batches:
        for loss in losses:
            diagnostics = loss.diagnostics(**inputs)
            if diagnostics:
                per_loss[loss.name].append({k: v.detach().cpu().numpy() for k, v in diagnostics.items()})
    return {name: cocos_summary(summaries) for name, summaries in per_loss.items() if summaries}
