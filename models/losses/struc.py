"""Structure-preserving constraint of Wang, Li & Lazebnik (CVPR 2016, "Learning Deep Structure-Preserving
Image-Text Embeddings", its within-view neighborhood terms): the "Struc" baseline of Table 2 of
Thomas & Kovashka.

Within one space S (text or image embeddings): for every anchor a, every member p of a's group (p ≠ a) and
every non-member n, [m + d(a,p) − d(a,n)]_+. Wang et al. keep only the top-K violating negatives per
(a, p); ``top_k=None`` sums over all of them. Groups are either ground truth (``group_ids``: several
captions of one image) or estimated: the group of batch row i is {i, its sampled neighbor}.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from common.registry import Registry
from common.settings import Limit, at_least, one_of, setting
from models.losses.base import NEIGHBOR_KEYWORDS, Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.checks import (
    check_embedding_matrix,
    check_negative_mask,
    check_pair_embeddings,
    contribution_summary,
    default_group_ids,
    neighbor_negative_mask,
    require_neighbors,
)
from models.losses.distances import DISTANCES, distance_named
from models.losses.settings import LossSettings, choice, positive_top_k

SPACES = ("text", "image")


def structure_violations(
    anchor_to_positive: Tensor, anchor_to_pool: Tensor, negative_mask: Tensor, margin: float
) -> Tensor:
    """``[Q, P]`` m + d(a,p) − d(a,n) per (anchor-positive pair, pool row), −inf where n is no negative."""
    check_negative_mask(negative_mask, anchor_to_pool.shape[0], anchor_to_pool.shape[1])
    violations = margin + anchor_to_positive.unsqueeze(1) - anchor_to_pool
    return violations.masked_fill(~negative_mask, -math.inf)


def structure_terms(violations: Tensor, top_k: int | None) -> Tensor:
    """``[Q]`` Σ_n [violation]_+ over all negatives, or over the ``top_k`` largest (Wang et al.)."""
    if top_k is not None:
        violations = violations.topk(min(top_k, violations.shape[1]), dim=1).values
    # relu(−inf) is 0 with zero gradient, so masked entries drop out of both the sum and its gradient
    return torch.relu(violations).sum(dim=1)


def structure_contributions(violations: Tensor, top_k: int | None) -> Tensor:
    """``LongTensor[Q]``: violating negatives kept by the loss (COCOS C^q, Bleeker & de Rijke §4)."""
    counts = (violations > 0).sum(dim=1)
    return counts if top_k is None else counts.clamp_max(top_k)


@dataclass(frozen=True)
class GroupSource:
    """Where Struc's groups come from (its ``group_source``): the keywords it needs, and the ``[Q, P]``
    violations of every (anchor-positive pair, pool row) it gives (a method of the loss, given the space's
    embeddings, their groups, the batch's image embeddings and group ids, and the other loss inputs)."""

    name: str
    needs: frozenset[str]
    violations: Callable[..., Tensor]


#: ``ground_truth``: several captions of one image (``group_ids``); ``neighbors``: the group of batch row i is {i,
#: its sampled neighbor}, both (row, neighbor) and (neighbor, row) taken as anchor-positive pairs
GROUP_SOURCES: Registry[GroupSource] = Registry("Struc group source")


@dataclass(frozen=True)
class StrucSettings(LossSettings):
    space: str = setting("text", "the space whose structure is preserved: text or image", one_of(*SPACES))
    margin: float = setting(0.1, "the structure hinge's margin", at_least(0))
    weight: float = setting(1.0, "the loss's weight beside the cross-modal loss", at_least(0))
    group_source: str = setting("ground_truth", "the groups: several captions of one image, or sampled neighbors", choice(GROUP_SOURCES))
    top_k: int | None = setting(None, "sum the top_k largest violations of a pair (null: all; Wang et al.)", Limit(positive_top_k, ">= 1 or null"))
    distance: str = setting("euclidean", "the distance of the structure hinge", choice(DISTANCES))


@register_loss("struc")
class Struc(Loss[Tensor]):
    """Structure-preserving loss in one space (``space``), the mean over (anchor, group mate) pairs, times
    ``weight``. ``group_source="neighbors"`` needs the sampled-neighbor keywords; it then uses both
    (batch row, neighbor) and (neighbor, batch row) as anchor-positive pairs, negatives being batch rows
    outside both their groups.
    """

    settings_class = StrucSettings

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.distance = distance_named(self.settings.distance)
        self.groups = GROUP_SOURCES.get(self.group_source)
        # per instance: only the neighbors' groups make the trainer sample neighbors
        self.needs = self.groups.needs

    def prepare(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **inputs: Tensor
    ) -> Tensor:
        """The ``[Q, P]`` violations of every (anchor-positive pair, pool row), −inf where no negative."""
        check_pair_embeddings(image, text)
        embeddings = text if self.space == "text" else image
        check_embedding_matrix(self.space, embeddings, unit_norm=self.distance.needs_unit_norm)
        groups = default_group_ids(group_ids, embeddings.shape[0], embeddings.device)
        return self.groups.violations(self, embeddings, groups, image, group_ids, inputs)

    def _neighbor_violations(
        self, embeddings: Tensor, groups: Tensor, image: Tensor, group_ids: Tensor | None, inputs: dict[str, Tensor]
    ) -> Tensor:
        sampled = require_neighbors(image, group_ids, inputs)
        neighbors = sampled.text if self.space == "text" else sampled.image
        check_embedding_matrix(f"neighbor_{self.space}", neighbors, unit_norm=self.distance.needs_unit_norm)
        mask = neighbor_negative_mask(groups, sampled.of, sampled.group_ids)
        anchor_to_positive = self.distance.paired(embeddings[sampled.of], neighbors)
        batch_to_pool = self.distance.pairwise(embeddings, embeddings)[sampled.of]
        neighbor_to_pool = self.distance.pairwise(neighbors, embeddings)
        return torch.cat(
            [
                structure_violations(anchor_to_positive, batch_to_pool, mask, self.margin),
                structure_violations(anchor_to_positive, neighbor_to_pool, mask, self.margin),
            ]
        )

    def _ground_truth_violations(self, embeddings: Tensor, groups: Tensor, *_: object) -> Tensor:
        same_group = groups.unsqueeze(0) == groups.unsqueeze(1)
        mates = same_group & ~torch.eye(len(groups), dtype=torch.bool, device=groups.device)
        anchor_index, positive_index = mates.nonzero(as_tuple=True)
        if anchor_index.numel() == 0:
            raise LossPreconditionError(
                "Struc with group_source='ground_truth' found no two batch rows sharing a group id, so there "
                "is no structure to preserve: batch several captions per image (repeated group_ids, e.g. a "
                "sampler drawing k captions of each image) or use group_source='neighbors' with sampled "
                "neighbors"
            )
        distances = self.distance.pairwise(embeddings, embeddings)
        # the anchor-positive distance is taken row-wise so identical mates give exactly 0
        anchor_to_positive = self.distance.paired(embeddings[anchor_index], embeddings[positive_index])
        return structure_violations(
            anchor_to_positive, distances[anchor_index], ~same_group[anchor_index], self.margin
        )

    def compute(self, violations: Tensor) -> LossOutput:
        return {f"struc_{self.space}_loss": self.weight * structure_terms(violations, self.top_k).mean()}

    def contributions(self, violations: Tensor) -> dict[str, Tensor]:
        return contribution_summary(f"struc_{self.space}", structure_contributions(violations, self.top_k))


GROUP_SOURCES.add("ground_truth", GroupSource("ground_truth", frozenset({"group_mates"}), Struc._ground_truth_violations))
GROUP_SOURCES.add("neighbors", GroupSource("neighbors", frozenset(NEIGHBOR_KEYWORDS), Struc._neighbor_violations))
