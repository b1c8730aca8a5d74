"""PVSE model (PIE-Net, masking, K=1 reduction) and its losses (MIL hinge, diversity, MMD, within-modality)
checked against loop-by-loop references and gradcheck; their COCOS diagnostics (Bleeker & de Rijke §4)
checked on hand-built embeddings, against loop-by-loop counts, and through the COCOS collection."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.batching import BatchSampler
from models.config import ModelConfig
from models.losses import LOSSES, LossPreconditionError, build_loss
from models.losses.pvse_mil import diversity_penalty, mil_similarity, mmd_penalty
from models.pvse import PolysemousInstanceEmbedding, PVSEModel
from models.registry import MODELS, build_model
from models.training import PairData
from pipeline.config.variants import VARIANTS
from pipeline.tasks.cocos import collect_cocos

VOCAB = 23
CONFIG = ModelConfig(
    backbone="resnet18", pretrained=False, embed_dim=16, word_dim=8, gru_hidden=12, vocab_size=VOCAB
)


def make_model(num_embeds: int) -> PVSEModel:
    torch.manual_seed(0)
    return build_model("pvse", CONFIG, num_embeds=num_embeds).eval()


@pytest.fixture(scope="module")
def model() -> PVSEModel:
    return make_model(num_embeds=3)


def make_batch(batch: int = 4, size: tuple[int, int] = (64, 64), seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch, *size, 3), dtype=torch.uint8, generator=generator)
    lengths = torch.tensor([7, 3, 1, 5, 2, 6][:batch])
    tokens = torch.randint(1, VOCAB, (batch, 7), generator=generator)
    tokens[torch.arange(7).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return images, tokens, lengths


def unit(*shape: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1)


# ----------------------------------------------------------------------------------------------- model


def test_registered_by_name() -> None:
    assert MODELS["pvse"] is PVSEModel
    assert "pvse_mil" in LOSSES and "pvse_within_modality" in LOSSES


@pytest.mark.parametrize(("size", "map_size"), [((64, 64), (2, 2)), ((32, 32), (1, 1)), ((64, 96), (2, 3))])
def test_shapes_for_any_feature_map_size(
    model: PVSEModel, size: tuple[int, int], map_size: tuple[int, int]
) -> None:
    images, tokens, lengths = make_batch(size=size)
    with torch.no_grad():
        out = model(images, tokens, lengths)
    assert out["image"].shape == out["image_residual"].shape == (4, 3, 16)
    assert out["text"].shape == out["text_residual"].shape == (4, 3, 16)
    assert out["image_attention"].shape == (4, 3, *map_size)
    assert out["text_attention"].shape == (4, 3, 7)
    for key in ("image", "text"):
        torch.testing.assert_close(out[key].norm(dim=-1), torch.ones(4, 3))
    torch.testing.assert_close(out["image_attention"].sum(dim=(2, 3)), torch.ones(4, 3))
    torch.testing.assert_close(model.encode_image(images), out["image"])
    torch.testing.assert_close(model.encode_text(tokens, lengths), out["text"])


def test_padded_words_get_zero_attention_and_change_nothing(model: PVSEModel) -> None:
    _, tokens, lengths = make_batch()
    padded = torch.arange(tokens.shape[1]).unsqueeze(0) >= lengths.unsqueeze(1)
    with torch.no_grad():
        text, residual, attention = model.text_encoder(tokens, lengths)
        assert torch.all(attention.masked_select(padded.unsqueeze(1)) == 0)
        assert torch.all(attention.masked_select(~padded.unsqueeze(1)) > 0)
        torch.testing.assert_close(attention.sum(dim=-1), torch.ones(4, 3))

        # other ids at the padded positions, plus three more padded columns: nothing may change
        scrambled = torch.where(
            padded, torch.randint(1, VOCAB, tokens.shape, generator=torch.Generator().manual_seed(5)), tokens
        )
        scrambled = torch.cat([scrambled, torch.randint(1, VOCAB, (4, 3))], dim=1)
        text_2, residual_2, attention_2 = model.text_encoder(scrambled, lengths)
        torch.testing.assert_close(text_2, text, atol=1e-6, rtol=0)
        torch.testing.assert_close(residual_2, residual, atol=1e-6, rtol=0)
        torch.testing.assert_close(attention_2[..., :7], attention, atol=1e-6, rtol=0)

        # while changing a real word does change the embedding (the check above can fail)
        edited = tokens.clone()
        edited[0, 0] = 1 + edited[0, 0] % (VOCAB - 1)
        assert not torch.allclose(model.text_encoder(edited, lengths)[0][0], text[0], atol=1e-4)


def test_k1_reduces_to_a_single_embedding_vse_model() -> None:
    """K = 1 means: each modality yields ONE unit vector, l2norm(LayerNorm(global + residual)) with the
    residual sigmoid(W_fc * attention-pooled local features); the MIL similarity is the plain dot product of
    those vectors; and the PVSE loss is exactly the VSE++ hardest-negative hinge on them (diversity is
    identically 0 and PVSE turns MMD off for K = 1)."""
    model = make_model(num_embeds=1)
    images, tokens, lengths = make_batch()
    with torch.no_grad():
        out = model(images, tokens, lengths)
        assert out["image"].shape == (4, 1, 16)

        # the embedding path written out by hand
        encoder = model.image_encoder
        feature_map = encoder.cnn.feature_map(images)
        local = feature_map.flatten(2).transpose(1, 2)
        pie = encoder.pie
        weights = torch.softmax(
            pie.attention_heads(torch.tanh(pie.attention_hidden(local))).squeeze(-1), dim=1
        )
        residual = torch.sigmoid(pie.residual_project(torch.einsum("bn,bnc->bc", weights, local)))
        global_feature = encoder.cnn.project(feature_map.mean(dim=(2, 3)))
        expected = F.normalize(pie.layer_norm(global_feature + residual), dim=-1)
        torch.testing.assert_close(out["image"][:, 0], expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["image_residual"][:, 0], residual, atol=1e-5, rtol=1e-5)

        image, text = out["image"][:, 0], out["text"][:, 0]
        scores = image @ text.T
        torch.testing.assert_close(mil_similarity(out["image"], out["text"]), scores)

        losses = build_loss("pvse_mil")(**out)
        off_diagonal = ~torch.eye(4, dtype=torch.bool)
        positive = scores.diagonal()
        vse_i2t = ((0.1 + scores - positive[:, None]).clamp(min=0) * off_diagonal).amax(dim=1).mean()
        vse_t2i = ((0.1 + scores - positive[None, :]).clamp(min=0) * off_diagonal).amax(dim=0).mean()
        torch.testing.assert_close(losses["image_to_text_loss"], vse_i2t)
        torch.testing.assert_close(losses["text_to_image_loss"], vse_t2i)
        assert losses["diversity_loss"] == 0 and losses["mmd_loss"] == 0
        assert float(diversity_penalty(out["image_residual"])) == pytest.approx(0.0, abs=1e-6)


def test_pie_net_gradcheck_with_padding_mask() -> None:
    torch.manual_seed(0)
    pie = PolysemousInstanceEmbedding(
        num_embeds=2, local_dim=5, embed_dim=4, hidden_dim=3, dropout=0.0
    ).double()
    global_feature = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    local = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[False, False, True, True], [False, False, False, False]])

    def embed(g: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embeddings, residual, _ = pie(g, x, mask)
        return embeddings, residual

    assert torch.autograd.gradcheck(embed, (global_feature, local))
    embeddings, residual, _ = pie(global_feature, local, mask)
    (embeddings.sum() + residual.sum()).backward()
    assert torch.all(local.grad[0, 2:] == 0)  # padded positions receive no gradient


# ---------------------------------------------------------------------------------------------- losses


def loop_mil(a: torch.Tensor, b: torch.Tensor) -> float:
    return max(float(a[k] @ b[j]) for k in range(a.shape[0]) for j in range(b.shape[0]))


def test_mil_similarity_equals_loop_max() -> None:
    image, text = unit(3, 3, 5, seed=0), unit(4, 2, 5, seed=1)
    scores = mil_similarity(image, text)
    assert scores.shape == (3, 4)
    for i in range(3):
        for t in range(4):
            assert math.isclose(float(scores[i, t]), loop_mil(image[i], text[t]), abs_tol=1e-12)


def test_diversity_is_zero_for_orthogonal_residuals_only() -> None:
    basis = torch.linalg.qr(
        torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    )[0]
    orthogonal = torch.stack([basis[:3] * 2.5, basis[3:] * 0.3])  # [2, 3, 6], orthogonal rows
    assert float(diversity_penalty(orthogonal)) == pytest.approx(0.0, abs=1e-12)
    parallel = basis[0].expand(2, 3, 6) * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 3, 1)
    # Gram of 3 equal unit vectors minus I: six off-diagonal ones -> sqrt(6) / 3^2
    assert float(diversity_penalty(parallel)) == pytest.approx(math.sqrt(6) / 9)


def loop_pvse_reference(image, text, image_res, text_res, groups, margin, max_violation, div_w, mmd_w, gamma):
    batch, num_embeds = image.shape[:2]
    scores = [[loop_mil(image[i], text[t]) for t in range(batch)] for i in range(batch)]
    i2t_rows, t2i_rows, all_i2t, all_t2i = [], [], 0.0, 0.0
    for q in range(batch):
        i2t = [max(0.0, margin + scores[q][t] - scores[q][q]) for t in range(batch) if groups[t] != groups[q]]
        t2i = [max(0.0, margin + scores[i][q] - scores[q][q]) for i in range(batch) if groups[i] != groups[q]]
        i2t_rows.append(max(i2t, default=0.0))
        t2i_rows.append(max(t2i, default=0.0))
        all_i2t, all_t2i = all_i2t + sum(i2t), all_t2i + sum(t2i)
    if max_violation:
        i2t_loss, t2i_loss = sum(i2t_rows) / batch, sum(t2i_rows) / batch
    else:
        i2t_loss, t2i_loss = all_i2t / batch**2, all_t2i / batch**2

    def diversity(residual):
        total = 0.0
        for r in residual:
            u = [v / v.norm() for v in r]
            squares = sum(
                (float(u[k] @ u[j]) - (k == j)) ** 2 for k in range(num_embeds) for j in range(num_embeds)
            )
            total += math.sqrt(squares) / num_embeds**2
        return total / batch

    xs, ys = list(image.reshape(-1, image.shape[-1])), list(text.reshape(-1, text.shape[-1]))

    def kernel_mean(a, b):
        return sum(math.exp(-gamma * float((p - q).norm())) for p in a for q in b) / (len(a) * len(b))

    mmd = kernel_mean(xs, xs) - 2 * kernel_mean(xs, ys) + kernel_mean(ys, ys)
    return {
        "image_to_text_loss": i2t_loss,
        "text_to_image_loss": t2i_loss,
        "diversity_loss": div_w * (diversity(image_res) + diversity(text_res)),
        "mmd_loss": mmd_w * mmd,
    }


@pytest.mark.parametrize("max_violation", [True, False])
def test_pvse_loss_equals_loop_reference(max_violation: bool) -> None:
    image, text = unit(5, 3, 4, seed=2), unit(5, 3, 4, seed=3)
    image_res = torch.rand(5, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    text_res = torch.rand(5, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    groups = torch.tensor([0, 1, 1, 2, 3])  # rows 1 and 2 are positives of each other: never negatives
    loss = build_loss(
        "pvse_mil", margin=0.3, max_violation=max_violation, diversity_weight=0.7, mmd_weight=0.2
    )
    got = loss(image=image, text=text, image_residual=image_res, text_residual=text_res, group_ids=groups)
    expected = loop_pvse_reference(
        image, text, image_res, text_res, groups.tolist(), 0.3, max_violation, 0.7, 0.2, 0.5
    )
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert float(got[key]) == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert float(got["image_to_text_loss"]) > 0 and float(got["diversity_loss"]) > 0


def test_mmd_is_zero_for_identical_sets_and_grows_with_a_shift() -> None:
    points = unit(4, 2, 6, seed=6)
    assert float(mmd_penalty(points, points)) == pytest.approx(0.0, abs=1e-12)
    assert float(mmd_penalty(points, points + 0.5)) > float(mmd_penalty(points, points + 0.1)) > 0


def test_pvse_loss_gradcheck() -> None:
    inputs = [unit(3, 2, 4, seed=s).requires_grad_() for s in range(7, 11)]
    loss = build_loss("pvse_mil", margin=0.5)

    def total(image, text, image_res, text_res):
        return sum(loss(image=image, text=text, image_residual=image_res, text_residual=text_res).values())

    assert torch.autograd.gradcheck(total, tuple(inputs))


def within_setup():
    image, text = unit(5, 2, 4, seed=12), unit(5, 2, 4, seed=13)
    neighbor_image, neighbor_text = unit(3, 2, 4, seed=14), unit(3, 2, 4, seed=15)
    groups = torch.tensor([0, 1, 2, 2, 3])
    neighbor_of = torch.tensor([0, 2, 4])
    neighbor_groups = torch.tensor(
        [1, 9, 3]
    )  # anchor 0's neighbor is row 1's item; anchor 4's shares its group
    return image, text, neighbor_image, neighbor_text, groups, neighbor_of, neighbor_groups


def loop_within_reference(anchors_all, positives, groups, neighbor_of, neighbor_groups, margin, negatives):
    per_anchor = []
    for m, i in enumerate(neighbor_of.tolist()):
        positive = loop_mil(anchors_all[i], positives[m])
        violations = [
            max(0.0, margin + loop_mil(anchors_all[i], anchors_all[j]) - positive)
            for j in range(anchors_all.shape[0])
            if groups[j] != groups[i] and groups[j] != neighbor_groups[m]
        ]
        per_anchor.append((max(violations, default=0.0)) if negatives == "hardest" else sum(violations))
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize("negatives", ["hardest", "all"])
def test_within_modality_loss_equals_loop_reference(negatives: str) -> None:
    image, text, neighbor_image, neighbor_text, groups, neighbor_of, neighbor_groups = within_setup()
    loss = build_loss("pvse_within_modality", text_weight=0.4, image_weight=0.6, within_margin=0.8, negatives=negatives)
    got = loss(
        image=image,
        text=text,
        neighbor_image=neighbor_image,
        neighbor_text=neighbor_text,
        neighbor_of=neighbor_of,
        neighbor_group_ids=neighbor_groups,
        group_ids=groups,
    )
    g, ng = groups.tolist(), neighbor_groups.tolist()
    text_ref = loop_within_reference(text, neighbor_text, g, neighbor_of, ng, 0.8, negatives)
    image_ref = loop_within_reference(image, neighbor_image, g, neighbor_of, ng, 0.8, negatives)
    assert float(got["text_within_modality_loss"]) == pytest.approx(0.4 * text_ref, rel=1e-9)
    assert float(got["image_within_modality_loss"]) == pytest.approx(0.6 * image_ref, rel=1e-9)
    assert text_ref > 0 and image_ref > 0
    assert set(got) == {"text_within_modality_loss", "image_within_modality_loss"}


def test_within_modality_never_uses_the_anchor_or_neighbor_group_as_negative() -> None:
    image, text, neighbor_image, neighbor_text, _, _, _ = within_setup()
    # one anchor, row 0 (group 0); its neighbor is the item of group 1 (batch row 1); row 2 shares group 0
    groups = torch.tensor([0, 1, 0, 2, 3])
    loss = build_loss("pvse_within_modality", within_margin=0.8, negatives="all")

    def within(text_rows: torch.Tensor, group_ids: torch.Tensor = groups) -> float:
        out = loss(
            image=image,
            text=text_rows,
            neighbor_image=neighbor_image[:1],
            neighbor_text=neighbor_text[:1],
            neighbor_of=torch.tensor([0]),
            neighbor_group_ids=torch.tensor([1]),
            group_ids=group_ids,
        )
        return float(out["text_within_modality_loss"])

    def copy_anchor_to(row: int) -> torch.Tensor:
        moved = text.clone()
        moved[row] = text[0]  # the strongest possible violation, if the row were a negative
        return moved

    base = within(text)
    assert within(copy_anchor_to(1)) == pytest.approx(base, abs=1e-12)  # the neighbor's own item
    assert within(copy_anchor_to(2)) == pytest.approx(base, abs=1e-12)  # the anchor's own group
    assert within(copy_anchor_to(3)) > base + 0.1  # a real negative
    assert within(text, torch.zeros(5, dtype=torch.long)) == 0.0  # no valid negative at all


def test_within_modality_gradcheck_and_empty_neighbor_set() -> None:
    image, text, neighbor_image, neighbor_text, groups, neighbor_of, neighbor_groups = within_setup()
    tensors = tuple(t.clone().requires_grad_() for t in (image, text, neighbor_image, neighbor_text))
    loss = build_loss("pvse_within_modality", within_margin=0.8, negatives="all")

    def total(image, text, neighbor_image, neighbor_text):
        return sum(
            loss(
                image=image,
                text=text,
                neighbor_image=neighbor_image,
                neighbor_text=neighbor_text,
                neighbor_of=neighbor_of,
                neighbor_group_ids=neighbor_groups,
                group_ids=groups,
            ).values()
        )

    assert torch.autograd.gradcheck(total, tensors)

    empty = loss(
        image=tensors[0],
        text=tensors[1],
        neighbor_image=tensors[2][:0],
        neighbor_text=tensors[3][:0],
        neighbor_of=neighbor_of[:0],
    )
    assert empty["text_within_modality_loss"].item() == 0.0
    sum(empty.values()).backward()


def test_preconditions_say_how_to_fix() -> None:
    flat = unit(4, 8, seed=20)
    with pytest.raises(LossPreconditionError, match="unsqueeze"):
        build_loss("pvse_mil")(image=flat, text=flat)
    multi = unit(4, 2, 8, seed=21)
    with pytest.raises(LossPreconditionError, match="diversity_weight=0"):
        build_loss("pvse_mil")(image=multi, text=multi)
    with pytest.raises(LossPreconditionError, match="neighbor_image"):
        build_loss("pvse_within_modality")(image=multi, text=multi)
    with pytest.raises(LossPreconditionError, match="batch rows"):
        build_loss("pvse_within_modality")(
            image=multi,
            text=multi,
            neighbor_image=multi[:1],
            neighbor_text=multi[:1],
            neighbor_of=torch.tensor([4]),
        )


# ----------------------------------------------------------------------------------- end to end on CPU


def test_forward_backward_resnet18_64px_batch4_is_quick() -> None:
    """PVSE+Ours as a variant lists it: ``pvse_mil`` and ``pvse_within_modality``, sub-losses summed."""
    torch.manual_seed(0)
    model = build_model("pvse", CONFIG, num_embeds=2, dropout=0.1).train()
    images, tokens, lengths = make_batch()
    losses = (build_loss("pvse_mil"), build_loss("pvse_within_modality"))
    assert not losses[0].needs  # residuals come with the model output: kept in the validation loss
    start = time.perf_counter()
    out = model(images, tokens, lengths)
    # batch rows 3 and 2 (their own groups) serve as the sampled neighbors of rows 0 and 1
    neighbors = model(images.flip(0)[:2], tokens.flip(0)[:2], lengths.flip(0)[:2])
    inputs = {
        **out,
        "neighbor_image": neighbors["image"],
        "neighbor_text": neighbors["text"],
        "neighbor_of": torch.tensor([0, 1]),
        "neighbor_group_ids": torch.tensor([3, 2]),
    }
    parts = [value for loss in losses for value in loss(**inputs).values()]
    assert len(parts) == 6
    total = torch.stack(parts).sum()
    total.backward()
    elapsed = time.perf_counter() - start
    assert torch.isfinite(total) and total.item() > 0
    for name in (
        "image_encoder.pie.attention_heads.weight",
        "text_encoder.pie.attention_heads.weight",
        "text_encoder.gru.weight_hh_l0_reverse",
        "image_encoder.cnn.trunk.net.conv1.weight",
    ):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    assert elapsed < 20.0, f"forward+backward took {elapsed:.1f} s"


# ------------------------------------------------------------------------------------ COCOS diagnostics


def unit_mix(dim: int, coefficients: dict[int, float], filler: int | None = None) -> torch.Tensor:
    """A unit vector with the given coefficients on basis axes; ``filler`` takes the rest of the norm, on an
    axis the vectors it is compared with do not use, so it changes no dot product of interest."""
    vector = torch.zeros(dim, dtype=torch.float64)
    for axis, value in coefficients.items():
        vector[axis] = value
    if filler is not None:
        vector[filler] = math.sqrt(1.0 - float(vector.pow(2).sum()))
    return vector


def loop_hinge_counts(image, text, groups, margin, max_violation):
    """Per query and direction: negatives whose hinge term is non-zero, or for the hardest-negative form
    whether the hardest negative's term is, with every MIL score recomputed by loops."""
    batch = image.shape[0]
    scores = [[loop_mil(image[i], text[t]) for t in range(batch)] for i in range(batch)]
    counts = {"image_to_text": [], "text_to_image": []}
    for q in range(batch):
        others = [c for c in range(batch) if groups[c] != groups[q]]
        for direction, violations in (
            ("image_to_text", [margin + scores[q][t] - scores[q][q] for t in others]),
            ("text_to_image", [margin + scores[i][q] - scores[q][q] for i in others]),
        ):
            if max_violation:
                counts[direction].append(int(bool(violations) and max(violations) > 0))
            else:
                counts[direction].append(sum(v > 0 for v in violations))
    return counts


