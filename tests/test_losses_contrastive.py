"""Contrastive / softmax-family losses against loop-by-loop references written from the papers.

Each reference below walks one query (and one positive, one negative) at a time in float64 Python
arithmetic, straight from the equation it names; the losses under test are vectorised. Scores are
cosines of L2-normalised rows, ``scores[q][j] = <image_q, text_j>``; image-to-text queries are rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from models.losses import LOSSES, LossPreconditionError, build_loss
from models.losses.softmax_terms import kept_negative_count

Matrix = list[list[float]]

TAU_NT_XENT = 0.1
TAU_SMOOTH_AP = 0.01
LAMBDA = 20.0
ICE_SCALE = 64.0
EPS = 0.01


# ----------------------------------------------------------------------------------------------------
# independent references
# ----------------------------------------------------------------------------------------------------


def loop_scores(image: torch.Tensor, text: torch.Tensor) -> Matrix:
    rows = image.shape[0]
    return [[float(torch.dot(image[q], text[j])) for j in range(rows)] for q in range(rows)]


def transpose(matrix: Matrix) -> Matrix:
    return [list(column) for column in zip(*matrix, strict=True)]


def softmax_nll(positive: float, negatives: list[float]) -> float:
    """-log(e^p / (e^p + sum_n e^n))."""
    return -math.log(math.exp(positive) / (math.exp(positive) + sum(math.exp(n) for n in negatives)))


def split(row: list[float], groups: list[int], query: int) -> tuple[list[float], list[float]]:
    positives = [row[j] for j in range(len(row)) if groups[j] == groups[query]]
    negatives = [row[j] for j in range(len(row)) if groups[j] != groups[query]]
    return positives, negatives


def half_ceil(count: int) -> int:
    return math.ceil(count / 2)


def reference_query_softmax(
    scores: Matrix, groups: list[int], scale: float, keep: Callable[[int], int] | None = None
) -> float:
    """Bleeker Eq. 4 / Veit Eq. 2 (``keep`` None) or Eq. 3 (keep the ``keep(n)`` largest negatives)."""
    total = 0.0
    for query, row in enumerate(scores):
        positives, negatives = split([scale * s for s in row], groups, query)
        negatives = sorted(negatives, reverse=True)
        if keep is not None:
            negatives = negatives[: keep(len(negatives))]
        total += sum(softmax_nll(p, negatives) for p in positives) / len(positives)
    return total / len(scores)


def reference_cross_example(
    scores: Matrix, groups: list[int], scale: float, keep: Callable[[int], int] | None = None
) -> float:
    """Veit Eq. 5 (every cross-group entry of the batch in the partition) or Eq. 6 (its ``keep`` largest)."""
    rows = len(scores)
    batch_negatives = sorted(
        (scale * scores[q][j] for q in range(rows) for j in range(rows) if groups[q] != groups[j]),
        reverse=True,
    )
    if keep is not None:
        batch_negatives = batch_negatives[: keep(len(batch_negatives))]
    total = 0.0
    for query, row in enumerate(scores):
        positives, _ = split([scale * s for s in row], groups, query)
        total += sum(softmax_nll(p, batch_negatives) for p in positives) / len(positives)
    return total / rows


def reference_ice(scores: Matrix, groups: list[int], scale: float) -> float:
    """Wang et al. Eq. 5 / N: sum over each anchor's positives of -log p̂(i|a) (Eq. 3 with scaling s)."""
    total = 0.0
    for anchor, row in enumerate(scores):
        positives, negatives = split([scale * s for s in row], groups, anchor)
        total += sum(softmax_nll(p, negatives) for p in positives)
    return total / len(scores)


def reference_smooth_ap(scores: Matrix, groups: list[int], tau: float) -> float:
    """Bleeker Eq. 8: mean over queries of 1 - AP_q, with rank indicators replaced by G(s_j - s_i; τ)."""

    def sigmoid(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x / tau))

    total = 0.0
    for query, row in enumerate(scores):
        positive_ids = [j for j in range(len(row)) if groups[j] == groups[query]]
        negative_ids = [j for j in range(len(row)) if groups[j] != groups[query]]
        average_precision = 0.0
        for i in positive_ids:
            rank_in_positives = 1 + sum(sigmoid(row[j] - row[i]) for j in positive_ids if j != i)
            rank_in_all = rank_in_positives + sum(sigmoid(row[j] - row[i]) for j in negative_ids)
            average_precision += rank_in_positives / rank_in_all
        total += 1 - average_precision / len(positive_ids)
    return total / len(scores)


