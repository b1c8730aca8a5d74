"""Distances between embeddings, and which negatives a hinge term keeps: each an object chosen by name
(``distance="cosine"``, ``negatives="hardest"``), as pytorch-metric-learning's distances and reducers are, so a
loss holds the object and never branches on the string.

A loss still takes the names as its parameters (they are what a variant spells and an output hashes); it looks
them up once, when it is built, through :func:`distance_named` and :func:`negatives_named`.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from common.registry import Registry
from models.losses.checks import chosen

#: keeps the gradient of sqrt finite at distance 0 (an anchor equal to a candidate)
EUCLIDEAN_FLOOR = 1e-16


class Distance:
    """A distance between embedding rows."""

    #: the distance is meant for unit vectors (a loss then checks its inputs are L2-normalised)
    needs_unit_norm: ClassVar[bool] = False

    def paired(self, x: Tensor, y: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[N]``: between row i of ``x`` and row i of ``y``."""
        raise NotImplementedError

    def pairwise(self, x: Tensor, y: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[N, P]``: between every row of ``x`` and every row of ``y``."""
        raise NotImplementedError


class CosineDistance(Distance):
    """1 − x·y of unit vectors."""

    needs_unit_norm = True

    def paired(self, x: Tensor, y: Tensor) -> Tensor:
        return 1.0 - (x * y).sum(dim=1)

    def pairwise(self, x: Tensor, y: Tensor) -> Tensor:
        return 1.0 - x @ y.T


class SquaredL2Distance(Distance):
    """‖x − y‖²."""

    def paired(self, x: Tensor, y: Tensor) -> Tensor:
        return (x - y).pow(2).sum(dim=1)

    def pairwise(self, x: Tensor, y: Tensor) -> Tensor:
        # expanded so no [N, P, D] tensor is built; the clamp undoes rounding below 0
        return (x.pow(2).sum(dim=1, keepdim=True) - 2.0 * x @ y.T + y.pow(2).sum(dim=1).unsqueeze(0)).clamp_min(0.0)


class EuclideanDistance(SquaredL2Distance):
    """‖x − y‖ (its square floored, so the gradient at 0 stays finite)."""

    def paired(self, x: Tensor, y: Tensor) -> Tensor:
        return super().paired(x, y).clamp_min(EUCLIDEAN_FLOOR).sqrt()

    def pairwise(self, x: Tensor, y: Tensor) -> Tensor:
        return super().pairwise(x, y).clamp_min(EUCLIDEAN_FLOOR).sqrt()


class Negatives:
    """Which of a query's valid negatives a hinge term keeps, and how many of them its gradient reaches."""

    def triplet(self, violations: Tensor, mask: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[Q]`` from ``violations`` ``[Q, N]`` (m + d(a, p) − d(a, n)) over the ``mask``-ed negatives; a query
        without a negative gives 0."""
        raise NotImplementedError

    def hinged(self, hinges: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[Q]`` from hinges already clamped at 0 and 0 where no valid negative is."""
        raise NotImplementedError

    def contributing(self, violating: Tensor) -> Tensor:  # pragma: no cover - interface
        """``LongTensor[Q]``: the negatives in each query's gradient (COCOS C^q), from ``violating`` ``[Q, N]``
        (a valid negative that breaks the margin)."""
        raise NotImplementedError


class AllNegatives(Negatives):
    """Σ_n [m + d(a,p) − d(a,n)]_+ (the N-pairs sum; Bleeker Eq. 3)."""

    def triplet(self, violations: Tensor, mask: Tensor) -> Tensor:
        return torch.relu(violations).masked_fill(~mask, 0.0).sum(dim=1)

    def hinged(self, hinges: Tensor) -> Tensor:
        return hinges.sum(dim=1)

    def contributing(self, violating: Tensor) -> Tensor:
        return violating.sum(dim=1)


class HardestNegative(Negatives):
    """The most violating negative only (VSE++'s max violation; Bleeker Eq. 1)."""

    def triplet(self, violations: Tensor, mask: Tensor) -> Tensor:
        hardest = violations.masked_fill(~mask, -math.inf).max(dim=1).values
        return torch.where(mask.any(dim=1), torch.relu(hardest), torch.zeros_like(hardest))

    def hinged(self, hinges: Tensor) -> Tensor:
        return hinges.amax(dim=1)

    def contributing(self, violating: Tensor) -> Tensor:
        return violating.any(dim=1).long()


DISTANCES: Registry[Distance] = Registry("distance")
DISTANCES.add("squared_l2", SquaredL2Distance())
DISTANCES.add("cosine", CosineDistance())
DISTANCES.add("euclidean", EuclideanDistance())
NEGATIVES: Registry[Negatives] = Registry("negatives")
NEGATIVES.add("all", AllNegatives())
NEGATIVES.add("hardest", HardestNegative())


def distance_named(name: str) -> Distance:
    """The distance ``name``; a :class:`LossPreconditionError` naming the valid ones otherwise."""
    return chosen(DISTANCES, name)


def negatives_named(name: str) -> Negatives:
    """The negatives rule ``name``; a :class:`LossPreconditionError` naming the valid ones otherwise."""
    return chosen(NEGATIVES, name)