def hand_built_pairs() -> tuple[torch.Tensor, torch.Tensor]:
    """4 pairs, K = 2, margin 0.5: a negative breaks the margin when its MIL score exceeds 0.5 (every
    positive scores 1). Axes 0-3 carry content, 4 and 5 only complete the norm of images and texts."""
    image_second = [{1: 0.6}, {0: 0.65}, {0: 0.3}, {2: 0.8}]
    text_second = [{}, {}, {0: 0.7}, {}]
    image = torch.stack(
        [torch.stack([unit_mix(6, {q: 1.0}), unit_mix(6, image_second[q], filler=4)]) for q in range(4)]
    )
    text = torch.stack(
        [torch.stack([unit_mix(6, {q: 1.0}), unit_mix(6, text_second[q], filler=5)]) for q in range(4)]
    )
    return image, text


#: MIL scores of :func:`hand_built_pairs` worked out by hand: 0.6 = image 0's second embedding on text 1's
#: first, 0.7 = image 0's first on text 2's second, 0.455 = 0.65 * 0.7 (both second embeddings)
HAND_BUILT_SCORES = [
    [1.0, 0.6, 0.7, 0.0],
    [0.65, 1.0, 0.455, 0.0],
    [0.3, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.8, 1.0],
]


@pytest.mark.parametrize(
    ("max_violation", "image_to_text", "text_to_image"),
    [(False, [2, 1, 0, 1], [1, 1, 2, 0]), (True, [1, 1, 0, 1], [1, 1, 1, 0])],
)
def test_pvse_mil_diagnostics_count_the_hand_built_violations(
    max_violation: bool, image_to_text: list[int], text_to_image: list[int]
) -> None:
    image, text = hand_built_pairs()
    torch.testing.assert_close(
        mil_similarity(image, text), torch.tensor(HAND_BUILT_SCORES, dtype=torch.float64), atol=1e-12, rtol=0
    )
    loss = build_loss("pvse_mil", margin=0.5, max_violation=max_violation)
    got = loss.diagnostics(image=image, text=text)
    expected = {"image_to_text": image_to_text, "text_to_image": text_to_image}
    assert set(got) == {f"{d}_{key}" for d in expected for key in ("contributing_negatives", "no_gradient")}
    for direction, counts in expected.items():
        assert got[f"{direction}_contributing_negatives"].tolist() == counts
        assert got[f"{direction}_no_gradient"].tolist() == [c == 0 for c in counts]
    assert loop_hinge_counts(image, text, list(range(4)), 0.5, max_violation) == expected


