"""The PVSE objective (Song & Soleymani, CVPR 2019): a VSE++ hardest-negative hinge on the
multiple-instance (MIL) similarity, a diversity regulariser on the PIE-Net residuals and an MMD term that
pulls the image and text embedding distributions together. Reference code: github.com/yalesong/pvse
(``loss.py``); defaults are those of its COCO training command (margin 0.1, ``--max_violation``,
``--div_weight 0.1``, ``--mmd_weight 0.01``).

The MIL similarity itself is in ``checks`` (``pvse_within_modality`` scores with it too) and is imported here,
where the PVSE model and the evaluation have always found it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from common.settings import above, at_least, setting
from models.losses.base import Loss, LossOutput, LossPreconditionError, register_loss
from models.losses.checks import (
    check_multi_embeddings,
    check_pair_embeddings,
    contribution_summaries,
    default_group_ids,
    mil_similarity,
)
from models.losses.settings import LossSettings


class MilScores(NamedTuple):
    """A guarded PVSE batch: the ``[B, B]`` MIL scores, the mask of same-group (non-negative) pairs and the
    ``[B, K, D]`` tensors the regularisers read."""

    scores: Tensor
    same_group: Tensor
    image: Tensor
    text: Tensor
    image_residual: Tensor | None
    text_residual: Tensor | None


def diversity_penalty(residual: Tensor) -> Tensor:
    """PVSE diversity regulariser: mean over the batch of ``||G - I||_F / K^2``, with ``G`` the Gram matrix
    of the K L2-normalised residuals of one instance. Zero when the K residuals are mutually orthogonal,
    so the K attention heads are pushed to pick different local features."""
    check_multi_embeddings("residual", residual)
    unit = F.normalize(residual, dim=-1)
    num_embeds = residual.shape[1]
    gram = unit @ unit.transpose(1, 2)
    identity = torch.eye(num_embeds, dtype=gram.dtype, device=gram.device)
    return torch.linalg.matrix_norm(gram - identity, ord="fro").mean() / num_embeds**2


def mmd_penalty(image: Tensor, text: Tensor, gamma: float = 0.5) -> Tensor:
    """PVSE's (biased) maximum mean discrepancy between the image and text embedding sets:
    ``mean k(x, x') - 2 mean k(x, y) + mean k(y, y')`` over all ``B*K`` embeddings of each modality, with
    PVSE's kernel ``k(a, b) = exp(-gamma ||a - b||_2)`` (its ``rbf`` uses the distance, not its square)."""
    x = image.reshape(-1, image.shape[-1])
    y = text.reshape(-1, text.shape[-1])

    def kernel_mean(a: Tensor, b: Tensor) -> Tensor:
        # the exact pairwise-difference path: the matmul shortcut is inexact at zero distance (x vs x)
        distances = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")
        return torch.exp(-gamma * distances).mean()

    return kernel_mean(x, x) - 2 * kernel_mean(x, y) + kernel_mean(y, y)


def hinge_on_scores(
    scores: Tensor, same_group: Tensor, margin: float, max_violation: bool
) -> tuple[Tensor, Tensor]:
    """VSE++ ranking terms on a square score matrix (rows: images, columns: texts; diagonal = positives).

    Returns (image-to-text, text-to-image): for each row/column, ``[margin + s(negative) - s(positive)]_+``
    over the entries of other groups, reduced by the hardest negative (``max_violation``) then the batch mean,
    or, as PVSE without ``--max_violation``, by the mean over all ``B x B`` entries (masked ones count as 0).
    """
    positive = scores.diagonal()
    image_to_text = (margin + scores - positive.unsqueeze(1)).clamp(min=0).masked_fill(same_group, 0.0)
    text_to_image = (margin + scores - positive.unsqueeze(0)).clamp(min=0).masked_fill(same_group, 0.0)
    if max_violation:
        return image_to_text.amax(dim=1).mean(), text_to_image.amax(dim=0).mean()
    return image_to_text.mean(), text_to_image.mean()


def hinge_contributions(
    scores: Tensor, same_group: Tensor, margin: float, max_violation: bool
) -> tuple[Tensor, Tensor]:
    """``LongTensor[B]`` per direction (image-to-text by row, text-to-image by column): the negatives in each
    query's gradient in :func:`hinge_on_scores` (COCOS C^q, Bleeker & de Rijke §4).

    With ``max_violation`` only the hardest negative carries gradient, so C^q is 1 when it breaks the margin
    (``margin + s(negative) - s(positive) > 0``), else 0; without it, every violating negative counts.
    """
    positive = scores.diagonal()
    other_group = ~same_group
    image_to_text = ((margin + scores - positive.unsqueeze(1)) > 0) & other_group
    text_to_image = ((margin + scores - positive.unsqueeze(0)) > 0) & other_group
    if max_violation:
        # the hardest negative violates exactly when some negative does
        return image_to_text.any(dim=1).long(), text_to_image.any(dim=0).long()
    return image_to_text.sum(dim=1), text_to_image.sum(dim=0)