def both_directions(reference: Callable[..., float], **params: object) -> Callable[[Matrix, list[int]], dict]:
    def compute(scores: Matrix, groups: list[int]) -> dict[str, float]:
        return {
            "image_to_text_loss": 0.5 * reference(scores, groups, **params),
            "text_to_image_loss": 0.5 * reference(transpose(scores), groups, **params),
        }

    return compute


def direction_free(reference: Callable[..., float], **params: object) -> Callable[[Matrix, list[int]], dict]:
    return lambda scores, groups: {"cross_example_loss": reference(scores, groups, **params)}


#: registry name -> (constructor parameters, reference giving the expected sub-losses)
CASES: dict[str, tuple[dict, Callable[[Matrix, list[int]], dict[str, float]]]] = {
    "nt_xent": ({}, both_directions(reference_query_softmax, scale=1 / TAU_NT_XENT)),
    "sampled_softmax": ({}, both_directions(reference_query_softmax, scale=LAMBDA)),
    "stochastic_negative_mining": (
        {},
        both_directions(reference_query_softmax, scale=LAMBDA, keep=half_ceil),
    ),
    "cross_example_softmax": ({}, direction_free(reference_cross_example, scale=LAMBDA)),
    "cross_example_negative_mining": (
        {},
        direction_free(reference_cross_example, scale=LAMBDA, keep=half_ceil),
    ),
    "instance_cross_entropy": ({}, both_directions(reference_ice, scale=ICE_SCALE)),
    "smooth_ap": ({}, both_directions(reference_smooth_ap, tau=TAU_SMOOTH_AP)),
}
SINGLE_POSITIVE_CASES = [name for name in CASES if name != "smooth_ap"]


# ----------------------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------------------


def unit_rows(rows: int, dim: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(rows, dim, generator=generator, dtype=torch.float64), dim=1)