@pytest.mark.parametrize("max_violation", [True, False])
def test_pvse_mil_diagnostics_equal_loop_reference(max_violation: bool) -> None:
    image, text = unit(6, 3, 4, seed=30), unit(6, 3, 4, seed=31)
    groups = torch.tensor([0, 1, 1, 2, 3, 3])  # rows 1, 2 and rows 4, 5 are never each other's negatives
    loss = build_loss("pvse_mil", margin=0.1, max_violation=max_violation)
    got = loss.diagnostics(image=image, text=text, group_ids=groups, image_residual=image, text_residual=text)
    expected = loop_hinge_counts(image, text, groups.tolist(), 0.1, max_violation)
    for direction, counts in expected.items():
        assert got[f"{direction}_contributing_negatives"].tolist() == counts, direction
    # the data exercise queries without gradient and, when every violating negative counts, several
    everything = set(expected["image_to_text"] + expected["text_to_image"])
    assert everything == {0, 1} if max_violation else (0 in everything and max(everything) >= 2)


def loop_within_counts(anchors_all, positives, groups, neighbor_of, neighbor_groups, margin, negatives):
    counts = []
    for m, i in enumerate(neighbor_of.tolist()):
        positive = loop_mil(anchors_all[i], positives[m])
        violations = [
            margin + loop_mil(anchors_all[i], anchors_all[j]) - positive
            for j in range(anchors_all.shape[0])
            if groups[j] != groups[i] and groups[j] != neighbor_groups[m]
        ]
        if negatives == "hardest":
            counts.append(int(bool(violations) and max(violations) > 0))
        else:
            counts.append(sum(v > 0 for v in violations))
    return counts


