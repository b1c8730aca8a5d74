"""Core metric-learning losses (angular, triplet, within-modality, Struc) against loop-by-loop references
written here from the equations, against pytorch-metric-learning as an independent oracle, plus gradcheck
and the input guards.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models.losses import LossPreconditionError, build_loss
from models.losses.checks import COCOS_EPS
from models.losses.pair_terms import ANGULAR_FORMS

ATOL = 1e-6

# ---------------------------------------------------------------------------------------------------------
# Input cases: float64, L2-normalised rows, with sampled neighbors.
# ---------------------------------------------------------------------------------------------------------


def unit_rows(generator: torch.Generator, rows: int, dim: int) -> torch.Tensor:
    return F.normalize(torch.randn(rows, dim, generator=generator, dtype=torch.float64), dim=1)


def make_case(name: str) -> dict[str, torch.Tensor]:
    """Keyword batch for one edge case; neighbor rows always present (ignored by cross-modal losses)."""
    generator = torch.Generator().manual_seed(sum(map(ord, name)))
    dim = 5
    if name == "random":
        image, text = unit_rows(generator, 6, dim), unit_rows(generator, 6, dim)
        case = {"image": image, "text": text}
        case["neighbor_of"] = torch.tensor([0, 0, 2, 3, 5, 1])
        case["neighbor_image"], case["neighbor_text"] = (
            unit_rows(generator, 6, dim),
            unit_rows(generator, 6, dim),
        )
        return case
    if name == "batch_of_two":
        case = {"image": unit_rows(generator, 2, dim), "text": unit_rows(generator, 2, dim)}
        case["neighbor_of"] = torch.tensor([1, 0])
        case["neighbor_image"], case["neighbor_text"] = (
            unit_rows(generator, 2, dim),
            unit_rows(generator, 2, dim),
        )
        return case
    if name == "all_identical":
        same = unit_rows(generator, 1, dim).expand(4, dim).clone()
        case = {"image": same.clone(), "text": same.clone(), "group_ids": torch.tensor([0, 0, 1, 2])}
        case["neighbor_of"] = torch.tensor([0, 1, 2, 3])
        case["neighbor_image"], case["neighbor_text"] = same.clone(), same.clone()
        case["neighbor_group_ids"] = torch.tensor([1, 2, 0, 9])
        return case
    if name == "positive_is_hardest_negative":
        # text 1 duplicates text 0: for image query 0 the hardest negative coincides with the positive
        image, text = unit_rows(generator, 5, dim), unit_rows(generator, 5, dim)
        text[1] = text[0]
        image[0] = text[0]
        case = {"image": image, "text": text}
        case["neighbor_of"] = torch.tensor([0, 1, 4])
        case["neighbor_image"], case["neighbor_text"] = image[[1, 0, 2]].clone(), text[[1, 0, 2]].clone()
        return case
    if name == "ties":
        # orthonormal rows: every negative is at exactly the same distance from every query
        basis = torch.eye(dim, dtype=torch.float64)
        case = {"image": basis[:4].clone(), "text": basis[:4].clone()}
        case["neighbor_of"] = torch.tensor([0, 1, 2, 3])
        case["neighbor_image"], case["neighbor_text"] = (
            basis[[4, 4, 3, 0]].clone(),
            basis[[4, 4, 3, 0]].clone(),
        )
        return case
    if name == "repeated_groups":
        image, text = unit_rows(generator, 6, dim), unit_rows(generator, 6, dim)
        group_ids = torch.tensor([7, 7, 3, 5, 5, 5])
        image[1], image[4], image[5] = image[0], image[3], image[3]  # captions of one image share the image
        case = {"image": image, "text": text, "group_ids": group_ids}
        # neighbor 0 is batch row 2's item (group 3), so row 2 must not be its negative
        case["neighbor_of"] = torch.tensor([0, 3, 2, 5])
        case["neighbor_image"] = torch.stack([image[2], unit_rows(generator, 1, dim)[0], image[0], image[2]])
        case["neighbor_text"] = torch.stack([text[2], unit_rows(generator, 1, dim)[0], text[1], text[2]])
        case["neighbor_group_ids"] = torch.tensor([3, 11, 7, 3])
        return case
    raise KeyError(name)


CASES = ["random", "batch_of_two", "all_identical", "positive_is_hardest_negative", "ties", "repeated_groups"]

# ---------------------------------------------------------------------------------------------------------
# Loop-by-loop references, straight from the equations (direct differences, no expansions, no masks).
# ---------------------------------------------------------------------------------------------------------


def groups_of(case: dict[str, torch.Tensor]) -> list[int]:
    group_ids = case.get("group_ids")
    return list(range(len(case["image"]))) if group_ids is None else group_ids.tolist()


def ref_distance(x: torch.Tensor, y: torch.Tensor, distance: str) -> float:
    if distance == "cosine":
        return 1.0 - float(x @ y)
    squared = float(((x - y) ** 2).sum())
    return squared if distance == "squared_l2" else math.sqrt(squared)


def ref_angular_pair(a, p, negatives, form: str, tan_sq: float) -> tuple[float, int]:
    """(loss, contributing negatives) of one anchor-positive pair: Eq. 2-3 / Wang et al. smooth form."""
    if form == "hinge":
        center = (a + p) / 2
        terms = [
            float(((a - p) ** 2).sum()) - 4 * tan_sq * float(((n - center) ** 2).sum()) for n in negatives
        ]
        return sum(max(0.0, t) for t in terms), sum(t > 0 for t in terms)
    exponents = [4 * tan_sq * float((a + p) @ n) - 2 * (1 + tan_sq) * float(a @ p) for n in negatives]
    denominator = 1.0 + sum(math.exp(e) for e in exponents)
    return math.log(denominator), sum(math.exp(e) / denominator > COCOS_EPS for e in exponents)


def ref_triplet_pair(a, p, negatives, distance: str, margin: float, mode: str) -> tuple[float, int]:
    violations = [margin + ref_distance(a, p, distance) - ref_distance(a, n, distance) for n in negatives]
    if mode == "hardest":
        worst = max(violations, default=-math.inf)
        return max(0.0, worst), int(worst > 0)
    return sum(max(0.0, v) for v in violations), sum(v > 0 for v in violations)


def ref_cross_modal(case, params: dict, pair_fn) -> tuple[dict[str, float], dict[str, list[int]]]:
    groups = groups_of(case)
    directions = [("image_to_text", case["image"], case["text"])]
    if params.get("symmetric", True):
        directions.append(("text_to_image", case["text"], case["image"]))
    losses, counts = {}, {}
    for name, anchors, others in directions:
        per_query = []
        for i in range(len(anchors)):
            negatives = [others[j] for j in range(len(others)) if groups[j] != groups[i]]
            per_query.append(pair_fn(anchors[i], others[i], negatives))
        losses[f"{name}_loss"] = sum(loss for loss, _ in per_query) / len(per_query)
        counts[f"{name}_contributing_negatives"] = [count for _, count in per_query]
    return losses, counts


def ref_neighbor_negatives(case, m: int) -> list[int]:
    groups = groups_of(case)
    anchor_row = int(case["neighbor_of"][m])
    neighbor_group = None if "neighbor_group_ids" not in case else int(case["neighbor_group_ids"][m])
    return [j for j in range(len(groups)) if groups[j] != groups[anchor_row] and groups[j] != neighbor_group]


def ref_within(case, params: dict) -> tuple[dict[str, float], dict[str, list[int]]]:
    form = params.get("form", "angular")
    weights = {"angular": (0.2, 0.3), "triplet": (0.3, 0.1)}[form]  # Thomas & Kovashka §3.3
    alpha = params.get("text_weight", weights[0])
    beta = params.get("image_weight", weights[1])
    tan_sq = math.tan(math.radians(params.get("alpha_degrees", 45.0))) ** 2
    losses, counts = {}, {}
    for name, weight, pool, neighbors in (
        ("within_text", alpha, case["text"], case["neighbor_text"]),
        ("within_image", beta, case["image"], case["neighbor_image"]),
    ):
        per_pair = []
        for m in range(len(case["neighbor_of"])):
            anchor, positive = pool[int(case["neighbor_of"][m])], neighbors[m]
            negatives = [pool[j] for j in ref_neighbor_negatives(case, m)]
            if form == "angular":
                per_pair.append(
                    ref_angular_pair(
                        anchor, positive, negatives, params.get("angular_form", "smooth"), tan_sq
                    )
                )
            else:
                distance, margin = params.get("distance", "squared_l2"), params.get("margin", 0.2)
                per_pair.append(ref_triplet_pair(anchor, positive, negatives, distance, margin, "all"))
        losses[f"{name}_loss"] = weight * sum(loss for loss, _ in per_pair) / len(per_pair)
        counts[f"{name}_contributing_negatives"] = [count for _, count in per_pair]
    return losses, counts


def ref_struc_pair(a, p, negatives, distance: str, margin: float, top_k: int | None) -> tuple[float, int]:
    violations = sorted(
        (margin + ref_distance(a, p, distance) - ref_distance(a, n, distance) for n in negatives),
        reverse=True,
    )
    kept = violations if top_k is None else violations[:top_k]
    return sum(max(0.0, v) for v in kept), sum(v > 0 for v in kept)


def ref_struc(case, params: dict) -> tuple[dict[str, float], dict[str, list[int]]]:
    space = params.get("space", "text")
    margin, distance, top_k = (
        params.get("margin", 0.1),
        params.get("distance", "euclidean"),
        params.get("top_k"),
    )
    pool = case[space]
    groups = groups_of(case)
    per_pair = []
    if params.get("group_source", "ground_truth") == "ground_truth":
        for i in range(len(pool)):
            negatives = [pool[k] for k in range(len(pool)) if groups[k] != groups[i]]
            for j in range(len(pool)):
                if j != i and groups[j] == groups[i]:
                    per_pair.append(ref_struc_pair(pool[i], pool[j], negatives, distance, margin, top_k))
    else:
        neighbors = case[f"neighbor_{space}"]
        batch_pairs, neighbor_pairs = [], []
        for m in range(len(case["neighbor_of"])):
            member, neighbor = pool[int(case["neighbor_of"][m])], neighbors[m]
            negatives = [pool[j] for j in ref_neighbor_negatives(case, m)]
            batch_pairs.append(ref_struc_pair(member, neighbor, negatives, distance, margin, top_k))
            neighbor_pairs.append(ref_struc_pair(neighbor, member, negatives, distance, margin, top_k))
        per_pair = batch_pairs + neighbor_pairs
    weight = params.get("weight", 1.0)
    loss = weight * sum(loss for loss, _ in per_pair) / len(per_pair)
    return {f"struc_{space}_loss": loss}, {
        f"struc_{space}_contributing_negatives": [count for _, count in per_pair]
    }


def reference(name: str, params: dict, case) -> tuple[dict[str, float], dict[str, list[int]]]:
    if name == "angular":
        form, tan_sq = (
            params.get("form", "smooth"),
            math.tan(math.radians(params.get("alpha_degrees", 45.0))) ** 2,
        )
        return ref_cross_modal(
            case, params, lambda a, p, negatives: ref_angular_pair(a, p, negatives, form, tan_sq)
        )
    if name == "triplet":
        distance, margin = params.get("distance", "squared_l2"), params.get("margin", 0.2)
        mode = params.get("negatives", "all")
        return ref_cross_modal(
            case, params, lambda a, p, negatives: ref_triplet_pair(a, p, negatives, distance, margin, mode)
        )
    if name == "within_modality":
        return ref_within(case, params)
    return ref_struc(case, params)


CONFIGS = [
    ("angular", {}),
    ("angular", {"form": "hinge", "alpha_degrees": 30.0}),
    ("angular", {"form": "hinge", "alpha_degrees": 25.0, "symmetric": False}),
    ("angular", {"alpha_degrees": 40.0, "symmetric": False}),
    ("triplet", {}),
    ("triplet", {"distance": "cosine", "negatives": "hardest"}),
    ("triplet", {"distance": "squared_l2", "negatives": "hardest", "margin": 0.5, "symmetric": False}),
    ("triplet", {"distance": "cosine", "negatives": "all", "margin": 0.3}),
    ("within_modality", {}),
    (
        "within_modality",
        {"form": "angular", "angular_form": "hinge", "alpha_degrees": 30.0, "text_weight": 0.5, "image_weight": 2.0},
    ),
    ("within_modality", {"form": "triplet"}),
    ("within_modality", {"form": "triplet", "distance": "cosine", "margin": 0.4}),
    ("struc", {}),
    ("struc", {"space": "image", "top_k": 2, "margin": 0.3, "weight": 0.5}),
    ("struc", {"space": "text", "distance": "squared_l2", "top_k": 1}),
    ("struc", {"group_source": "neighbors"}),
    ("struc", {"group_source": "neighbors", "space": "image", "top_k": 2, "margin": 0.5}),
]


def config_id(config) -> str:
    name, params = config
    return name + "".join(f"-{key}={value}" for key, value in params.items())


def has_group_mates(case) -> bool:
    groups = groups_of(case)
    return len(set(groups)) < len(groups)


def applicable(config, case_name: str) -> bool:
    """Ground-truth Struc needs group mates in the batch (its guard is tested separately)."""
    name, params = config
    needs_mates = name == "struc" and params.get("group_source", "ground_truth") == "ground_truth"
    return not needs_mates or has_group_mates(make_case(case_name))


@pytest.mark.parametrize(
    ("config", "case_name"),
    [
        pytest.param(config, case_name, id=f"{config_id(config)}-{case_name}")
        for config in CONFIGS
        for case_name in CASES
        if applicable(config, case_name)
    ],
)
def test_loss_matches_loop_reference(config, case_name):
    name, params = config
    case = make_case(case_name)
    loss = build_loss(name, **params)
    expected_losses, expected_counts = reference(name, params, case)
    got = loss(**case)
    assert set(got) == set(expected_losses)
    for key, value in expected_losses.items():
        assert got[key].dtype == torch.float64 and got[key].dim() == 0
        assert got[key].item() == pytest.approx(value, abs=ATOL), key
    diagnostics = loss.diagnostics(**case)
    for key, counts in expected_counts.items():
        assert diagnostics[key].tolist() == counts, key
        prefix = key.removesuffix("_contributing_negatives")
        assert diagnostics[f"{prefix}_no_gradient"].tolist() == [count == 0 for count in counts]


def test_edge_cases_exercise_what_they_claim():
    """The hand-built cases really contain the situation they are named after."""
    case = make_case("positive_is_hardest_negative")
    similarities = case["image"][0] @ case["text"].T
    assert torch.equal(case["text"][1], case["text"][0])
    assert similarities.argmax() == 0 and similarities[1] == similarities.max()
    ties = make_case("ties")
    off_diagonal = (ties["image"] @ ties["text"].T)[~torch.eye(4, dtype=torch.bool)]
    assert torch.all(off_diagonal == off_diagonal[0])
    repeated = make_case("repeated_groups")
    # the neighbor of row 0 is the item in row 2; the loss must not push row 2 away from row 0
    assert ref_neighbor_negatives(repeated, 0) == [3, 4, 5]


def test_hinge_and_smooth_angular_logits_differ_by_a_constant_on_unit_vectors():
    """On unit vectors ‖a−p‖² = 2 − 2a·p and ‖n−C‖² = 3/2 + a·p/2 − (a+p)·n, so the Eq. 2 bracket equals the
    smooth exponent 4tan²α(a+p)·n − 2(1+tan²α)a·p plus 2 − 6tan²α: both forms rank negatives alike."""
    case = make_case("random")
    tan_sq = 1.7
    anchors, positives, negatives = case["image"], case["text"], case["neighbor_text"]
    hinge = ANGULAR_FORMS["hinge"].logits(anchors, positives, negatives, tan_sq)
    smooth = ANGULAR_FORMS["smooth"].logits(anchors, positives, negatives, tan_sq)
    torch.testing.assert_close(hinge - smooth, torch.full_like(hinge, 2 - 6 * tan_sq), atol=1e-12, rtol=0)


# ---------------------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------------------


def gradcheck_case() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return {
        "image": unit_rows(generator, 5, 4),
        "text": unit_rows(generator, 5, 4),
        "group_ids": torch.tensor([0, 0, 1, 1, 2]),
        "neighbor_image": unit_rows(generator, 5, 4),
        "neighbor_text": unit_rows(generator, 5, 4),
        "neighbor_of": torch.tensor([0, 1, 2, 3, 4]),
        "neighbor_group_ids": torch.tensor([10, 11, 12, 0, 14]),
    }


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_gradcheck(config):
    name, params = config
    loss = build_loss(name, **params)
    case = gradcheck_case()
    float_keys = [key for key, value in case.items() if value.is_floating_point()]

    def total(*tensors):
        return sum(loss(**{**case, **dict(zip(float_keys, tensors, strict=True))}).values())

    inputs = tuple(case[key].clone().requires_grad_(True) for key in float_keys)
    # a zero loss has a zero gradient that any code passes; the case must make every loss active
    assert total(*inputs).item() > 0
    assert torch.autograd.gradcheck(total, inputs, eps=1e-6, atol=1e-5)


def test_identical_embeddings_give_finite_gradients():
    """Euclidean Struc and the hinge forms at exact coincidences must not produce NaN."""
    case = make_case("all_identical")
    for name, params in CONFIGS:
        leaves = {
            key: value.clone().requires_grad_(True)
            for key, value in case.items()
            if value.is_floating_point()
        }
        total = sum(build_loss(name, **params)(**{**case, **leaves}).values())
        total.backward()
        for key, leaf in leaves.items():
            assert leaf.grad is None or torch.isfinite(leaf.grad).all(), (name, params, key)


# ---------------------------------------------------------------------------------------------------------
# Oracle: pytorch-metric-learning (test-only dependency)
# ---------------------------------------------------------------------------------------------------------


def test_smooth_angular_matches_pml_angular_loss_one_direction():
    """PML ``AngularLoss(alpha=45)`` with image as ``embeddings`` (labels arange(B)) and text as ``ref_emb``
    (ref_labels arange(B)) forms the pairs (image i, text i), takes as negatives every text row with another
    label, computes log(1 + Σ_n exp(4tan²α(a+p)·n − 2(1+tan²α)a·p)) and averages over the B pairs
    (MeanReducer): our image→text term exactly. Where they differ: PML re-normalises anchors and positives
    (not the negatives) inside the loss, so values agree only on unit-norm inputs (which we require) and
    gradients differ by that projection; with repeated labels PML makes every same-label (i, j) a positive
    pair, while we keep the paired row i as the only positive of query i. (PML also treats
    ``ref_labels is labels`` as "same set" and drops the diagonal pairs, so the test passes a copy.)
    """
    losses = pytest.importorskip("pytorch_metric_learning.losses")
    generator = torch.Generator().manual_seed(11)
    for batch, dim in ((2, 3), (16, 8), (33, 12)):
        image, text = unit_rows(generator, batch, dim), unit_rows(generator, batch, dim)
        labels = torch.arange(batch)
        # a distinct ref_labels object: PML drops the diagonal pairs when ``ref_labels is labels``
        expected = losses.AngularLoss(alpha=45)(image, labels, ref_emb=text, ref_labels=labels.clone())
        ours = build_loss("angular", form="smooth", alpha_degrees=45, symmetric=False)(image=image, text=text)
        assert ours["image_to_text_loss"].item() == pytest.approx(expected.item(), abs=ATOL)
        # and the reverse direction of our symmetric loss is PML with the roles swapped
        reverse = losses.AngularLoss(alpha=45)(text, labels, ref_emb=image, ref_labels=labels.clone())
        both = build_loss("angular")(image=image, text=text)
        assert both["text_to_image_loss"].item() == pytest.approx(reverse.item(), abs=ATOL)


@pytest.mark.parametrize("miner_distance", ["default", "cosine"])
def test_vsepp_max_violation_matches_pml_batch_hard_triplet(miner_distance):
    """PML ``TripletMarginLoss(margin=0.2, distance=CosineSimilarity(), reducer=SumReducer())`` fed the
    triplets of ``BatchHardMiner`` on (image, labels arange(B), ref text, ref_labels arange(B)):

    * the miner's hardest positive of image i is the least similar text with label i: only text i;
    * its hardest negative is the most similar text of another label. With its default normalised-L2
      distance it picks the smallest ‖a−n‖, which on unit vectors (‖a−n‖² = 2 − 2cos) is the largest cosine,
      so both miner distances pick the same negative (up to ties, which do not change the value);
    * the loss is [m − s(a,p) + s(a,n)]_+ per mined triplet and SumReducer sums over the B triplets.

    So PML = B × our image→text ``negatives="hardest"`` cosine term (we average over queries; VSE++ sums).
    Where they differ: with repeated labels the miner picks the hardest *positive* among same-label rows
    where VSE++ keeps the paired row; PML's default reducer (AvgNonZeroReducer) averages over non-zero
    triplets only; and an anchor without any negative is dropped by the miner but counts 0 in our mean.
    """
    losses = pytest.importorskip("pytorch_metric_learning.losses")
    miners = pytest.importorskip("pytorch_metric_learning.miners")
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.reducers import SumReducer

    generator = torch.Generator().manual_seed(12)
    miner = (
        miners.BatchHardMiner()
        if miner_distance == "default"
        else miners.BatchHardMiner(distance=CosineSimilarity())
    )
    oracle = losses.TripletMarginLoss(margin=0.2, distance=CosineSimilarity(), reducer=SumReducer())
    ours = build_loss("triplet", distance="cosine", negatives="hardest", margin=0.2, symmetric=False)
    for batch, dim in ((2, 3), (16, 8), (40, 6)):
        image, text = unit_rows(generator, batch, dim), unit_rows(generator, batch, dim)
        labels = torch.arange(batch)
        # a distinct ref_labels object: PML drops the diagonal pairs when ``ref_labels is labels``
        triplets = miner(image, labels, ref_emb=text, ref_labels=labels.clone())
        assert torch.equal(triplets[0], labels) and torch.equal(triplets[1], labels)
        expected = oracle(image, labels, indices_tuple=triplets, ref_emb=text, ref_labels=labels.clone())
        got = ours(image=image, text=text)["image_to_text_loss"] * batch
        assert got.item() == pytest.approx(expected.item(), abs=ATOL)
        assert got.item() > 0


# ---------------------------------------------------------------------------------------------------------
# Guards and registration
# ---------------------------------------------------------------------------------------------------------


def test_losses_are_registered_under_their_file_names():
    from models.losses.base import LOSSES

    for name in ("angular", "triplet", "within_modality", "struc"):
        assert LOSSES[name].__name__ == "".join(part.capitalize() for part in name.split("_"))
    assert build_loss("within_modality").needs == frozenset(
        {"neighbor_image", "neighbor_text", "neighbor_of"}
    )
    assert build_loss("struc", group_source="neighbors").needs == build_loss("within_modality").needs
    assert build_loss("struc").needs == frozenset({"group_mates"})


def test_within_modality_defaults_to_the_paper_weights_of_its_form():
    case = make_case("random")
    for form, (alpha, beta) in {"angular": (0.2, 0.3), "triplet": (0.3, 0.1)}.items():
        default = build_loss("within_modality", form=form)(**case)
        unit = build_loss("within_modality", form=form, text_weight=1.0, image_weight=1.0)(**case)
        assert default["within_text_loss"].item() == pytest.approx(alpha * unit["within_text_loss"].item())
        assert default["within_image_loss"].item() == pytest.approx(beta * unit["within_image_loss"].item())


@pytest.mark.parametrize(
    ("name", "params", "change", "message"),
    [
        ("within_modality", {}, {"neighbor_text": None}, "neighbor_source"),
        ("struc", {"group_source": "neighbors"}, {"neighbor_of": None}, "neighbor_source"),
        ("struc", {}, {"group_ids": None}, "several captions per image"),
        ("angular", {}, {"text": "unnormalised"}, "normalize"),
        ("triplet", {}, {"text": "short"}, "same shape"),
        ("triplet", {}, {"group_ids": "wrong_length"}, "one id per batch row"),
        ("within_modality", {}, {"neighbor_of": "out_of_range"}, "rows of this batch"),
        ("within_modality", {}, {"group_ids": None, "neighbor_group_ids": "given"}, "same id space"),
        ("angular", {}, {"image": "multi_embedding", "text": "multi_embedding"}, "[N, D]"),
    ],
)
def test_bad_inputs_raise_a_helpful_precondition_error(name, params, change, message):
    case = make_case("random")
    case["group_ids"] = torch.arange(6)
    replacements = {
        "unnormalised": 3 * case["text"],
        "short": case["text"][:4],
        "wrong_length": torch.arange(5),
        "out_of_range": torch.tensor([0, 0, 2, 3, 6, 1]),
        "given": torch.arange(6),
        "multi_embedding": case["image"].unsqueeze(1).expand(6, 2, 5),
    }
    for key, value in change.items():
        if value is None:
            case.pop(key, None)
        else:
            case[key] = replacements[value]
    with pytest.raises(LossPreconditionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_loss(name, **params)(**case)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("angular", {"form": "cosine"}),
        ("angular", {"alpha_degrees": 90}),
        ("triplet", {"negatives": "semihard"}),
        ("triplet", {"distance": "manhattan"}),
        ("within_modality", {"form": "softmax"}),
        ("struc", {"space": "audio"}),
        ("struc", {"top_k": 0}),
    ],
)
def test_bad_parameters_are_refused_at_construction(name, params):
    with pytest.raises(LossPreconditionError, match=rf"{name}\.{next(iter(params))}: (must be|unknown)"):
        build_loss(name, **params)


# ---------------------------------------------------------------------------------------------------------
# Package structure: losses share code only through base and the helper modules
# ---------------------------------------------------------------------------------------------------------


def package_imports(module: str) -> set[str]:
    """The ``models.losses`` modules that ``module`` imports, read from its source."""
    import ast
    import importlib

    source = importlib.import_module(f"models.losses.{module}").__file__
    tree = ast.parse(open(source, encoding="utf-8").read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("models.losses."):
            found.add(node.module.removeprefix("models.losses."))
    return found


HELPERS = ("base", "checks", "distances", "pair_terms", "settings", "softmax_terms")
#: what each helper module may import of the package: checks nothing, the distances and the settings' declarations
#: checks only, base checks and the settings, the term modules checks and the distances (pair_terms also base: its
#: cross-modal term loss is a Loss; and the settings: the terms' settings are declared there)
HELPER_IMPORTS = {
    "checks": set(),
    "base": {"checks", "settings"},
    "distances": {"checks"},
    "pair_terms": {"base", "checks", "distances", "settings"},
    "softmax_terms": {"checks"},
    "settings": {"checks"},
}


def test_every_loss_imports_only_base_and_the_helper_modules():
    """A loss never imports another loss, so adding or changing one touches one file; below a loss the
    helpers are shallow (``distances`` and ``settings`` import only ``checks``, ``base`` ``checks`` and ``settings``,
    the term modules ``checks``, ``distances`` and, for ``pair_terms``, ``base`` and ``settings``), so the chain from
    a loss is at most five modules long."""
    import pkgutil

    import models.losses
    from models.losses.base import LOSSES

    for helper, allowed in HELPER_IMPORTS.items():
        assert package_imports(helper) == allowed, helper
    loss_modules = {cls.__module__.removeprefix("models.losses.") for cls in LOSSES.values()}
    for module in loss_modules:
        assert package_imports(module) <= set(HELPERS), module
    # every module of the package is a helper skipped by the auto-import or a registered loss
    assert models.losses.HELPER_MODULES == HELPERS
    package = {info.name for info in pkgutil.iter_modules(models.losses.__path__)}
    assert package - {"__init__"} == set(HELPERS) | loss_modules
    assert not loss_modules & set(HELPERS)


def test_forward_and_diagnostics_share_one_prepare_step():
    """Loss.forward is compute(prepare(...)) and Loss.diagnostics is contributions(prepare(...)) without
    gradients; a loss without contributions reports nothing, without even checking its inputs."""
    from models.losses.base import Loss

    calls = []

    class Probe(Loss[torch.Tensor]):
        def prepare(self, *, image, text, **unused):
            calls.append(torch.is_grad_enabled())
            return image.sum() + text.sum()

        def compute(self, prepared):
            return {"probe_loss": prepared}

    class CountingProbe(Probe):
        def contributions(self, prepared):
            return {"probe_no_gradient": prepared.reshape(1) > 0}

    case = make_case("random")
    assert Probe()(**case)["probe_loss"].item() == pytest.approx(
        float(case["image"].sum() + case["text"].sum())
    )
    assert Probe().diagnostics(image=None, text=None) == {} and not Probe().reports_cocos
    assert CountingProbe().reports_cocos and set(CountingProbe().diagnostics(**case)) == {"probe_no_gradient"}
    assert calls == [True, False]