def grouped_batch(
    group_ids: list[int], dim: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As a data loader builds them: one image row repeated per caption, captions all different."""
    groups = torch.tensor(group_ids)
    distinct = unit_rows(int(groups.max()) + 1, dim, seed)
    return distinct[groups], unit_rows(len(group_ids), dim, seed + 1), groups


def hand_built_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three 2-D pairs at fixed angles: image k at 0°, 120°, 240°, its caption rotated by 30°, 10°, -20°."""
    image_angles = [0.0, 120.0, 240.0]
    text_angles = [30.0, 130.0, 220.0]

    def rows(angles: list[float]) -> torch.Tensor:
        radians = torch.tensor(angles, dtype=torch.float64) * math.pi / 180
        return torch.stack([radians.cos(), radians.sin()], dim=1)

    return rows(image_angles), rows(text_angles)


def assert_matches_reference(
    name: str, image: torch.Tensor, text: torch.Tensor, groups: torch.Tensor | None
) -> None:
    params, reference = CASES[name]
    out = build_loss(name, **params)(image=image, text=text, group_ids=groups)
    group_list = list(range(image.shape[0])) if groups is None else groups.tolist()
    expected = reference(loop_scores(image, text), group_list)
    assert set(out) == set(expected)
    for key, value in expected.items():
        assert out[key].dtype == torch.float64
        assert out[key].item() == pytest.approx(value, abs=1e-6), key


# ----------------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_registered_under_file_name_with_class_named_after_it(name):
    cls = LOSSES[name]
    assert cls.__module__ == f"models.losses.{name}"
    assert cls.__name__ == "".join(part.capitalize() for part in name.split("_"))
    assert cls.name == name


# ----------------------------------------------------------------------------------------------------
# values against the references
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SINGLE_POSITIVE_CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_pairs_match_reference(name, seed):
    image, text = unit_rows(7, 5, seed), unit_rows(7, 5, seed + 100)
    assert_matches_reference(name, image, text, None)


@pytest.mark.parametrize("name", list(CASES))
def test_repeated_group_ids_match_reference(name):
    # unequal, non-contiguous group ids, one of them a singleton
    image, text, groups = grouped_batch([2, 0, 2, 1, 0, 2, 3, 1], dim=6, seed=3)
    assert_matches_reference(name, image, text, groups)


@pytest.mark.parametrize("name", SINGLE_POSITIVE_CASES)
def test_hand_built_pairs_match_reference(name):
    image, text = hand_built_batch()
    assert_matches_reference(name, image, text, None)


def test_hand_built_nt_xent_by_hand():
    # image k at 0/120/240 degrees, captions at 30/130/220: the i2t scores of query 0 are
    # cos 30, cos 130, cos 220, so its term is -log(e^{cos30/τ} / sum_j e^{cos θ_j/τ}).
    image, text = hand_built_batch()
    out = build_loss("nt_xent")(image=image, text=text)
    cos = [[math.cos(math.radians(t - i)) for t in (30, 130, 220)] for i in (0, 120, 240)]
    i2t = sum(
        math.log(sum(math.exp(c / TAU_NT_XENT) for c in cos[q])) - cos[q][q] / TAU_NT_XENT for q in range(3)
    )
    t2i = sum(
        math.log(sum(math.exp(cos[k][q] / TAU_NT_XENT) for k in range(3))) - cos[q][q] / TAU_NT_XENT
        for q in range(3)
    )
    assert out["image_to_text_loss"].item() == pytest.approx(0.5 * i2t / 3, abs=1e-9)
    assert out["text_to_image_loss"].item() == pytest.approx(0.5 * t2i / 3, abs=1e-9)


@pytest.mark.parametrize("name", SINGLE_POSITIVE_CASES)
def test_batch_of_two_matches_reference(name):
    image, text = unit_rows(2, 3, 7), unit_rows(2, 3, 8)
    assert_matches_reference(name, image, text, None)


def test_batch_of_two_orthogonal_closed_forms():
    # image == text == (e1, e2): positives score 1, negatives 0, so every softmax term is log(1 + e^{-scale}).
    image = text = torch.eye(2, dtype=torch.float64)
    nt_xent = build_loss("nt_xent")(image=image, text=text)
    assert sum(nt_xent.values()).item() == pytest.approx(math.log1p(math.exp(-1 / TAU_NT_XENT)), abs=1e-12)
    cross = build_loss("cross_example_softmax")(image=image, text=text)["cross_example_loss"]
    assert cross.item() == pytest.approx(math.log1p(2 * math.exp(-LAMBDA)), abs=1e-12)
    ice = build_loss("instance_cross_entropy")(image=image, text=text)
    assert sum(ice.values()).item() == pytest.approx(math.log1p(math.exp(-ICE_SCALE)), abs=1e-12)


@pytest.mark.parametrize("name", SINGLE_POSITIVE_CASES)
def test_all_identical_embeddings_closed_form(name):
    # every score is 1: each softmax term is log(1 + #partition) (Eq. 2-6 with equal logits)
    batch = 5
    image = text = F.normalize(torch.ones(batch, 4, dtype=torch.float64), dim=1)
    partition = {
        "nt_xent": batch - 1,
        "sampled_softmax": batch - 1,
        "stochastic_negative_mining": half_ceil(batch - 1),
        "cross_example_softmax": batch * (batch - 1),
        "cross_example_negative_mining": half_ceil(batch * (batch - 1)),
        "instance_cross_entropy": batch - 1,
    }[name]
    total = sum(build_loss(name)(image=image, text=text).values())
    assert total.item() == pytest.approx(math.log1p(partition), abs=1e-9)
    assert_matches_reference(name, image, text, None)


def test_smooth_ap_all_identical_embeddings_closed_form():
    # every D_ij = 0, so G = 1/2: R(i,S_P) = 1 + (|P|-1)/2 and R(i,S_Ω) = R(i,S_P) + |N|/2 for every i
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    image = text = F.normalize(torch.ones(6, 3, dtype=torch.float64), dim=1)
    total = sum(build_loss("smooth_ap")(image=image, text=text, group_ids=groups).values())
    rank_in_positives = 1 + 2 / 2
    assert total.item() == pytest.approx(1 - rank_in_positives / (rank_in_positives + 3 / 2), abs=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_positive_that_is_also_the_hardest_negative(name):
    # text 3 is a copy of text 0, so for image 0 a negative ties its positive and is its hardest negative
    image, text, groups = grouped_batch([0, 0, 1, 1, 2, 2], dim=4, seed=11)
    text = text.clone()
    text[2] = text[0]
    assert_matches_reference(name, image, text, groups)


def test_top_1_mining_keeps_the_negative_that_ties_the_positive():
    # image 0 == caption 0 == caption 1: for image 0 the hardest negative scores exactly its positive's 1,
    # so with top_k=1 its term is log 2
    image, text = unit_rows(4, 4, 5).clone(), unit_rows(4, 4, 6).clone()
    text[1] = text[0]
    image[0] = text[0]
    scores = loop_scores(image, text)
    out = build_loss("stochastic_negative_mining", top_k=1)(image=image, text=text)
    row = [LAMBDA * s for s in scores[0]]
    assert softmax_nll(row[0], [max(row[1:])]) == pytest.approx(math.log(2), abs=1e-12)
    expected = both_directions(reference_query_softmax, scale=LAMBDA, keep=lambda n: 1)(scores, [0, 1, 2, 3])
    for key, value in expected.items():
        assert out[key].item() == pytest.approx(value, abs=1e-9)


@pytest.mark.parametrize("name", ["stochastic_negative_mining", "cross_example_negative_mining"])
def test_ties_at_the_mining_boundary(name):
    # on a 2-D circle, captions mirrored about the x-axis give images on the axis tied negative scores
    angles = torch.tensor([0.0, 180.0, 40.0, -40.0, 100.0, -100.0], dtype=torch.float64) * math.pi / 180
    text = torch.stack([angles.cos(), angles.sin()], dim=1)
    image = torch.stack([torch.tensor([1.0, 0.0])] * 3 + [torch.tensor([-1.0, 0.0])] * 3).double()
    groups = torch.tensor([0, 1, 2, 3, 4, 5])
    scores = loop_scores(image, text)
    assert scores[0][2] == pytest.approx(scores[0][3]) and scores[0][4] == pytest.approx(scores[0][5])
    for keep in (1, 2, 3):
        params = {"top_k": keep}
        out = build_loss(name, **params)(image=image, text=text, group_ids=groups)
        if name == "stochastic_negative_mining":
            expected = both_directions(reference_query_softmax, scale=LAMBDA, keep=lambda n, k=keep: k)(
                scores, groups.tolist()
            )
        else:
            expected = direction_free(reference_cross_example, scale=LAMBDA, keep=lambda n, k=keep: k)(
                scores, groups.tolist()
            )
        for key, value in expected.items():
            assert out[key].item() == pytest.approx(value, abs=1e-9)


def test_same_group_rows_are_never_negatives():
    # caption 1 (group 0) becomes image 0's best match; it must stay out of caption 0's partition
    image, text, groups = grouped_batch([0, 0, 1, 1], dim=4, seed=21)
    text = text.clone()
    text[1] = image[0]
    scores = loop_scores(image, text)

    def query_term(q: int, exclude_own_group: bool) -> float:
        row = [LAMBDA * s for s in scores[q]]
        own = [j for j in range(4) if groups[j] == groups[q]]
        terms = []
        for p in own:
            partition = [row[j] for j in range(4) if j != p and (j not in own or not exclude_own_group)]
            terms.append(softmax_nll(row[p], partition))
        return sum(terms) / len(terms)

    i2t = build_loss("sampled_softmax")(image=image, text=text, group_ids=groups)["image_to_text_loss"].item()
    correct = 0.5 * sum(query_term(q, exclude_own_group=True) for q in range(4)) / 4
    same_group_as_negative = 0.5 * sum(query_term(q, exclude_own_group=False) for q in range(4)) / 4
    assert i2t == pytest.approx(correct, abs=1e-12)
    assert abs(same_group_as_negative - correct) > 1e-3


@pytest.mark.parametrize("name", list(CASES))
def test_invariant_to_a_joint_permutation_of_the_batch(name):
    image, text, groups = grouped_batch([0, 1, 0, 2, 1, 2], dim=5, seed=31)
    order = torch.tensor([4, 2, 5, 0, 3, 1])
    loss = build_loss(name)
    before = loss(image=image, text=text, group_ids=groups)
    after = loss(image=image[order], text=text[order], group_ids=groups[order])
    for key in before:
        assert after[key].item() == pytest.approx(before[key].item(), abs=1e-12)


# ----------------------------------------------------------------------------------------------------
# relations between the losses (Veit & Wilber Fig. 2B: nested partitions)
# ----------------------------------------------------------------------------------------------------


def test_partition_nesting_orders_the_losses():
    image, text = unit_rows(8, 6, 41), unit_rows(8, 6, 42)

    def total(name: str, **params: object) -> float:
        return sum(build_loss(name, **params)(image=image, text=text).values()).item()

    sampled = total("sampled_softmax")
    assert total("stochastic_negative_mining") < sampled
    assert total("stochastic_negative_mining", fraction=1.0) == pytest.approx(sampled, abs=1e-12)
    assert total("cross_example_softmax") > sampled
    assert total("cross_example_negative_mining") < total("cross_example_softmax")
    assert total("cross_example_negative_mining", fraction=1.0) == pytest.approx(
        total("cross_example_softmax")
    )
    assert total("sampled_softmax", scale=1 / TAU_NT_XENT) == pytest.approx(total("nt_xent"), abs=1e-12)


@pytest.mark.parametrize("name", ["cross_example_softmax", "cross_example_negative_mining"])
def test_cross_example_losses_do_not_depend_on_which_modality_queries(name):
    image, text, groups = grouped_batch([0, 0, 1, 2, 2, 3], dim=5, seed=51)
    loss = build_loss(name)
    swapped = loss(image=text, text=image, group_ids=groups)["cross_example_loss"]
    assert swapped.item() == pytest.approx(
        loss(image=image, text=text, group_ids=groups)["cross_example_loss"].item()
    )


def test_one_sided_sampled_softmax_is_veit_text_to_image():
    image, text = unit_rows(5, 4, 61), unit_rows(5, 4, 62)
    out = build_loss("sampled_softmax", symmetric=False)(image=image, text=text)
    assert set(out) == {"text_to_image_loss"}
    expected = reference_query_softmax(transpose(loop_scores(image, text)), list(range(5)), LAMBDA)
    assert out["text_to_image_loss"].item() == pytest.approx(expected, abs=1e-9)


def test_kept_negative_count_is_an_exact_ceiling():
    counts = torch.tensor([1, 2, 10, 127])
    assert kept_negative_count(counts, 0.3, None).tolist() == [1, 1, 3, 39]
    assert kept_negative_count(counts, 0.5, None).tolist() == [1, 1, 5, 64]
    assert kept_negative_count(counts, 0.5, 4).tolist() == [1, 2, 4, 4]


# ----------------------------------------------------------------------------------------------------
# gradients
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "group_ids"),
    [
        ("nt_xent", {}, None),
        ("sampled_softmax", {}, [0, 0, 1, 2, 2]),
        ("stochastic_negative_mining", {}, None),
        ("cross_example_softmax", {}, [0, 1, 1, 2, 3]),
        ("cross_example_negative_mining", {}, None),
        ("instance_cross_entropy", {"reweight": False, "scale": 8.0}, [0, 0, 1, 1, 2]),
        ("smooth_ap", {}, [0, 0, 1, 1, 1]),
        ("smooth_ap", {"temperature": 0.2}, [0, 0, 1, 1, 1]),
    ],
)
def test_gradcheck(name, params, group_ids):
    loss = build_loss(name, **params)
    groups = None if group_ids is None else torch.tensor(group_ids)
    image, text = unit_rows(5, 3, 71), unit_rows(5, 3, 72)

    def total(image_raw: torch.Tensor, text_raw: torch.Tensor) -> torch.Tensor:
        out = loss(image=F.normalize(image_raw, dim=1), text=F.normalize(text_raw, dim=1), group_ids=groups)
        return sum(out.values())

    assert torch.autograd.gradcheck(total, (image.requires_grad_(), text.requires_grad_()), atol=1e-6)


