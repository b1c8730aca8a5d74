"""Tests of the metric functions (evaluation.retrieval, neighborhoods, calibration, proximity,
statistics): tiny cases worked out by hand (in the comments), plus properties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.calibration import precision_recall, score_distribution
from evaluation.neighborhoods import nearest_neighbor_mask, neighbor_preservation, topic_precision_at_k
from evaluation.proximity import proximity_ratios, sample_neighbor_pairs, smallest_ratios_first
from evaluation.retrieval import _draw_distractors, coco_folds, full_ranking_metrics, n_way_recall_at_1
from evaluation.statistics import cocos_summary, mean_std, paired_bootstrap


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def random_unit(n: int, d: int, seed: int) -> np.ndarray:
    return unit_rows(np.random.default_rng(seed).normal(size=(n, d)))


# Three pairs in 2-D, used by several tests.  Dot products S[i, t] = image_i . text_t:
#            t0     t1     t2
#   i0  [  1.0,   0.6,   0.0 ]
#   i1  [  0.0,   0.8,   1.0 ]
#   i2  [ -1.0,  -0.6,   0.0 ]
IMAGES_3 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
TEXTS_3 = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])


# ------------------------------------------------------------------------------------------------
# n-way Recall@1
# ------------------------------------------------------------------------------------------------


def test_n_way_three_pairs_by_hand():
    # n_way = 3 with 3 pairs: the candidates are all three items, so no randomness is involved.
    # I->T (rows of S): i0 1.0 > 0.6, 0.0 hit; i1 0.8 < 1.0 (t2) miss; i2 0.0 > -1.0, -0.6 hit -> 2/3.
    # T->I (columns):   t0 1.0 > 0, -1 hit;    t1 0.8 > 0.6, -0.6 hit; t2 0.0 < 1.0 (i1) miss -> 2/3.
    result = n_way_recall_at_1(IMAGES_3, TEXTS_3, n_way=3, seed=0, return_hits=True)
    assert result["i2t"] == pytest.approx(2 / 3)
    assert result["t2i"] == pytest.approx(2 / 3)
    np.testing.assert_array_equal(result["i2t_hits"], [[1, 0, 1]])
    np.testing.assert_array_equal(result["t2i_hits"], [[1, 1, 0]])
    assert result["n_way"] == 3 and result["redraws"] == 1 and result["n_queries"] == 3
    assert result["i2t_per_draw"] == [pytest.approx(2 / 3)]
    assert result["i2t_std"] == 0.0


def test_n_way_tie_counts_as_miss():
    # Two identical images and two identical texts: every paired score (1.0) equals the distractor's
    # (1.0), and a tie is a miss, so both directions score 0.
    same = np.array([[1.0, 0.0], [1.0, 0.0]])
    result = n_way_recall_at_1(same, same, n_way=2)
    assert result["i2t"] == 0.0 and result["t2i"] == 0.0


def test_n_way_group_members_are_never_distractors():
    # Groups {0, 1} and {2, 3}. Query i0 = (1, 0) scores: t0 0.8 (its pair), t1 1.0 (same group),
    # t2 0.0, t3 -1.0. As a 2-way task i0 is a hit unless t1 is drawn as the distractor.
    images = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    texts = np.array([[0.8, 0.6], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    grouped = n_way_recall_at_1(
        images, texts, n_way=2, redraws=30, group_ids=["a", "a", "b", "b"], return_hits=True
    )
    assert grouped["i2t_hits"][:, 0].min() == 1  # t1 is excluded, so i0 always wins
    ungrouped = n_way_recall_at_1(images, texts, n_way=2, redraws=30, return_hits=True)
    # without groups t1 is drawn with probability 1/3 per redraw; (2/3)^30 < 1e-5 makes "never" implausible
    assert ungrouped["i2t_hits"][:, 0].min() == 0


def test_distractor_draw_is_uniform_without_replacement_and_excludes_pair():
    groups = np.arange(5)
    rng = np.random.default_rng(0)
    counts = np.zeros((5, 5))
    for _ in range(2000):
        drawn = _draw_distractors(groups, slice(0, 5), 2, rng)
        assert np.all(drawn != np.arange(5)[:, None])  # never the pair itself
        assert np.all(drawn[:, 0] != drawn[:, 1])  # without replacement
        np.add.at(counts, (np.repeat(np.arange(5), 2), drawn.reshape(-1)), 1)
    # each of the 4 others is drawn with probability 2/4 per draw
    off_diagonal = counts[~np.eye(5, dtype=bool)] / 2000
    assert np.all(np.abs(off_diagonal - 0.5) < 0.05)


def test_n_way_perfect_embeddings_recall_one():
    embeddings = random_unit(200, 16, seed=1)
    result = n_way_recall_at_1(embeddings, embeddings, n_way=20, redraws=2)
    assert result["i2t"] == 1.0 and result["t2i"] == 1.0


def test_n_way_two_way_random_embeddings_is_chance():
    images, texts = random_unit(2000, 32, seed=2), random_unit(2000, 32, seed=3)
    result = n_way_recall_at_1(images, texts, n_way=2, seed=5)
    # chance is 1/2; the standard error over 2000 queries is ~0.011
    assert abs(result["i2t"] - 0.5) < 0.05 and abs(result["t2i"] - 0.5) < 0.05


def test_n_way_seeds_and_redraws():
    images, texts = random_unit(300, 8, seed=4), random_unit(300, 8, seed=5)
    first = n_way_recall_at_1(images, texts, n_way=5, seed=7, redraws=3, return_hits=True)
    again = n_way_recall_at_1(images, texts, n_way=5, seed=7, redraws=3, return_hits=True)
    other = n_way_recall_at_1(images, texts, n_way=5, seed=8, redraws=3, return_hits=True)
    np.testing.assert_array_equal(first["i2t_hits"], again["i2t_hits"])
    assert not np.array_equal(first["i2t_hits"], other["i2t_hits"])
    assert first["i2t_hits"].shape == (3, 300)
    assert first["i2t_per_draw"] == pytest.approx(first["i2t_hits"].mean(axis=1).tolist())
    assert first["i2t"] == pytest.approx(np.mean(first["i2t_per_draw"]))
    assert first["i2t_std"] == pytest.approx(np.std(first["i2t_per_draw"], ddof=1))


def test_n_way_guards():
    with pytest.raises(ValueError, match="distractors"):
        n_way_recall_at_1(IMAGES_3, TEXTS_3, n_way=4)
    with pytest.raises(ValueError, match="L2-normalise"):
        n_way_recall_at_1(IMAGES_3 * 2, TEXTS_3, n_way=2)
    with pytest.raises(ValueError, match="rows"):
        n_way_recall_at_1(IMAGES_3, TEXTS_3[:2], n_way=2)


# ------------------------------------------------------------------------------------------------
# Neighbor preservation (Table 3)
# ------------------------------------------------------------------------------------------------

# Four samples. Learned space: s0 (1,0), s1 (0.8,0.6), s2 (0,1), s3 (-1,0). Cosines:
#   s0: s1 .8, s2 0,  s3 -1      -> 1-NN {s1}, 2-NN {s1, s2}
#   s1: s0 .8, s2 .6, s3 -.8     -> 1-NN {s0}, 2-NN {s0, s2}
#   s2: s0 0,  s1 .6, s3 0       -> 1-NN {s1}, 2-NN {s1, s0}   (s0 and s3 tie at 0: lower index s0)
#   s3: s0 -1, s1 -.8, s2 0      -> 1-NN {s2}, 2-NN {s2, s1}
# Reference space: s0 (1,0), s1 (0,1), s2 (0.6,0.8), s3 (-0.6,0.8). Cosines:
#   s0: s1 0,  s2 .6, s3 -.6     -> 1-NN {s2}, 2-NN {s2, s1}
#   s1: s0 0,  s2 .8, s3 .8      -> 1-NN {s2}  (tie, lower index), 2-NN {s2, s3}
#   s2: s0 .6, s1 .8, s3 .28     -> 1-NN {s1}, 2-NN {s1, s0}
#   s3: s0 -.6, s1 .8, s2 .28    -> 1-NN {s1}, 2-NN {s1, s2}
# k=1 overlaps: 0, 0, 1, 0 -> mean 0.25.   k=2 overlaps: 2/2, 1/2, 2/2, 2/2 -> mean 0.875.
LEARNED_4 = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
REFERENCE_4 = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-0.6, 0.8]])


def test_neighbor_preservation_by_hand():
    k1 = neighbor_preservation(LEARNED_4, REFERENCE_4, k=1)
    np.testing.assert_allclose(k1["per_sample"], [0.0, 0.0, 1.0, 0.0])
    assert k1["mean"] == pytest.approx(0.25)
    k2 = neighbor_preservation(LEARNED_4, REFERENCE_4, k=2)
    # s2's learned 2-NN uses the tie-break (s0 over s3); breaking it the other way would give 0.5 there
    np.testing.assert_allclose(k2["per_sample"], [1.0, 0.5, 1.0, 1.0])
    assert k2["mean"] == pytest.approx(0.875)
    assert k2["k_used"] == 2 and k2["k_requested"] == 2


def test_neighbor_mask_tie_breaks_by_lower_index():
    mask = nearest_neighbor_mask(LEARNED_4, k=2)
    np.testing.assert_array_equal(np.flatnonzero(mask[2]), [0, 1])


def test_neighbor_preservation_caps_k():
    # with 4 samples every sample has only 3 others, so all of them are neighbors in both spaces
    result = neighbor_preservation(LEARNED_4, REFERENCE_4, k=200)
    assert result["k_used"] == 3 and result["k_requested"] == 200
    assert result["mean"] == 1.0


def test_neighbor_preservation_properties():
    learned, reference = random_unit(120, 8, seed=10), random_unit(120, 8, seed=11)
    base = neighbor_preservation(learned, reference, k=10)
    permutation = np.random.default_rng(12).permutation(120)
    permuted = neighbor_preservation(learned[permutation], reference[permutation], k=10)
    np.testing.assert_allclose(permuted["per_sample"], base["per_sample"][permutation])
    # cosine is blind to each row's length, so a non-normalised reference (e.g. Doc2Vec) is fine
    scales = np.random.default_rng(13).uniform(0.1, 10.0, size=(120, 1))
    assert neighbor_preservation(learned, reference * scales, k=10)["mean"] == pytest.approx(base["mean"])
    assert neighbor_preservation(reference, reference, k=10)["mean"] == 1.0
    # independent spaces keep k/(n-1) of the neighbors on average
    big_a, big_b = random_unit(1000, 16, seed=14), random_unit(1000, 16, seed=15)
    assert neighbor_preservation(big_a, big_b, k=50)["mean"] == pytest.approx(50 / 999, abs=0.01)


def test_neighbor_preservation_guards():
    with pytest.raises(ValueError, match="zero norm"):
        neighbor_preservation(LEARNED_4, np.zeros((4, 2)), k=1)
    with pytest.raises(ValueError, match="rows"):
        neighbor_preservation(LEARNED_4, REFERENCE_4[:3], k=1)


# ------------------------------------------------------------------------------------------------
# Full-gallery ranking metrics
# ------------------------------------------------------------------------------------------------

# Two images, four captions; captions 0, 1 belong to image 0 and captions 2, 3 to image 1.
#   i0 (1,0), i1 (0,1); c0 (-.6,.8), c1 (.6,.8), c2 (.8,.6), c3 (0,1)
#   i0 scores: c0 -.6, c1 .6, c2 .8, c3 0  -> order c2, c1, c3, c0; its captions at positions 2 and 4
#       best rank 2; AP@5 = (1/2 + 2/4) / min(2, 5) = 0.5
#   i1 scores: c0 .8, c1 .8, c2 .6, c3 1  -> order c3, c0, c1, c2; its captions at positions 1 and 4
#       best rank 1; AP@5 = (1/1 + 2/4) / 2 = 0.75
#   T->I: c0 ranks i0 (-.6) below i1 (.8): rank 2; c1 (.6 vs .8): 2; c2 (.6 for i1 vs .8): 2; c3: 1
IMAGES_2 = np.array([[1.0, 0.0], [0.0, 1.0]])
CAPTIONS_4 = np.array([[-0.6, 0.8], [0.6, 0.8], [0.8, 0.6], [0.0, 1.0]])
OWNER_4 = np.array([0, 0, 1, 1])


def test_full_ranking_by_hand():
    result = full_ranking_metrics(IMAGES_2, CAPTIONS_4, OWNER_4, ks=(1, 5), map_k=5, return_ranks=True)
    np.testing.assert_array_equal(result["i2t_ranks"], [2, 1])
    np.testing.assert_array_equal(result["t2i_ranks"], [2, 2, 2, 1])
    assert result["i2t_r@1"] == 0.5 and result["i2t_r@5"] == 1.0
    assert result["t2i_r@1"] == 0.25 and result["t2i_r@5"] == 1.0
    assert result["i2t_medr"] == 1.5 and result["i2t_meanr"] == 1.5
    assert result["t2i_medr"] == 2.0 and result["t2i_meanr"] == 1.75
    assert result["i2t_map@5"] == pytest.approx((0.5 + 0.75) / 2)
    assert result["t2i_map@5"] == pytest.approx((0.5 + 0.5 + 0.5 + 1.0) / 4)  # AP = 1 / rank
    assert result["rsum"] == pytest.approx(50 + 100 + 25 + 100)
    # map@1: only i1's caption c3 is at position 1 -> i2t (0 + 1) / 2; t2i only c3 -> 1/4
    map_at_1 = full_ranking_metrics(IMAGES_2, CAPTIONS_4, OWNER_4, map_k=1)
    assert map_at_1["i2t_map@1"] == 0.5 and map_at_1["t2i_map@1"] == 0.25


def test_full_ranking_ties_rank_the_negative_first():
    # two identical images with identical texts: the negative ties the positive, so every rank is 2
    same = np.array([[1.0, 0.0], [1.0, 0.0]])
    result = full_ranking_metrics(same, same, return_ranks=True)
    np.testing.assert_array_equal(result["i2t_ranks"], [2, 2])
    assert result["i2t_r@1"] == 0.0 and result["t2i_r@1"] == 0.0


def test_full_ranking_matches_brute_force_sort():
    rng = np.random.default_rng(20)
    images = random_unit(30, 6, seed=21)
    owner = rng.permutation(np.repeat(np.arange(30), [1, 2, 3] * 10))
    texts = unit_rows(images[owner] + 0.8 * rng.normal(size=(owner.size, 6)))
    result = full_ranking_metrics(images, texts, owner, map_k=5, return_ranks=True)
    scores = images @ texts.T
    best, aps = [], []
    for i in range(30):
        # sort texts by score, negatives before positives on ties (pessimistic), then by index
        ranking = sorted(range(owner.size), key=lambda t: (-scores[i, t], owner[t] == i, t))
        positions = [p + 1 for p, t in enumerate(ranking) if owner[t] == i]
        best.append(positions[0])
        aps.append(sum((j + 1) / p for j, p in enumerate(positions) if p <= 5) / min(len(positions), 5))
    np.testing.assert_array_equal(result["i2t_ranks"], best)
    assert result["i2t_map@5"] == pytest.approx(np.mean(aps))
    t2i = [1 + np.sum(np.delete(scores[:, t], owner[t]) >= scores[owner[t], t]) for t in range(owner.size)]
    np.testing.assert_array_equal(result["t2i_ranks"], t2i)


def test_full_ranking_perfect_embeddings():
    embeddings = random_unit(50, 16, seed=22)
    result = full_ranking_metrics(embeddings, embeddings)
    assert result["i2t_r@1"] == 1.0 and result["t2i_r@1"] == 1.0
    assert result["i2t_medr"] == 1.0 and result["i2t_map@5"] == 1.0


def test_full_ranking_guards():
    with pytest.raises(ValueError, match="text_to_image"):
        full_ranking_metrics(IMAGES_2, CAPTIONS_4)
    with pytest.raises(ValueError, match="no caption"):
        full_ranking_metrics(IMAGES_2, CAPTIONS_4, np.array([0, 0, 0, 0]))


def test_coco_folds_by_hand():
    # images 0 and 2 are both (1,0), images 1 and 3 both (0,1); each text equals its image.
    # On all 4 images every query ties with a duplicate -> rank 2, R@1 = 0.
    # In fold {0, 1} and fold {2, 3} the two images differ -> rank 1 everywhere, R@1 = 1.
    images = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert full_ranking_metrics(images, images)["i2t_r@1"] == 0.0
    folds = coco_folds(images, images, n_folds=2)
    assert folds["fold_images"] == 2 and len(folds["per_fold"]) == 2
    assert folds["mean"]["i2t_r@1"] == 1.0 and folds["mean"]["t2i_r@1"] == 1.0
    with pytest.raises(ValueError, match="equal folds"):
        coco_folds(images, images, n_folds=3)


# ------------------------------------------------------------------------------------------------
# Precision-recall and score distributions
# ------------------------------------------------------------------------------------------------


def test_precision_recall_by_hand():
    # All 9 scores of the 3-pair example, positives on the diagonal (1.0, 0.8, 0.0), swept high to low:
    #   1.0  : i0t0 (+), i1t2 (-)             tp 1 / 2 retrieved  P 1/2  R 1/3
    #   0.8  : i1t1 (+)                       tp 2 / 3            P 2/3  R 2/3
    #   0.6  : i0t1 (-)                       tp 2 / 4            P 1/2  R 2/3
    #   0.0  : i0t2 (-), i1t0 (-), i2t2 (+)   tp 3 / 7            P 3/7  R 1
    #  -0.6, -1.0 : negatives                 P 3/8, 3/9         R 1
    # AP = 1/3 * 1/2 + 1/3 * 2/3 + 0 * 1/2 + 1/3 * 3/7 + 0 + 0 = 67/126
    # The curve is reported where recall grows: thresholds 1.0, 0.8, 0.0.
    result = precision_recall(IMAGES_3, TEXTS_3)
    assert result["pr_auc"] == pytest.approx(67 / 126)
    np.testing.assert_allclose(result["precision"], [1 / 2, 2 / 3, 3 / 7])
    np.testing.assert_allclose(result["recall"], [1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(result["thresholds"], [1.0, 0.8, 0.0])
    assert result["n_positives"] == 3 and result["n_scores"] == 9
    thinned = precision_recall(IMAGES_3, TEXTS_3, max_curve_points=2)
    np.testing.assert_allclose(thinned["precision"], [1 / 2, 3 / 7])  # first and last point kept
    assert thinned["pr_auc"] == pytest.approx(67 / 126)


def test_precision_recall_groups_by_hand():
    # i0 (1,0), i1 (0,1); t0 (.6,.8), t1 (.8,.6): pairs score .6, .6 and the non-pairs .8, .8.
    # Threshold .8: 0 tp of 2 -> P 0, R 0; threshold .6: 2 tp of 4 -> P 1/2, R 1.  AP = 1 * 1/2.
    texts = np.array([[0.6, 0.8], [0.8, 0.6]])
    assert precision_recall(IMAGES_2, texts)["pr_auc"] == pytest.approx(0.5)
    # one group for both pairs: all four scores are positives -> AP 1
    assert precision_recall(IMAGES_2, texts, group_ids=["g", "g"])["pr_auc"] == pytest.approx(1.0)


def test_precision_recall_matches_brute_force():
    rng = np.random.default_rng(30)
    images = random_unit(40, 4, seed=31)
    texts = unit_rows(images + rng.normal(size=(40, 4)))
    groups = rng.integers(0, 15, size=40)
    scores = (images @ texts.T).reshape(-1)
    labels = (groups[:, None] == groups[None, :]).reshape(-1)
    expected, previous_recall = 0.0, 0.0
    for threshold in np.unique(scores)[::-1]:
        retrieved = scores >= threshold
        recall = labels[retrieved].sum() / labels.sum()
        expected += (recall - previous_recall) * labels[retrieved].mean()
        previous_recall = recall
    assert precision_recall(images, texts, group_ids=groups)["pr_auc"] == pytest.approx(expected)


def test_score_distribution_by_hand():
    # one text query (1,0) against images (1,0), (0,1), (-1,0): scores 1, 0, -1.
    # 4 bins over [-1, 1] with edges -1, -.5, 0, .5, 1: -1 -> bin 0, 0 -> bin 2, 1 -> bin 3 (right edge)
    query = np.array([[1.0, 0.0]])
    gallery = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    result = score_distribution(gallery, query, n_queries=5, bins=4)
    np.testing.assert_array_equal(result["counts"], [[1, 0, 1, 1]])
    np.testing.assert_allclose(result["bin_edges"], [-1, -0.5, 0, 0.5, 1])
    np.testing.assert_array_equal(result["query_indices"], [0])
    np.testing.assert_allclose(result["p5"], [1, 0, 1, 1])
    # image queries against the one text: each image has one score -> one count in its bin
    by_image = score_distribution(gallery, query, n_queries=3, bins=4, direction="i2t")
    np.testing.assert_array_equal(by_image["counts"], [[0, 0, 0, 1], [0, 0, 1, 0], [1, 0, 0, 0]])
    # per bin the 3 counts sort to (0, 0, 1) (or all 0): p95 sits at position 0.95 * 2 = 1.9 -> 0.9, p5 -> 0
    np.testing.assert_allclose(by_image["p95"], [0.9, 0.0, 0.9, 0.9])
    np.testing.assert_allclose(by_image["p5"], [0.0, 0.0, 0.0, 0.0])


def test_score_distribution_sampling_and_overshoot():
    images, texts = random_unit(30, 4, seed=40), random_unit(80, 4, seed=41)
    result = score_distribution(images, texts, n_queries=25, seed=3, bins=10)
    assert result["counts"].shape == (25, 10) and np.all(result["counts"].sum(axis=1) == 30)
    assert len(set(result["query_indices"].tolist())) == 25
    again = score_distribution(images, texts, n_queries=25, seed=3, bins=10)
    np.testing.assert_array_equal(result["query_indices"], again["query_indices"])
    # a score a hair above 1 (rounding) still lands in the last bin
    nearly = np.array([[1.0 + 1e-9, 0.0]])
    counts = score_distribution(np.array([[1.0, 0.0]]), nearly, bins=4)["counts"]
    np.testing.assert_array_equal(counts, [[0, 0, 0, 1]])


# ------------------------------------------------------------------------------------------------
# Topic precision, neighbor pairs, proximity ratios
# ------------------------------------------------------------------------------------------------


def test_topic_precision_by_hand():
    # queries q0 (1,0) topic A, q1 (0,1) topic B; gallery g0 (1,0) A, g1 (.8,.6) B, g2 (0,1) B, g3 (.6,.8) A
    #   q0 scores: g0 1, g1 .8, g3 .6, g2 0   q1 scores: g2 1, g3 .8, g1 .6, g0 0
    #   k=1: g0 (A) and g2 (B) both match -> 1.0
    #   k=2: {g0 A, g1 B} -> 1/2 and {g2 B, g3 A} -> 1/2 -> 0.5
    #   k=3: {A, B, A} -> 2/3 and {B, A, B} -> 2/3 -> 2/3
    queries = np.array([[1.0, 0.0], [0.0, 1.0]])
    gallery = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    query_topics, gallery_topics = ["A", "B"], ["A", "B", "B", "A"]
    assert topic_precision_at_k(queries, gallery, query_topics, gallery_topics, k=1) == 1.0
    assert topic_precision_at_k(queries, gallery, query_topics, gallery_topics, k=2) == pytest.approx(0.5)
    assert topic_precision_at_k(queries, gallery, query_topics, gallery_topics, k=3) == pytest.approx(2 / 3)
    # tie: (0,1) and (0,-1) both score 0 against (1,0); the lower gallery index wins the single place
    tie_gallery = np.array([[0.0, 1.0], [0.0, -1.0]])
    assert topic_precision_at_k(queries[:1], tie_gallery, ["X"], ["X", "Y"], k=1) == 1.0
    assert topic_precision_at_k(queries[:1], tie_gallery, ["X"], ["Y", "X"], k=1) == 0.0
    with pytest.raises(ValueError, match="gallery size"):
        topic_precision_at_k(queries, gallery, query_topics, gallery_topics, k=5)


def test_sample_neighbor_pairs_by_hand():
    # rows list: 0 -> {1, 2}; 1 -> {0, pad}; 2 -> {0, 1}; 3 -> {3 (itself), pad}
    # unordered distinct pairs: {0,1}, {0,2}, {1,2}; the self-pair and padding are dropped
    table = np.array([[1, 2], [0, -1], [0, 1], [3, -1]])
    np.testing.assert_array_equal(sample_neighbor_pairs(table, n=10, seed=0), [[0, 1], [0, 2], [1, 2]])
    two = sample_neighbor_pairs(table, n=2, seed=4)
    assert two.shape == (2, 2) and len({tuple(p) for p in two.tolist()}) == 2
    assert {tuple(p) for p in two.tolist()} <= {(0, 1), (0, 2), (1, 2)}
    np.testing.assert_array_equal(two, sample_neighbor_pairs(table, n=2, seed=4))


def test_proximity_ratios_by_hand():
    # pair 0: ours (1,0)-(0,1) distance sqrt 2; baseline (1,0)-(-1,0) distance 2      -> sqrt(2) / 2
    # pair 1: ours (1,0)-(1,0) distance 0;       baseline (1,0)-(0,1) sqrt 2          -> 0
    # pair 2: ours (1,0)-(-1,0) distance 2;      baseline (1,0)-(.6,.8) sqrt(.16+.64) -> 2 / sqrt(.8)
    ours_a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    ours_b = np.array([[0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
    base_a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    base_b = np.array([[-1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    ratios = proximity_ratios(ours_a, ours_b, base_a, base_b)
    np.testing.assert_allclose(ratios, [math.sqrt(2) / 2, 0.0, 2 / math.sqrt(0.8)], atol=1e-12)
    np.testing.assert_array_equal(smallest_ratios_first(ratios), [1, 0, 2])
    # the embeddings are compared after L2 normalisation, so row lengths do not matter
    np.testing.assert_allclose(proximity_ratios(3 * ours_a, ours_b, base_a, 0.5 * base_b), ratios)
    # zero baseline distance: inf when ours is not zero, nan when both are; nan sorts last
    degenerate = proximity_ratios(ours_a[:2], ours_b[:2], base_a[:2], base_a[:2])
    assert np.isinf(degenerate[0]) and np.isnan(degenerate[1])
    np.testing.assert_array_equal(smallest_ratios_first(degenerate), [0, 1])


# ------------------------------------------------------------------------------------------------
# Bootstrap, mean/std, COCOS
# ------------------------------------------------------------------------------------------------


def test_paired_bootstrap_identical_methods():
    hits = np.random.default_rng(50).integers(0, 2, size=500)
    result = paired_bootstrap(hits, hits, n_resamples=2000)
    assert result["mean_difference"] == 0.0
    assert result["ci_low"] == 0.0 and result["ci_high"] == 0.0
    assert result["p_value"] == 1.0


def test_paired_bootstrap_by_hand():
    # A always right, B always wrong: every resample has difference exactly 1, so the CI is [1, 1] and
    # no resample is as far from 1 as 1 is from 0 -> p = 1 / (1 + n_resamples)
    certain = paired_bootstrap(np.ones(4), np.zeros(4), n_resamples=999)
    assert certain["mean_difference"] == 1.0 and certain["ci_low"] == 1.0 and certain["ci_high"] == 1.0
    assert certain["p_value"] == pytest.approx(1 / 1000)
    # differences (1, 0): a resample of 2 queries has mean 0, 1/2 or 1 with probability 1/4, 1/2, 1/4;
    # observed 1/2, and |d* - 1/2| >= 1/2 exactly when d* is 0 or 1 -> p ~ 1/2; the CI spans [0, 1]
    coin = paired_bootstrap(np.array([1.0, 0.0]), np.array([0.0, 0.0]), n_resamples=10000, seed=1)
    assert coin["mean_difference"] == 0.5
    assert coin["p_value"] == pytest.approx(0.5, abs=0.02)
    assert coin["ci_low"] == 0.0 and coin["ci_high"] == 1.0


def test_paired_bootstrap_detects_a_real_difference_and_is_antisymmetric():
    rng = np.random.default_rng(51)
    a = (rng.random(1000) < 0.7).astype(float)
    b = (rng.random(1000) < 0.5).astype(float)
    forward = paired_bootstrap(a, b, n_resamples=2000, seed=2)
    backward = paired_bootstrap(b, a, n_resamples=2000, seed=2)
    assert forward["p_value"] < 0.01 and forward["ci_low"] > 0
    assert backward["mean_difference"] == pytest.approx(-forward["mean_difference"])
    assert backward["ci_high"] == pytest.approx(-forward["ci_low"])
    with pytest.raises(ValueError, match="axis 0"):
        paired_bootstrap(np.ones((2, 3)), np.ones((2, 3)))


def test_mean_std_by_hand():
    # (1, 2, 3): mean 2, sample variance ((1)^2 + 0 + 1^2) / 2 = 1
    assert mean_std([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "n": 3}
    assert mean_std([5.0]) == {"mean": 5.0, "std": 0.0, "n": 1}


def test_cocos_summary_by_hand():
    # batch 1: negatives (1, 3) -> per-query mean 2, sum 4; no_gradient (0, 1) -> share 1/2, count 1
    # batch 2: negatives (2, 2, 2) -> mean 2, sum 6;     no_gradient (0, 0, 1) -> share 1/3, count 1
    # over batches: negatives mean 2 +- 0, sums 5 +- sqrt(2); share 5/12 +- (1/6)/sqrt(2); count 1 +- 0
    batches = [
        {"contributing_negatives": np.array([1, 3]), "no_gradient": np.array([0, 1])},
        {"contributing_negatives": np.array([2, 2, 2]), "no_gradient": np.array([False, False, True])},
    ]
    summary = cocos_summary(batches)
    negatives, no_gradient = summary["contributing_negatives"], summary["no_gradient"]
    assert negatives["per_query_mean"] == 2.0 and negatives["per_query_std"] == 0.0
    assert negatives["per_batch_sum_mean"] == 5.0 and negatives["per_batch_sum_std"] == pytest.approx(
        math.sqrt(2)
    )
    assert no_gradient["per_query_mean"] == pytest.approx(5 / 12)
    assert no_gradient["per_query_std"] == pytest.approx((1 / 6) / math.sqrt(2))
    assert no_gradient["per_batch_sum_mean"] == 1.0 and no_gradient["n_batches"] == 2
    with pytest.raises(ValueError, match="same diagnostics"):
        cocos_summary([batches[0], {"no_gradient": np.array([1])}])