def hand_built_neighbors() -> dict[str, torch.Tensor]:
    """4 rows, K = 2, each row the anchor of one neighbor whose embeddings are its own first one (positive
    score 1); margin 0.5, so a valid negative breaks it when its MIL score with the anchor exceeds 0.5.
    Anchor 0's neighbor is row 1's item and anchor 3's row 2's, so those rows are no negatives for them."""
    dim = 8
    texts = [
        [unit_mix(dim, {0: 1.0}), unit_mix(dim, {1: 0.6}, filler=5)],  # 0.6 with text 1
        [unit_mix(dim, {1: 1.0}), unit_mix(dim, {1: 1.0})],
        [unit_mix(dim, {2: 1.0}), unit_mix(dim, {0: 0.7}, filler=6)],  # 0.7 with text 0
        [unit_mix(dim, {3: 1.0}), unit_mix(dim, {2: 0.8}, filler=7)],  # 0.8 with text 2
    ]
    images = [
        [unit_mix(dim, {0: 1.0}), unit_mix(dim, {0: 1.0})],
        [unit_mix(dim, {1: 1.0}), unit_mix(dim, {0: 0.9}, filler=5)],  # 0.9 with image 0
        [unit_mix(dim, {2: 1.0}), unit_mix(dim, {2: 1.0})],
        [unit_mix(dim, {3: 1.0}), unit_mix(dim, {0: 0.9}, filler=6)],  # 0.9 with image 0, 0.81 with image 1
    ]
    own_first = torch.stack([unit_mix(dim, {i: 1.0}).expand(2, dim) for i in range(4)])
    return {
        "image": torch.stack([torch.stack(row) for row in images]),
        "text": torch.stack([torch.stack(row) for row in texts]),
        "neighbor_image": own_first,
        "neighbor_text": own_first.clone(),
        "neighbor_of": torch.arange(4),
        "neighbor_group_ids": torch.tensor([1, 7, 8, 2]),
        "group_ids": torch.arange(4),
    }