def test_ice_reweighting_backpropagates_eq_15():
    """∂L/∂f_i = -f_a w̄(i;a) for a positive, +f_a w̄(j;a) for a negative (Eq. 13-15), summed over anchors;
    the value is unchanged by reweighting."""
    image, text, groups = grouped_batch([0, 0, 1, 1, 1, 2], dim=4, seed=81)
    image.requires_grad_()
    text.requires_grad_()
    group_list = groups.tolist()
    batch = len(group_list)
    reweighted = build_loss("instance_cross_entropy", scale=16.0)(image=image, text=text, group_ids=groups)
    plain = build_loss("instance_cross_entropy", scale=16.0, reweight=False)(
        image=image, text=text, group_ids=groups
    )
    assert reweighted["image_to_text_loss"].item() == pytest.approx(
        plain["image_to_text_loss"].item(), abs=1e-12
    )
    reweighted["image_to_text_loss"].backward()

    scores = loop_scores(image.detach(), text.detach())
    expected_text_grad = torch.zeros_like(text)
    expected_image_grad = torch.zeros_like(image)
    for a in range(batch):
        positives = [i for i in range(batch) if group_list[i] == group_list[a]]
        negatives = [j for j in range(batch) if group_list[j] != group_list[a]]
        negative_exp = sum(math.exp(16.0 * scores[a][j]) for j in negatives)
        match = {
            i: math.exp(16.0 * scores[a][i]) / (math.exp(16.0 * scores[a][i]) + negative_exp)
            for i in positives
        }
        positive_total = sum(1 - match[i] for i in positives)
        coefficient = {}
        for i in positives:  # Eq. 13
            coefficient[i] = -(1 - match[i]) / positive_total / (2 * batch)
        for j in negatives:  # Eq. 14
            weight = sum(
                math.exp(16.0 * scores[a][j]) / (math.exp(16.0 * scores[a][i]) + negative_exp)
                for i in positives
            )
            coefficient[j] = weight / positive_total / (2 * batch)
        for k, c in coefficient.items():
            expected_text_grad[k] += 0.5 * c * image.detach()[a]
            expected_image_grad[a] += 0.5 * c * text.detach()[k]
    torch.testing.assert_close(text.grad, expected_text_grad, atol=1e-9, rtol=0)
    torch.testing.assert_close(image.grad, expected_image_grad, atol=1e-9, rtol=0)


