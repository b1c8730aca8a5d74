"""Within-modality semantic-neighborhood constraints of Thomas & Kovashka (ECCV 2020): L_text (Eq. 6) and
L_img (Eq. 7) in N-pair form, weighted by α and β as in Eq. 8 (``text_weight`` and ``image_weight`` here: the
paper's α is a weight, not the angle ``alpha_degrees`` of the angular N-pair loss).

For sampled neighbor row m of batch row i = ``neighbor_of[m]``: anchor text_i (image_i), positive the
neighbor's text (image), negatives every batch row j of the same modality that belongs neither to i's
group nor to the neighbor's group (so the neighbor item, when it is also in the batch, is no negative).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from torch import Tensor

from common.registry import Registry
from common.settings import at_least, redeclared, setting
from models.losses.base import NEIGHBOR_KEYWORDS, Loss, LossOutput, register_loss
from models.losses.checks import (
    check_embedding_matrix,
    check_pair_embeddings,
    chosen,
    require_neighbors,
)
from models.losses.distances import NEGATIVES, distance_named
from models.losses.pair_terms import (
    ANGULAR_FORMS,
    AngularTerm,
    NeighborPairs,
    PairTerm,
    TermSettings,
    TripletTerm,
    neighbor_contributions,
    neighbor_pairs,
    tan_squared,
)
from models.losses.settings import LossSettings, Shared, choice


class WithinForm(NamedTuple):
    """A family of Eq. 6-7's term: the α (text) and β (image) chosen for it on held-out data (§3.3), and the
    term it is, from the loss's angular and triplet terms (both built, so every parameter is checked)."""

    text_weight: float
    image_weight: float
    pick: Callable[[AngularTerm, TripletTerm], PairTerm]


#: the within-modality terms in the form of the cross-modal loss they join: "Ours (Ang)" and "Ours (Trip)"
WITHIN_FORMS: Registry[WithinForm] = Registry("within-modality form")
WITHIN_FORMS.add("angular", WithinForm(0.2, 0.3, lambda angular, triplet: angular))
WITHIN_FORMS.add("triplet", WithinForm(0.3, 0.1, lambda angular, triplet: triplet))


@dataclass(frozen=True)
class WithinModalitySettings(LossSettings):
    form: str = setting("angular", "the term of Eq. 6-7: angular (Ours (Ang)) or triplet (Ours (Trip))", choice(WITHIN_FORMS))
    text_weight: float | None = setting(None, "α of Eq. 8, the weight of L_text (null: the form's, chosen on held-out data)", at_least(0, or_null=True))
    image_weight: float | None = setting(None, "β of Eq. 8, the weight of L_img (null: the form's)", at_least(0, or_null=True))
    weight_scale: float = setting(1.0, "multiplies α and β (0: the cross-modal loss alone, 1: the paper's weighting)", at_least(0))
    angular_form: str = redeclared(TermSettings, "angular_form")
    alpha_degrees: float = redeclared(TermSettings, "alpha_degrees")
    margin: float = redeclared(TermSettings, "margin")
    distance: str = redeclared(TermSettings, "distance")
    cocos_eps: float = redeclared(Shared, "cocos_eps")


@register_loss("within_modality")
class WithinModality(Loss[NeighborPairs]):
    """α·L_text + β·L_img (Eq. 6-8): pull each item's sampled semantic neighbor close in both modalities.

    ``form="angular"`` uses the angular N-pair term (``angular_form`` smooth/hinge, ``alpha_degrees``) as
    in "Ours (Ang)"; ``form="triplet"`` the all-negatives triplet term (``margin``, ``distance``) as in
    "Ours (Trip)". ``text_weight`` (α) / ``image_weight`` (β) default to the paper's values for the form
    (:data:`WITHIN_FORMS`); ``weight_scale`` multiplies both (one knob for how much the within-modality terms
    weigh against the cross-modal loss: 0 trains on the same batches with the cross-modal loss alone, 1 is the
    paper's weighting). Each term is the mean over the neighbor pairs.
    """

    #: the output identity spells Eq. 8's weights by the paper's symbols α, β (``LossSpec.as_dict``)
    identity_names: ClassVar[dict[str, str]] = {"text_weight": "alpha", "image_weight": "beta"}
    graph_safe = True

    needs = frozenset(NEIGHBOR_KEYWORDS)

    settings_class = WithinModalitySettings

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        s = self.settings
        family = chosen(WITHIN_FORMS, s.form)
        angular = AngularTerm(chosen(ANGULAR_FORMS, s.angular_form), tan_squared(s.alpha_degrees), s.cocos_eps)
        self.term = family.pick(angular, TripletTerm(distance_named(s.distance), s.margin, NEGATIVES["all"]))
        self.text_weight = s.weight_scale * (family.text_weight if s.text_weight is None else s.text_weight)
        self.image_weight = s.weight_scale * (family.image_weight if s.image_weight is None else s.image_weight)

    def prepare(
        self, *, image: Tensor, text: Tensor, group_ids: Tensor | None = None, **inputs: Tensor
    ) -> NeighborPairs:
        check_pair_embeddings(image, text)
        neighbors = require_neighbors(image, group_ids, inputs)
        # the smooth angular form and the cosine distance assume unit vectors; the others do not
        unit_norm = self.term.needs_unit_norm
        for name, value in (
            ("image", image),
            ("text", text),
            ("neighbor_image", neighbors.image),
            ("neighbor_text", neighbors.text),
        ):
            check_embedding_matrix(name, value, unit_norm=unit_norm)
        return neighbor_pairs(image, text, neighbors, group_ids, self.text_weight, self.image_weight)

    def compute(self, pairs: NeighborPairs) -> LossOutput:
        return {
            f"within_{term.modality}_loss": term.weight
            * self.term.terms(term.anchors, term.positives, term.pool, pairs.negative_mask).mean()
            for term in pairs.terms
        }

    def contributions(self, pairs: NeighborPairs) -> dict[str, Tensor]:
        return neighbor_contributions(
            pairs, lambda term, negative_mask: self.term.contributions(term.anchors, term.positives, term.pool, negative_mask)
        )
