"""Metrics on [n, K, d] embeddings (PVSE): the multiple-instance similarity max_{k,l} <a_k, b_l>.

Hand-worked cases in the comments; K = 1 must reproduce the [n, d] numbers exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import evaluation.embeddings as evaluation_embeddings
from evaluation.calibration import calibration, precision_recall, score_distribution
from evaluation.embeddings import cross_modal_scores
from evaluation.evaluate import evaluate_embeddings
from evaluation.gallery import proximity_study, retrieval_examples
from evaluation.neighborhoods import nearest_neighbor_mask, neighbor_preservation, topic_precision_at_k
from evaluation.protocol import full_ranking, retrieval_layout
from evaluation.proximity import proximity_ratios
from evaluation.retrieval import coco_folds, full_ranking_metrics, n_way_recall_at_1
from models.losses.pvse_mil import mil_similarity


def random_unit(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# Two images and two texts, K = 2 embeddings each, in 2-D.  MIL scores S[i, t] = max over the 4 pairs:
#   S(I0, T0) = max(-1, 0.8, 0, 0.6) = 0.8     S(I0, T1) = max(0, -0.8, -1, 0.6) = 0.6
#   S(I1, T0) = max(-0.6, 0, 0.6, -0.96) = 0.6  S(I1, T1) = max(0.8, -0.96, 0.8, 0) = 0.8
# Scoring with the first embedding only would give S(I0, T0) = -1 < S(I0, T1) = 0: a miss.
IMAGES_MIL = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.6, -0.8], [-0.6, -0.8]]])
TEXTS_MIL = np.array([[[-1.0, 0.0], [0.8, 0.6]], [[0.0, -1.0], [-0.8, 0.6]]])
SCORES_MIL = np.array([[0.8, 0.6], [0.6, 0.8]])


def test_cross_modal_scores_hand_worked_2x2x2():
    np.testing.assert_allclose(cross_modal_scores(IMAGES_MIL, TEXTS_MIL), SCORES_MIL, atol=1e-12)
    np.testing.assert_allclose(cross_modal_scores(TEXTS_MIL, IMAGES_MIL), SCORES_MIL.T, atol=1e-12)
    first_only = cross_modal_scores(IMAGES_MIL[:, 0], TEXTS_MIL[:, 0])
    assert first_only[0, 0] < first_only[0, 1]  # the pair would be lost without the max over pairs


def test_metrics_on_hand_worked_2x2x2():
    # every pair scores 0.8 against its distractor's 0.6, in both directions
    result = n_way_recall_at_1(IMAGES_MIL, TEXTS_MIL, n_way=2, return_hits=True)
    np.testing.assert_array_equal(result["i2t_hits"], [[1, 1]])
    np.testing.assert_array_equal(result["t2i_hits"], [[1, 1]])
    ranking = full_ranking_metrics(IMAGES_MIL, TEXTS_MIL, ks=(1,), map_k=1)
    assert ranking["i2t_r@1"] == 1.0 and ranking["t2i_r@1"] == 1.0 and ranking["i2t_medr"] == 1.0
    # both positives (0.8) rank above both negatives (0.6): precision 1 all the way
    pr = precision_recall(IMAGES_MIL, TEXTS_MIL)
    assert pr["pr_auc"] == pytest.approx(1.0) and pr["n_positives"] == 2 and pr["n_scores"] == 4
    np.testing.assert_allclose(pr["thresholds"], [0.8])


def test_cross_modal_scores_matches_pvse_mil_similarity_across_chunks(monkeypatch):
    image, text = random_unit((9, 3, 5), 0), random_unit((7, 2, 5), 1)
    expected = mil_similarity(torch.from_numpy(image), torch.from_numpy(text)).numpy()
    np.testing.assert_allclose(cross_modal_scores(image, text), expected, rtol=0, atol=1e-12)
    # a tiny chunk budget forces one query row per chunk; the result must not depend on it
    monkeypatch.setattr(evaluation_embeddings, "_CHUNK_ENTRIES", 1)
    np.testing.assert_allclose(cross_modal_scores(image, text), expected, rtol=0, atol=1e-12)


def test_single_embedding_side_counts_as_k_equals_one():
    image, text = random_unit((6, 2, 4), 2), random_unit((5, 4), 3)
    by_hand = np.max(np.einsum("ikd,td->itk", image, text), axis=2)
    np.testing.assert_allclose(cross_modal_scores(image, text), by_hand, atol=1e-12)
    with pytest.raises(ValueError, match="same joint space"):
        cross_modal_scores(image, random_unit((5, 3), 3))
    with pytest.raises(ValueError, match=r"\[n, K, d\]"):
        cross_modal_scores(np.zeros((2, 2, 2, 2)), text)


def test_unit_norm_guard_names_the_embedding():
    bad = IMAGES_MIL.copy()
    bad[1, 1] *= 2.0
    with pytest.raises(ValueError, match="row 1 embedding 1 has L2 norm 2.0000"):
        n_way_recall_at_1(bad, TEXTS_MIL, n_way=2)


# ------------------------------------------------------------------------------------------------
# K = 1 gives exactly the [n, d] numbers
# ------------------------------------------------------------------------------------------------

N, D = 12, 6
IMAGE_2D, TEXT_2D = random_unit((N, D), 10), random_unit((N, D), 11)
IMAGE_K1, TEXT_K1 = IMAGE_2D[:, None, :], TEXT_2D[:, None, :]
GROUPS = np.array([0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9])


def assert_same_result(a, b):
    """Exact equality of nested metric results (dicts, lists, arrays, numbers)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_result(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_result(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b or (a != a and b != b)  # nan equals nan here


def test_k_equals_one_reproduces_every_cross_modal_metric_exactly():
    assert np.array_equal(cross_modal_scores(IMAGE_K1, TEXT_K1), IMAGE_2D @ TEXT_2D.T)
    options = {"n_way": 4, "seed": 3, "redraws": 3, "group_ids": GROUPS, "return_hits": True}
    assert_same_result(
        n_way_recall_at_1(IMAGE_K1, TEXT_K1, **options), n_way_recall_at_1(IMAGE_2D, TEXT_2D, **options)
    )
    assert_same_result(
        full_ranking_metrics(IMAGE_K1, TEXT_K1, return_ranks=True),
        full_ranking_metrics(IMAGE_2D, TEXT_2D, return_ranks=True),
    )
    assert_same_result(coco_folds(IMAGE_K1, TEXT_K1, n_folds=3), coco_folds(IMAGE_2D, TEXT_2D, n_folds=3))
    assert_same_result(
        precision_recall(IMAGE_K1, TEXT_K1, GROUPS), precision_recall(IMAGE_2D, TEXT_2D, GROUPS)
    )
    assert_same_result(
        score_distribution(IMAGE_K1, TEXT_K1, n_queries=5, bins=8),
        score_distribution(IMAGE_2D, TEXT_2D, n_queries=5, bins=8),
    )
    topics = GROUPS % 3
    assert topic_precision_at_k(IMAGE_K1, TEXT_K1, topics, topics, 3) == topic_precision_at_k(
        IMAGE_2D, TEXT_2D, topics, topics, 3
    )


def test_k_equals_one_reproduces_within_modality_metrics_exactly():
    reference = np.random.default_rng(12).normal(size=(N, 4))
    assert np.array_equal(
        nearest_neighbor_mask(IMAGE_K1 * 3.0, 3), nearest_neighbor_mask(IMAGE_2D * 3.0, 3)
    )
    assert_same_result(
        neighbor_preservation(IMAGE_K1, reference, 3), neighbor_preservation(IMAGE_2D, reference, 3)
    )
    assert np.array_equal(
        proximity_ratios(IMAGE_K1[:6], IMAGE_K1[6:], TEXT_2D[:6], TEXT_2D[6:]),
        proximity_ratios(IMAGE_2D[:6], IMAGE_2D[6:], TEXT_2D[:6], TEXT_2D[6:]),
    )


def test_k_equals_one_reproduces_the_evaluation_task_and_figures_exactly():
    doc_vectors = np.random.default_rng(13).normal(size=(N, 4))
    layout = retrieval_layout(GROUPS, GROUPS, np.array([f"caption {i}" for i in range(N)]))
    assert layout.protocol == "captions_per_image"
    args = (doc_vectors, 3, 2, 3)
    flat, flat_hits = evaluate_embeddings(IMAGE_2D, TEXT_2D, *args, group_ids=GROUPS)
    multi, multi_hits = evaluate_embeddings(IMAGE_K1, TEXT_K1, *args, group_ids=GROUPS)
    assert_same_result(multi, flat)
    assert_same_result(multi_hits, flat_hits)
    assert flat["similarity"]["rule"] == "dot"
    assert_same_result(full_ranking(IMAGE_K1, TEXT_K1, layout), full_ranking(IMAGE_2D, TEXT_2D, layout))
    assert_same_result(
        calibration(IMAGE_K1, TEXT_K1, GROUPS, layout), calibration(IMAGE_2D, TEXT_2D, GROUPS, layout)
    )
    positions = np.arange(N)
    baseline = (TEXT_2D, IMAGE_2D)
    assert_same_result(
        retrieval_examples((IMAGE_K1, TEXT_K1), baseline, positions, positions, GROUPS, 3, 2, seed=0),
        retrieval_examples((IMAGE_2D, TEXT_2D), baseline, positions, positions, GROUPS, 3, 2, seed=0),
    )
    assert_same_result(
        proximity_study((IMAGE_K1, TEXT_K1), baseline, doc_vectors, 2, 20, 0, 2, GROUPS),
        proximity_study((IMAGE_2D, TEXT_2D), baseline, doc_vectors, 2, 20, 0, 2, GROUPS),
    )


# ------------------------------------------------------------------------------------------------
# n-way and neighbor preservation with K = 2
# ------------------------------------------------------------------------------------------------


def test_n_way_on_multi_embeddings_follows_the_mil_scores():
    image, text = random_unit((10, 2, 3), 20), random_unit((10, 3, 3), 21)
    scores = mil_similarity(torch.from_numpy(image), torch.from_numpy(text)).numpy()
    # with n_way = n every other item is a distractor: a hit is a paired score above its row / column
    result = n_way_recall_at_1(image, text, n_way=10, return_hits=True)
    paired = np.diag(scores)
    off_diagonal = np.where(np.eye(10, dtype=bool), -np.inf, scores)
    np.testing.assert_array_equal(result["i2t_hits"][0], paired > off_diagonal.max(axis=1))
    np.testing.assert_array_equal(result["t2i_hits"][0], paired > off_diagonal.max(axis=0))
    assert 0.0 < result["i2t"] < 1.0 or 0.0 < result["t2i"] < 1.0  # the case is not trivially all-or-none


# Three samples, K = 2, in 2-D.  Within-modality MIL cosines:
#   S(A, B) = max(0, 0.6, -1, 0.8) = 0.8    S(A, C) = max(-1, 0, 0, -1) = 0    S(B, C) = max(0, 1, ...) = 1
# so the nearest other sample (k = 1) is A -> B, B -> C, C -> B.  The reference vectors R0 = (1, 0),
# R1 = (0.8, 0.6), R2 = (0, 1) have cosines R0.R1 = 0.8, R0.R2 = 0, R1.R2 = 0.6: A -> B, B -> A, C -> B.
# Preservation per sample: A 1, B 0, C 1 -> mean 2/3.  (First embeddings only: B -> A, a tie broken by index.)
SAMPLES_MIL = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, -1.0], [0.6, 0.8]], [[-1.0, 0.0], [0.0, -1.0]]])
REFERENCE_3 = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])