# ----------------------------------------------------------------------------------------------------
# oracle: pytorch-metric-learning's NTXentLoss
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_ids", [None, [0, 0, 1, 1, 2, 2, 3, 3]])
def test_nt_xent_agrees_with_pytorch_metric_learning(group_ids):
    """Each direction against ``NTXentLoss(temperature=τ)``.

    Image-to-text: ``NTXentLoss(image, labels, ref_emb=text, ref_labels=labels)``; text-to-image: the same
    with the modalities swapped; ``labels = arange(B)`` (or the group ids). PML returns the mean over all
    positive (anchor, ref) pairs of ``-log(e^{s+/τ} / (e^{s+/τ} + sum_{ref negatives} e^{s-/τ}))``; ours
    returns 0.5 * (mean over queries of the mean over the query's positives), so with one positive per
    query, or equally sized groups, ``ours[direction] == 0.5 * pml(direction)``. ``ref_labels`` must be a
    different tensor object from ``labels``, else PML treats the batch as self-paired and drops (i, i).
    """
    losses = pytest.importorskip("pytorch_metric_learning.losses")
    batch = 8
    image, text = unit_rows(batch, 6, 91), unit_rows(batch, 6, 92)
    labels = torch.arange(batch) if group_ids is None else torch.tensor(group_ids)
    oracle = losses.NTXentLoss(temperature=TAU_NT_XENT)
    out = build_loss("nt_xent", temperature=TAU_NT_XENT)(
        image=image, text=text, group_ids=None if group_ids is None else labels
    )
    # a distinct ref_labels object: PML drops the diagonal pairs when ``ref_labels is labels``
    i2t = oracle(image, labels, ref_emb=text, ref_labels=labels.clone())
    t2i = oracle(text, labels, ref_emb=image, ref_labels=labels.clone())
    assert out["image_to_text_loss"].item() == pytest.approx(0.5 * i2t.item(), abs=1e-6)
    assert out["text_to_image_loss"].item() == pytest.approx(0.5 * t2i.item(), abs=1e-6)