@pytest.mark.parametrize(
    ("negatives", "within_text", "within_image"),
    [("all", [1, 1, 2, 0], [1, 2, 0, 2]), ("hardest", [1, 1, 1, 0], [1, 1, 0, 1])],
)
def test_pvse_within_modality_diagnostics_count_the_hand_built_violations(
    negatives: str, within_text: list[int], within_image: list[int]
) -> None:
    inputs = hand_built_neighbors()
    loss = build_loss("pvse_within_modality", within_margin=0.5, negatives=negatives)
    got = loss.diagnostics(**inputs)
    expected = {"within_text": within_text, "within_image": within_image}
    assert set(got) == {f"{d}_{key}" for d in expected for key in ("contributing_negatives", "no_gradient")}
    for name, counts in expected.items():
        assert got[f"{name}_contributing_negatives"].tolist() == counts
        assert got[f"{name}_no_gradient"].tolist() == [c == 0 for c in counts]
        modality = name.removeprefix("within_")
        reference = loop_within_counts(
            inputs[modality],
            inputs[f"neighbor_{modality}"],
            inputs["group_ids"].tolist(),
            inputs["neighbor_of"],
            inputs["neighbor_group_ids"].tolist(),
            0.5,
            negatives,
        )
        assert reference == counts, name

    # a switched-off term (alpha = 0) sends no gradient to any negative
    ablated = build_loss("pvse_within_modality", text_weight=0.0, within_margin=0.5, negatives=negatives)
    off = ablated.diagnostics(**inputs)
    assert off["within_text_contributing_negatives"].tolist() == [0, 0, 0, 0]
    assert off["within_image_contributing_negatives"].tolist() == within_image


