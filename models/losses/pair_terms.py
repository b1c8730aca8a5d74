"""The pairwise terms several losses reuse (Thomas & Kovashka): the angular term of Eq. 2-3 and the triplet
term of Eq. 1, also used by their within-modality Eq. 6-7, the batch set-ups of those families and their
COCOS counts (Bleeker & de Rijke §4).

Each choice between algorithms is an object picked by name once, when a loss is built (as pytorch-metric-
learning's distances and reducers are): the angular term's form (:data:`ANGULAR_FORMS`), a triplet term's
distance and negatives (``distances``), and the term itself (:class:`AngularTerm`, :class:`TripletTerm`); no
loss branches on a string. Builds on ``checks``, ``distances`` and ``base``. Operations are built in the order
the losses always built them, so losses, gradients and COCOS counts stay bit for bit as they were.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from common.registry import Registry
from common.settings import at_least, between, setting
from models.losses.base import Loss, LossOutput
from models.losses.checks import (
    COCOS_EPS,
    LossPreconditionError,
    Neighbors,
    check_embedding_matrix,
    check_negative_mask,
    check_pair_embeddings,
    contribution_summaries,
    default_group_ids,
    different_group_mask,
    neighbor_negative_mask,
)
from models.losses.distances import DISTANCES, Distance, Negatives
from models.losses.settings import LossSettings, choice

# --------------------------------------------------------------- pairwise terms (Thomas & Kovashka Eq. 1-3)


def tan_squared(alpha_degrees: float) -> float:
    """tan²α of the angular loss (Wang et al. ICCV 2017); α=45° gives 1, as in the authors' released code."""
    if not 0.0 < alpha_degrees < 90.0:
        raise LossPreconditionError(
            f"alpha_degrees={alpha_degrees} is outside (0, 90): the angular bound needs an acute angle; "
            "the paper's code uses 45"
        )
    return math.tan(math.radians(alpha_degrees)) ** 2