# ----------------------------------------------------------------------------------------------------
# COCOS diagnostics (Bleeker & de Rijke §4)
# ----------------------------------------------------------------------------------------------------


def test_nt_xent_diagnostics_follow_bleeker_definitions():
    image, text = unit_rows(10, 3, 101), unit_rows(10, 3, 102)
    diagnostics = build_loss("nt_xent").diagnostics(image=image, text=text)
    for direction, scores in (
        ("image_to_text", loop_scores(image, text)),
        ("text_to_image", transpose(loop_scores(image, text))),
    ):
        for q, row in enumerate(scores):
            partition = sum(math.exp(s / TAU_NT_XENT) for s in row)
            weights = [math.exp(row[j] / TAU_NT_XENT) / partition for j in range(len(row)) if j != q]
            contributing = [w for w in weights if w > EPS]
            assert diagnostics[f"{direction}_contributing_negatives"][q].item() == len(contributing)
            assert diagnostics[f"{direction}_negative_weight"][q].item() == pytest.approx(
                sum(contributing), abs=1e-9
            )
            positive_weight = 1 - math.exp(row[q] / TAU_NT_XENT) / partition
            assert diagnostics[f"{direction}_positive_weight"][q].item() == pytest.approx(
                positive_weight, abs=1e-9
            )
            assert diagnostics[f"{direction}_no_gradient"][q].item() == (not contributing)