@pytest.mark.parametrize("negatives", ["hardest", "all"])
def test_pvse_within_modality_diagnostics_equal_loop_reference(negatives: str) -> None:
    image, text, neighbor_image, neighbor_text, groups, neighbor_of, neighbor_groups = within_setup()
    loss = build_loss("pvse_within_modality", within_margin=0.1, negatives=negatives)
    got = loss.diagnostics(
        image=image,
        text=text,
        neighbor_image=neighbor_image,
        neighbor_text=neighbor_text,
        neighbor_of=neighbor_of,
        neighbor_group_ids=neighbor_groups,
        group_ids=groups,
    )
    g, ng = groups.tolist(), neighbor_groups.tolist()
    counts = []
    for name, anchors, positives in (("text", text, neighbor_text), ("image", image, neighbor_image)):
        expected = loop_within_counts(anchors, positives, g, neighbor_of, ng, 0.1, negatives)
        assert got[f"within_{name}_contributing_negatives"].tolist() == expected, name
        counts += expected
    assert set(counts) == {0, 1} if negatives == "hardest" else (0 in counts and max(counts) >= 2)
    # a batch without neighbor pairs has no queries for this loss: nothing to report
    assert (
        loss.diagnostics(
            image=image,
            text=text,
            neighbor_image=neighbor_image[:0],
            neighbor_text=neighbor_text[:0],
            neighbor_of=neighbor_of[:0],
        )
        == {}
    )