@dataclass(frozen=True)
class PvseMilSettings(LossSettings):
    margin: float = setting(0.1, "the ranking terms' margin (PVSE's 0.1)", at_least(0))
    max_violation: bool = setting(True, "the hardest negative of each query (VSE++, PVSE's --max_violation); false: the sum over all")
    diversity_weight: float = setting(0.1, "weight of the diversity term on the residuals (PVSE's 0.1)", at_least(0))
    mmd_weight: float = setting(0.01, "weight of the MMD term between the modalities' embeddings (PVSE's 0.01)", at_least(0))
    mmd_gamma: float = setting(0.5, "the MMD kernel's bandwidth γ", above(0))


@register_loss("pvse_mil", model="pvse", eq8_cross_modal=True)
class PvseMil(Loss[MilScores]):
    """PVSE loss: ``L = L_i2t + L_t2i + diversity_weight * (div(image_res) + div(text_res)) + mmd_weight * MMD``.

    Ranking terms use the MIL similarity (:func:`mil_similarity`) with the hardest negative in both
    directions (VSE++). Rows sharing a ``group_id`` are never each other's negatives. As in PVSE, the
    diversity and MMD terms are switched off when K = 1 (diversity is then identically zero anyway), so with
    one embedding per instance this is exactly the VSE++ loss of a single-embedding model.
    """

    graph_safe = True

    #: the residuals come with every PVSEModel output, so nothing needs sampling and the trainer keeps this
    #: loss in the validation loss
    needs: ClassVar[frozenset[str]] = frozenset()

    settings_class = PvseMilSettings

    def prepare(
        self,
        *,
        image: Tensor,
        text: Tensor,
        image_residual: Tensor | None = None,
        text_residual: Tensor | None = None,
        group_ids: Tensor | None = None,
        **_: Tensor,
    ) -> MilScores:
        check_multi_embeddings("image", image)
        check_multi_embeddings("text", text)
        check_pair_embeddings(image, text)
        groups = default_group_ids(group_ids, image.shape[0], image.device)
        same_group = groups.unsqueeze(0) == groups.unsqueeze(1)
        return MilScores(mil_similarity(image, text), same_group, image, text, image_residual, text_residual)

    def compute(self, batch: MilScores) -> LossOutput:
        image, text = batch.image, batch.text
        image_to_text, text_to_image = hinge_on_scores(
            batch.scores, batch.same_group, self.margin, self.max_violation
        )
        zero = image.new_zeros(())
        multi = image.shape[1] > 1
        diversity = zero
        if multi and self.diversity_weight > 0:
            image_residual, text_residual = batch.image_residual, batch.text_residual
            if image_residual is None or text_residual is None:
                raise LossPreconditionError(
                    "the diversity term needs image_residual and text_residual [B, K, D] (PVSEModel returns "
                    "them); pass them or set diversity_weight=0"
                )
            if image_residual.shape[:2] != image.shape[:2] or text_residual.shape[:2] != text.shape[:2]:
                raise LossPreconditionError(
                    f"residuals {tuple(image_residual.shape)}, {tuple(text_residual.shape)} must be [B, K, D] "
                    f"with the B, K of the embeddings {tuple(image.shape)}"
                )
            diversity = self.diversity_weight * (
                diversity_penalty(image_residual) + diversity_penalty(text_residual)
            )
        mmd = (
            self.mmd_weight * mmd_penalty(image, text, self.mmd_gamma)
            if multi and self.mmd_weight > 0
            else zero
        )
        return {
            "image_to_text_loss": image_to_text,
            "text_to_image_loss": text_to_image,
            "diversity_loss": diversity,
            "mmd_loss": mmd,
        }

    def contributions(self, batch: MilScores) -> dict[str, Tensor]:
        """COCOS of the two ranking terms, keyed by direction as the other cross-modal losses report it; the
        diversity and MMD regularisers rank no candidates, so they have no negatives to count."""
        image_to_text, text_to_image = hinge_contributions(
            batch.scores, batch.same_group, self.margin, self.max_violation
        )
        return contribution_summaries({"image_to_text": image_to_text, "text_to_image": text_to_image})