class AngularForm:
    """How the angular term of Eq. 2-3 is read: its quantity per (anchor-positive pair, negative), how a pair's
    negatives add up to its loss, and which of them reach the gradient. Chosen by name (``form="smooth"``) when
    a loss is built, as a distance is."""

    #: the form's algebra assumes unit vectors (a loss then checks its inputs are L2-normalised)
    needs_unit_norm: ClassVar[bool] = False

    def logits(self, anchor: Tensor, positive: Tensor, negatives: Tensor, tan_sq: float) -> Tensor:  # pragma: no cover - interface
        """``[Q, P]``: the quantity of anchor-positive pair q against negative p."""
        raise NotImplementedError

    def terms(self, logits: Tensor, negative_mask: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[Q]``: each pair's loss over its masked negatives; a pair with no negatives gives 0."""
        raise NotImplementedError

    def contributing(self, logits: Tensor, negative_mask: Tensor, eps: float) -> Tensor:  # pragma: no cover - interface
        """``LongTensor[Q]``: the negatives in each pair's gradient (COCOS, Bleeker & de Rijke §4)."""
        raise NotImplementedError


class SmoothAngular(AngularForm):
    """Wang et al.'s smooth N-pair angular loss (ICCV 2017): log(1 + Σ_n exp(4tan²α (a+p)·n − 2(1+tan²α) a·p)),
    whose exponent equals the Eq. 2 bracket up to a constant on unit vectors. A negative contributes when its
    weight exp(f_n) / (1 + Σ_k exp(f_k)) in the gradient of the log-sum-exp exceeds ``eps``."""

    needs_unit_norm = True

    def logits(self, anchor: Tensor, positive: Tensor, negatives: Tensor, tan_sq: float) -> Tensor:
        anchor_dot_positive = (anchor * positive).sum(dim=1, keepdim=True)
        return 4.0 * tan_sq * (anchor + positive) @ negatives.T - 2.0 * (1.0 + tan_sq) * anchor_dot_positive

    @staticmethod
    def _with_one(logits: Tensor, negative_mask: Tensor) -> Tensor:
        """The masked logits and a zero column: the "1 +" inside the log, which keeps rows without negatives
        finite."""
        masked = logits.masked_fill(~negative_mask, -math.inf)
        return torch.cat([masked, masked.new_zeros(masked.shape[0], 1)], dim=1)

    def terms(self, logits: Tensor, negative_mask: Tensor) -> Tensor:
        return torch.logsumexp(self._with_one(logits, negative_mask), dim=1)

    def contributing(self, logits: Tensor, negative_mask: Tensor, eps: float) -> Tensor:
        weights = torch.softmax(self._with_one(logits, negative_mask), dim=1)[:, :-1]
        return ((weights > eps) & negative_mask).sum(dim=1)


class HingeAngular(AngularForm):
    """Eq. 2 summed over the negatives (Eq. 3): Σ_n [‖a−p‖² − 4tan²α‖n − C‖²]_+ with C = (a+p)/2; a negative
    contributes when it violates the bound (a non-zero hinge)."""

    def logits(self, anchor: Tensor, positive: Tensor, negatives: Tensor, tan_sq: float) -> Tensor:
        # ‖a−p‖² taken directly so identical pairs give exactly 0; ‖n−C‖² expanded so no [Q, P, D] tensor is
        # built, and clamped because the expansion can round a true 0 to a tiny negative.
        anchor_positive_sq = (anchor - positive).pow(2).sum(dim=1, keepdim=True)
        center = (anchor + positive) / 2.0
        negative_center_sq = (
            negatives.pow(2).sum(dim=1).unsqueeze(0)
            - 2.0 * center @ negatives.T
            + center.pow(2).sum(dim=1, keepdim=True)
        ).clamp_min(0.0)
        return anchor_positive_sq - 4.0 * tan_sq * negative_center_sq

    def terms(self, logits: Tensor, negative_mask: Tensor) -> Tensor:
        return torch.relu(logits).masked_fill(~negative_mask, 0.0).sum(dim=1)

    def contributing(self, logits: Tensor, negative_mask: Tensor, eps: float) -> Tensor:
        return ((logits > 0) & negative_mask).sum(dim=1)


ANGULAR_FORMS: Registry[AngularForm] = Registry("angular form")
ANGULAR_FORMS.add("smooth", SmoothAngular())
ANGULAR_FORMS.add("hinge", HingeAngular())


@dataclass(frozen=True)
class TermSettings(LossSettings):
    """The settings of the two terms, declared once: the cross-modal losses (angular, triplet) and the
    within-modality loss that reuses their terms take them from here."""

    angular_form: str = setting(
        "smooth", "the angular term: Wang et al.'s smooth N-pair form (the authors' code) or Eq. 2's hinge", choice(ANGULAR_FORMS)
    )
    #: the angular bound needs an acute angle
    alpha_degrees: float = setting(
        45.0, "the angle α of the angular bound (Eq. 2-3), in degrees (45: the authors')", between(0, 90, high_open=True)
    )
    distance: str = setting("squared_l2", "the triplet term's distance d in [m + d(a,p) − d(a,n)]_+", choice(DISTANCES))
    margin: float = setting(0.2, "the triplet term's margin m (VSE++'s 0.2)", at_least(0))


class PairTerm:
    """The loss of anchor-positive pairs over their masked negatives, the unit the cross-modal losses (Eq. 1,
    Eq. 2-4) and the within-modality loss (Eq. 6-7) are made of: an :class:`AngularTerm` or a
    :class:`TripletTerm`, built once from a loss's parameters."""

    @property
    def needs_unit_norm(self) -> bool:  # pragma: no cover - interface
        """The term assumes unit vectors (its loss then checks its inputs are L2-normalised)."""
        raise NotImplementedError

    def terms(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:  # pragma: no cover - interface
        """``[Q]``: the loss of pair q (anchor q, positive q) over the negatives ``negative_mask[q]`` keeps."""
        raise NotImplementedError

    def contributions(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:  # pragma: no cover - interface
        """``LongTensor[Q]``: the negatives in each pair's gradient (COCOS C^q, Bleeker & de Rijke §4)."""
        raise NotImplementedError


@dataclass(frozen=True)
class AngularTerm(PairTerm):
    """The angular N-pair term (Eq. 2-3) in one :class:`AngularForm`, at tan²α."""

    form: AngularForm
    tan_sq: float
    cocos_eps: float = COCOS_EPS

    @property
    def needs_unit_norm(self) -> bool:
        return self.form.needs_unit_norm

    def terms(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:
        check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
        return self.form.terms(self.form.logits(anchor, positive, negatives, self.tan_sq), negative_mask)

    def contributions(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:
        check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
        logits = self.form.logits(anchor, positive, negatives, self.tan_sq)
        return self.form.contributing(logits, negative_mask, self.cocos_eps)


def triplet_violations(anchor: Tensor, positive: Tensor, negatives: Tensor, distance: Distance, margin: float) -> Tensor:
    """``[Q, P]`` m + d(a_q, p_q) − d(a_q, n_p): positive where the triplet breaks the margin (Eq. 1)."""
    return margin + distance.paired(anchor, positive).unsqueeze(1) - distance.pairwise(anchor, negatives)


@dataclass(frozen=True)
class TripletTerm(PairTerm):
    """The triplet term (Eq. 1) over the negatives ``keep`` keeps: all of them (Bleeker Eq. 3) or the hardest
    (VSE++'s max violation, Eq. 1); a negative contributes when it is kept and violates the margin."""

    distance: Distance
    margin: float
    keep: Negatives

    @property
    def needs_unit_norm(self) -> bool:
        return self.distance.needs_unit_norm

    def terms(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:
        check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
        return self.keep.triplet(triplet_violations(anchor, positive, negatives, self.distance, self.margin), negative_mask)

    def contributions(self, anchor: Tensor, positive: Tensor, negatives: Tensor, negative_mask: Tensor) -> Tensor:
        check_negative_mask(negative_mask, anchor.shape[0], negatives.shape[0])
        violations = triplet_violations(anchor, positive, negatives, self.distance, self.margin)
        return self.keep.contributing((violations > 0) & negative_mask)


# ------------------------------------------------------------------- batch set-ups shared by several losses


class CrossModalPairs(NamedTuple):
    """``(name, anchors, candidate pool)`` per retrieval direction and the ``[B, B]`` valid-negative mask;
    the positive of anchor row i is row i of the pool."""

    directions: list[tuple[str, Tensor, Tensor]]
    negative_mask: Tensor


def cross_modal_pairs(
    image: Tensor, text: Tensor, group_ids: Tensor | None, *, symmetric: bool, unit_norm: bool
) -> CrossModalPairs:
    """After the input guards: image→text (and text→image when ``symmetric``) with negatives the rows of
    another group."""
    check_pair_embeddings(image, text)
    check_embedding_matrix("image", image, unit_norm=unit_norm)
    check_embedding_matrix("text", text, unit_norm=unit_norm)
    directions = [("image_to_text", image, text)]
    if symmetric:
        directions.append(("text_to_image", text, image))
    groups = default_group_ids(group_ids, image.shape[0], image.device)
    return CrossModalPairs(directions, different_group_mask(groups, groups))


class CrossModalTermLoss(Loss[CrossModalPairs]):
    """A cross-modal loss that is one :class:`PairTerm` in each retrieval direction: image→text and (when
    ``symmetric``) text→image, negatives every row of the other modality from another group, each direction
    the mean over the batch's anchor-positive pairs. A subclass builds ``term`` from its parameters."""

    graph_safe = True
    term: PairTerm
    symmetric: bool

    def prepare(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **unused: Tensor
    ) -> CrossModalPairs:
        unit_norm = self.term.needs_unit_norm
        return cross_modal_pairs(image, text, group_ids, symmetric=self.symmetric, unit_norm=unit_norm)

    def compute(self, pairs: CrossModalPairs) -> LossOutput:
        return {
            f"{name}_loss": self.term.terms(anchors, others, others, pairs.negative_mask).mean()
            for name, anchors, others in pairs.directions
        }

    def contributions(self, pairs: CrossModalPairs) -> dict[str, Tensor]:
        return contribution_summaries(
            {
                name: self.term.contributions(anchors, others, others, pairs.negative_mask)
                for name, anchors, others in pairs.directions
            }
        )


class NeighborTerm(NamedTuple):
    """One within-modality term (Eq. 6 for ``text``, Eq. 7 for ``image``): row m pairs anchor m (batch row
    ``neighbor_of[m]``) with its sampled neighbor; the pool is the batch rows of the modality."""

    modality: str
    weight: float
    anchors: Tensor
    positives: Tensor
    pool: Tensor


class NeighborPairs(NamedTuple):
    """The two within-modality terms and their shared ``[M, B]`` valid-negative mask."""

    terms: list[NeighborTerm]
    negative_mask: Tensor


def neighbor_pairs(
    image: Tensor,
    text: Tensor,
    neighbors: Neighbors,
    group_ids: Tensor | None,
    text_weight: float,
    image_weight: float,
) -> NeighborPairs:
    """The text (α, Eq. 6) and image (β, Eq. 7) terms of already guarded neighbors."""
    groups = default_group_ids(group_ids, image.shape[0], image.device)
    mask = neighbor_negative_mask(groups, neighbors.of, neighbors.group_ids)
    terms = [
        NeighborTerm("text", text_weight, text[neighbors.of], neighbors.text, text),
        NeighborTerm("image", image_weight, image[neighbors.of], neighbors.image, image),
    ]
    return NeighborPairs(terms, mask)


def neighbor_contributions(
    pairs: NeighborPairs, count: Callable[[NeighborTerm, Tensor], Tensor]
) -> dict[str, Tensor]:
    """COCOS of each within-modality term, keyed ``within_text`` / ``within_image``, from
    ``count(term, negative_mask)``; a switched-off term (weight 0, the Table 4 ablations) sends no gradient
    to any negative."""
    counts = {}
    for term in pairs.terms:
        if term.weight == 0:
            counts[f"within_{term.modality}"] = term.anchors.new_zeros(
                term.anchors.shape[0], dtype=torch.long
            )
        else:
            counts[f"within_{term.modality}"] = count(term, pairs.negative_mask)
    return contribution_summaries(counts)