def test_pvse_ours_variant_yields_cocos_rows() -> None:
    """Through the COCOS collection the Cocos task runs: a frozen PVSE model, training-style batches with
    sampled neighbors, the PVSE+Ours variant's own losses; every direction becomes a COCOS table row."""
    model = make_model(num_embeds=2)
    n, batch_size = 8, 4
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 6, n)
    tokens = rng.integers(1, VOCAB, (n, 5))
    tokens[np.arange(5)[None, :] >= lengths[:, None]] = 0
    data = PairData(
        images=rng.integers(0, 255, (n, 32, 32, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=tokens,
        lengths=lengths,
        group_ids=np.arange(n),
    )
    neighbors = np.array([[(i + 1) % n, (i + 3) % n] for i in range(n)])
    sampler = BatchSampler(np.arange(n), batch_size, np.random.default_rng(0), neighbors, "in_batch")
    variant = VARIANTS["pvse_ours"]
    losses = [build_loss(spec.name, **spec.params) for spec in variant.losses]
    summary = collect_cocos(model, losses, data, sampler, 32, torch.device("cpu"))

    assert set(summary) == {"pvse_mil", "pvse_within_modality"}
    for keys in summary.values():
        assert all(stats["n_batches"] == sampler.batches_per_epoch for stats in keys.values())
    # hardest-negative hinges: at most one contributing negative per query (4 cross-modal queries a batch,
    # 2 anchors with a sampled neighbor)
    for key, queries in (("image_to_text", 4), ("text_to_image", 4)):
        stats = summary["pvse_mil"][f"{key}_contributing_negatives"]
        assert 0.0 <= stats["per_query_mean"] <= 1.0 and 0.0 <= stats["per_batch_sum_mean"] <= queries
    for key in ("within_text", "within_image"):
        stats = summary["pvse_within_modality"][f"{key}_contributing_negatives"]
        assert 0.0 <= stats["per_query_mean"] <= 1.0 and 0.0 <= stats["per_batch_sum_mean"] <= 2

    # imported here: importing evaluation.report before the pipeline package hits an import cycle
    # (evaluation.report -> pipeline.config.variants -> pipeline/__init__ -> pipeline.tasks.report -> evaluation.report)
    from evaluation.report import cocos_rows

    _, rows = cocos_rows([{"label": variant.label, "seed": 0, "losses": summary}])
    assert {(row["loss"], row["direction"]) for row in rows} == {
        ("pvse_mil", "image_to_text"),
        ("pvse_mil", "text_to_image"),
        ("pvse_within_modality", "within_text"),
        ("pvse_within_modality", "within_image"),
    }
    assert all(set(row["values"]) == {"C^q", "C^B", "C^0"} and not row["other_keys"] for row in rows)