def test_softmax_diagnostics_count_no_gradient_for_easy_queries():
    # orthogonal pairs: each negative weighs 1 / (e^{1/τ} + B - 1) ≈ 4.5e-5 < eps, so no query contributes
    image = text = torch.eye(4, dtype=torch.float64)
    diagnostics = build_loss("nt_xent").diagnostics(image=image, text=text)
    assert diagnostics["image_to_text_contributing_negatives"].tolist() == [0, 0, 0, 0]
    assert diagnostics["image_to_text_no_gradient"].all()
    hard = build_loss("nt_xent", temperature=1.0).diagnostics(image=image, text=text)
    assert hard["text_to_image_contributing_negatives"].tolist() == [3, 3, 3, 3]
    assert not hard["text_to_image_no_gradient"].any()


def test_mining_diagnostics_only_count_mined_negatives():
    image, text = unit_rows(9, 2, 111), unit_rows(9, 2, 112)
    diagnostics = build_loss("stochastic_negative_mining", scale=2.0, top_k=2).diagnostics(
        image=image, text=text
    )
    assert diagnostics["image_to_text_contributing_negatives"].max().item() <= 2
    unmined = build_loss("sampled_softmax", scale=2.0).diagnostics(image=image, text=text)
    assert unmined["image_to_text_contributing_negatives"].max().item() > 2


def test_cross_example_diagnostics_weigh_each_negative_by_all_terms():
    # B dL/d l_qn = sum_a mean_{p in P_a} e^{l_qn} / (e^{l_ap} + sum_{N_B} e^{l}) for a negative entry (q, n)
    image, text = unit_rows(5, 3, 121), unit_rows(5, 3, 122)
    scale = 2.0
    diagnostics = build_loss("cross_example_softmax", scale=scale).diagnostics(image=image, text=text)
    logits = [[scale * s for s in row] for row in loop_scores(image, text)]
    partition = sum(math.exp(logits[q][j]) for q in range(5) for j in range(5) if q != j)
    for q in range(5):
        weights = [
            sum(math.exp(logits[q][n]) / (math.exp(logits[a][a]) + partition) for a in range(5))
            for n in range(5)
            if n != q
        ]
        contributing = [w for w in weights if w > EPS]
        assert diagnostics["image_to_text_contributing_negatives"][q].item() == len(contributing)
        assert diagnostics["image_to_text_negative_weight"][q].item() == pytest.approx(
            sum(contributing), abs=1e-9
        )


