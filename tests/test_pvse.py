"""PVSE model (PIE-Net, masking, K=1 reduction) and its losses (MIL hinge, diversity, MMD, within-modality)
checked against loop-by-loop references and gradcheck."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F

from models.encoders import MODELS, EncoderConfig, build_model
from models.losses import LOSSES, LossPreconditionError, build_loss
from models.losses.pvse_mil import diversity_penalty, mil_similarity, mmd_penalty
from models.pvse import PolysemousInstanceEmbedding, PVSEModel

VOCAB = 23
CONFIG = EncoderConfig(
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
    )  # anchor 0's neighbour is row 1's item; anchor 4's shares its group
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
    loss = build_loss("pvse_within_modality", alpha=0.4, beta=0.6, within_margin=0.8, negatives=negatives)
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


def test_within_modality_never_uses_the_anchor_or_neighbour_group_as_negative() -> None:
    image, text, neighbor_image, neighbor_text, _, _, _ = within_setup()
    # one anchor, row 0 (group 0); its neighbour is the item of group 1 (batch row 1); row 2 shares group 0
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
    assert within(copy_anchor_to(1)) == pytest.approx(base, abs=1e-12)  # the neighbour's own item
    assert within(copy_anchor_to(2)) == pytest.approx(base, abs=1e-12)  # the anchor's own group
    assert within(copy_anchor_to(3)) > base + 0.1  # a real negative
    assert within(text, torch.zeros(5, dtype=torch.long)) == 0.0  # no valid negative at all


def test_within_modality_gradcheck_and_empty_neighbour_set() -> None:
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
    # batch rows 3 and 2 (their own groups) serve as the sampled neighbours of rows 0 and 1
    neighbours = model(images.flip(0)[:2], tokens.flip(0)[:2], lengths.flip(0)[:2])
    inputs = {
        **out,
        "neighbor_image": neighbours["image"],
        "neighbor_text": neighbours["text"],
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
        "image_encoder.cnn.trunk.conv1.weight",
    ):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    assert elapsed < 20.0, f"forward+backward took {elapsed:.1f} s"