def test_neighbor_preservation_on_multi_embeddings_by_hand():
    # scaling every embedding shows the within-modality similarity normalises each of the K itself
    mask = nearest_neighbor_mask(SAMPLES_MIL * 3.0, 1)
    np.testing.assert_array_equal(mask, [[False, True, False], [False, False, True], [False, True, False]])
    result = neighbor_preservation(SAMPLES_MIL * 3.0, REFERENCE_3, k=1)
    np.testing.assert_allclose(result["per_sample"], [1.0, 0.0, 1.0])
    assert result["mean"] == pytest.approx(2 / 3)
    first_only = neighbor_preservation(SAMPLES_MIL[:, 0], REFERENCE_3, k=1)
    np.testing.assert_allclose(first_only["per_sample"], [1.0, 1.0, 1.0])


def test_proximity_ratio_uses_the_closest_pair_of_embeddings():
    # closest pair of A and B: (0, 1) and (0.6, 0.8), at sqrt(2 - 2 * 0.8) = sqrt(0.4); the baseline keeps
    # (1, 0) and (0, 1) at sqrt(2), so the ratio is sqrt(0.2)
    ratio = proximity_ratios(
        SAMPLES_MIL[:1], SAMPLES_MIL[1:2], np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    )
    np.testing.assert_allclose(ratio, [np.sqrt(0.2)])
    # the same item against itself is at distance 0 whatever K is
    assert proximity_ratios(SAMPLES_MIL, SAMPLES_MIL, IMAGE_2D[:3], TEXT_2D[:3]).tolist() == [0.0, 0.0, 0.0]