def test_smooth_ap_diagnostics_follow_eq_13():
    image, text, groups = grouped_batch([0, 0, 0, 1, 1, 2, 2, 2], dim=3, seed=131)
    tau = 0.05
    diagnostics = build_loss("smooth_ap", temperature=tau).diagnostics(
        image=image, text=text, group_ids=groups
    )
    group_list = groups.tolist()

    def sigmoid(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x / tau))

    for direction, scores in (
        ("image_to_text", loop_scores(image, text)),
        ("text_to_image", transpose(loop_scores(image, text))),
    ):
        for q, row in enumerate(scores):
            positives = [j for j in range(8) if group_list[j] == group_list[q]]
            count = 0
            for i in positives:
                rank_in_all = 1 + sum(sigmoid(row[j] - row[i]) for j in range(8) if j != i)
                for j in range(8):
                    if j != i:
                        slope = sigmoid(row[j] - row[i]) * (1 - sigmoid(row[j] - row[i])) / tau
                        count += slope / rank_in_all**2 > EPS
            expected = count / len(positives)
            assert diagnostics[f"{direction}_contributing_triplets"][q].item() == pytest.approx(expected)
            assert diagnostics[f"{direction}_no_gradient"][q].item() == (expected == 0)


@pytest.mark.parametrize("name", list(CASES))
def test_diagnostics_leave_loss_and_gradients_alone(name):
    image, text, groups = grouped_batch([0, 0, 1, 1, 2, 2], dim=4, seed=141)
    image.requires_grad_()
    loss = build_loss(name)
    before = {k: v.item() for k, v in loss(image=image, text=text, group_ids=groups).items()}
    diagnostics = loss.diagnostics(image=image, text=text, group_ids=groups)
    with torch.no_grad():
        assert loss.diagnostics(image=image, text=text, group_ids=groups).keys() == diagnostics.keys()
    assert image.grad is None
    assert {k: v.item() for k, v in loss(image=image, text=text, group_ids=groups).items()} == before
    assert all(value.shape == (6,) for value in diagnostics.values())
    assert any(key.endswith("_no_gradient") for key in diagnostics)


# ----------------------------------------------------------------------------------------------------
# guards
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_ids", [None, [0, 1, 2, 3, 4, 5]])
def test_smooth_ap_refuses_single_positive_batches(group_ids):
    image, text = unit_rows(6, 4, 151), unit_rows(6, 4, 152)
    groups = None if group_ids is None else torch.tensor(group_ids)
    with pytest.raises(LossPreconditionError, match="several positives per query.*group_ids"):
        build_loss("smooth_ap")(image=image, text=text, group_ids=groups)


@pytest.mark.parametrize("name", list(CASES))
def test_guards(name):
    image, text = unit_rows(4, 3, 161), unit_rows(4, 3, 162)
    loss = build_loss(name)
    with pytest.raises(LossPreconditionError, match="L2-normalised"):
        loss(image=3 * image, text=text, group_ids=torch.tensor([0, 0, 1, 1]))
    with pytest.raises(LossPreconditionError, match="at least two different items"):
        loss(image=image, text=text, group_ids=torch.zeros(4, dtype=torch.long))
    with pytest.raises(LossPreconditionError, match=r"\[B, D\]"):
        loss(image=image[:, None].expand(4, 2, 3), text=text[:, None].expand(4, 2, 3))
    with pytest.raises(LossPreconditionError, match="same shape"):
        loss(image=image, text=text[:3])
    with pytest.raises(LossPreconditionError, match="by keyword"):
        loss(image=image)


def test_hyperparameter_guards():
    with pytest.raises(LossPreconditionError, match="temperature"):
        build_loss("nt_xent", temperature=0.0)
    with pytest.raises(LossPreconditionError, match="fraction"):
        build_loss("cross_example_negative_mining", fraction=0.0)
    with pytest.raises(LossPreconditionError, match="top_k"):
        build_loss("stochastic_negative_mining", top_k=0)
    with pytest.raises(LossPreconditionError, match="scale: must be >= 1"):
        build_loss("instance_cross_entropy", scale=0.5)