def test_evaluation_task_runs_on_multi_embeddings():
    image, text = random_unit((N, 2, D), 30), random_unit((N, 2, D), 31)
    doc_vectors = np.random.default_rng(32).normal(size=(N, 4))
    result, hits = evaluate_embeddings(image, text, doc_vectors, 4, 2, 3, group_ids=GROUPS)
    assert result["similarity"] == {
        "image_embeddings_per_item": 2,
        "text_embeddings_per_item": 2,
        "rule": "max over the K x K embedding pairs (PVSE MIL)",
    }
    assert hits["i2t_hits"].shape == (2, N)
    expected = neighbor_preservation(image, doc_vectors, 3)["mean"]
    assert result["neighbor_preservation"]["image"]["mean"] == expected
    layout = retrieval_layout(GROUPS, GROUPS, np.array([f"caption {i}" for i in range(N)]))
    ranking = full_ranking(image, text, layout)["all"]
    # an image's rank is the best over its captions, ranked by the MIL scores
    scores = cross_modal_scores(image[layout.image_positions], text)
    owner = layout.image_index
    best = np.array([scores[i][owner == i].max() for i in range(len(scores))])
    negatives_above = np.array([(scores[i][owner != i] >= best[i]).sum() for i in range(len(scores))])
    assert ranking["i2t_r@1"] == pytest.approx(np.mean(negatives_above == 0))
