"""Neighbor preservation at several k with its chance level, the headline k, within-modality topic
precision, and how Evaluate reports them. Hand-worked cases in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest

import evaluation.embeddings as evaluation_embeddings
from evaluation.evaluate import HEADLINE_PRESERVATION, evaluate_embeddings
from evaluation.neighborhoods import (
    chance_preservation,
    headline_preservation_k,
    nearest_neighbor_mask,
    nearest_neighbor_ranking,
    neighbor_preservation,
    neighbor_preservation_at_ks,
    preservation_from_rankings,
    within_modality_topic_precision,
)


def on_circle(degrees: list[float]) -> np.ndarray:
    radians = np.deg2rad(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


# Five samples A..E on the unit circle; cosine similarity falls with the angle between two samples, so
# neighbors are ordered by angular distance (no two distances of a sample are equal: no ties).
# Learned angles A 0, B 20, C 60, D 130, E 250. Distances and nearest-first lists:
#   A: B 20, C 60, E 110, D 130  -> B C E D        B: A 20, C 40, D 110, E 130 -> A C D E
#   C: B 40, A 60, D 70, E 170   -> B A D E        D: C 70, B 110, E 120, A 130 -> C B E A
#   E: A 110, D 120, B 130, C 170 -> A D B C
# Reference angles A 0, B 100, C 35, D 150, E 290:
#   A: C 35, E 70, B 100, D 150  -> C E B D        B: D 50, C 65, A 100, E 170 -> D C A E
#   C: A 35, B 65, E 105, D 115  -> A B E D        D: B 50, C 115, E 140, A 150 -> B C E A
#   E: A 70, C 105, D 140, B 170 -> A C D B
# Overlap shares per sample (A, B, C, D, E):
#   k=1: 0, 0, 0, 0, 1               -> mean 1/5 = 0.2,   chance 1/4,  lift 0.8
#   k=2: 1/2, 1/2, 1, 1, 1/2         -> mean 3.5/5 = 0.7, chance 2/4,  lift 1.4
#   k=3: 1, 1, 2/3, 1, 2/3           -> mean 13/15,       chance 3/4,  lift 52/45
#   k=4: every other sample, 1 each  -> mean 1,           chance 1,    lift 1
LEARNED_5 = on_circle([0, 20, 60, 130, 250])
REFERENCE_5 = on_circle([0, 100, 35, 150, 290])
LEARNED_RANKING_5 = [[1, 2, 4, 3], [0, 2, 3, 4], [1, 0, 3, 4], [2, 1, 4, 0], [0, 3, 1, 2]]
REFERENCE_RANKING_5 = [[2, 4, 1, 3], [3, 2, 0, 4], [0, 1, 4, 3], [1, 2, 4, 0], [0, 2, 3, 1]]
PER_SAMPLE_5 = {
    1: [0, 0, 0, 0, 1],
    2: [0.5, 0.5, 1, 1, 0.5],
    3: [1, 1, 2 / 3, 1, 2 / 3],
    4: [1, 1, 1, 1, 1],
}


def random_unit(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_rankings_by_hand():
    np.testing.assert_array_equal(nearest_neighbor_ranking(LEARNED_5, 4), LEARNED_RANKING_5)
    np.testing.assert_array_equal(nearest_neighbor_ranking(REFERENCE_5 * 7.0, 4), REFERENCE_RANKING_5)
    # narrower rankings are the first columns
    np.testing.assert_array_equal(nearest_neighbor_ranking(LEARNED_5, 2), np.array(LEARNED_RANKING_5)[:, :2])


def test_preservation_at_several_k_by_hand_with_chance_and_lift():
    result = neighbor_preservation_at_ks(LEARNED_5, REFERENCE_5, [3, 1, 4, 2])
    assert list(result) == [1, 2, 3, 4]
    for k, expected in PER_SAMPLE_5.items():
        np.testing.assert_allclose(result[k]["per_sample"], expected)
        assert result[k]["mean"] == pytest.approx(np.mean(expected))
        assert result[k]["chance"] == pytest.approx(k / 4)
        assert result[k]["lift"] == pytest.approx(np.mean(expected) / (k / 4))
    assert result[1]["mean"] == pytest.approx(0.2) and result[2]["lift"] == pytest.approx(1.4)
    assert result[3]["mean"] == pytest.approx(13 / 15)
    # the same numbers straight from the hand-listed rankings
    from_rankings = preservation_from_rankings(LEARNED_RANKING_5, REFERENCE_RANKING_5, [1, 2, 3, 4])
    for k, expected in PER_SAMPLE_5.items():
        np.testing.assert_allclose(from_rankings[k], expected)


def test_chance_level_is_what_random_embeddings_keep():
    assert chance_preservation(200, 401) == 0.5
    # independent random spaces: preservation at every k is about k / (n - 1)
    learned, reference = random_unit((1000, 16), 1), random_unit((1000, 16), 2)
    result = neighbor_preservation_at_ks(learned, reference, [20, 100, 500])
    for k, entry in result.items():
        assert entry["chance"] == k / 999
        assert entry["mean"] == pytest.approx(k / 999, rel=0.1)
        assert entry["lift"] == pytest.approx(1.0, rel=0.1)
    with pytest.raises(ValueError, match="between 1 and n - 1"):
        chance_preservation(5, 5)


@pytest.mark.parametrize("shape", [(150, 6), (90, 3, 5)])
def test_several_k_equal_single_k_neighbor_preservation(shape, monkeypatch):
    learned = np.random.default_rng(3).normal(size=shape)
    reference = np.random.default_rng(4).normal(size=(shape[0], 4))
    ks = [1, 2, 7, 30, shape[0] - 1]
    result = neighbor_preservation_at_ks(learned, reference, ks)
    for k in ks:
        single = neighbor_preservation(learned, reference, k)
        np.testing.assert_array_equal(result[k]["per_sample"], single["per_sample"])
        assert result[k]["mean"] == single["mean"]
    # a shared reference ranking gives the same numbers, and so does a tiny chunk budget
    ranking = nearest_neighbor_ranking(reference, max(ks))
    shared = neighbor_preservation_at_ks(learned, None, ks, reference_ranking=ranking)
    monkeypatch.setattr(evaluation_embeddings, "_CHUNK_ENTRIES", 50)
    chunked = neighbor_preservation_at_ks(learned, reference, ks)
    for k in ks:
        np.testing.assert_array_equal(shared[k]["per_sample"], result[k]["per_sample"])
        np.testing.assert_array_equal(chunked[k]["per_sample"], result[k]["per_sample"])


def test_several_k_break_exact_ties_like_single_k():
    # few distinct directions: many exact ties, broken by the lower index in both functions
    rng = np.random.default_rng(5)
    learned = rng.integers(0, 3, size=(40, 3)) + 0.5
    reference = rng.integers(0, 2, size=(40, 3)) + 0.5
    ks = [1, 3, 10, 39]
    result = neighbor_preservation_at_ks(learned, reference, ks)
    for k in ks:
        np.testing.assert_array_equal(
            result[k]["per_sample"], neighbor_preservation(learned, reference, k)["per_sample"]
        )
    ranking = nearest_neighbor_ranking(learned, 39)
    for j in (1, 5, 20, 39):
        mask = np.zeros((40, 40), dtype=bool)
        np.put_along_axis(mask, ranking[:, :j], True, axis=1)
        np.testing.assert_array_equal(mask, nearest_neighbor_mask(learned, j))


def test_several_k_guards():
    with pytest.raises(ValueError, match="between 1 and n - 1"):
        neighbor_preservation_at_ks(LEARNED_5, REFERENCE_5, [5])
    with pytest.raises(ValueError, match="rows"):
        neighbor_preservation_at_ks(LEARNED_5, REFERENCE_5[:4], [1])
    with pytest.raises(ValueError, match="reference_ranking"):
        neighbor_preservation_at_ks(LEARNED_5, None, [3], reference_ranking=np.zeros((5, 2), dtype=int))
    with pytest.raises(ValueError, match="ranking width"):
        preservation_from_rankings(LEARNED_RANKING_5, REFERENCE_RANKING_5, [5])


def test_headline_k_keeps_the_papers_share_of_the_test_items():
    ks = (5, 10, 20, 50, 200)
    # the paper: 200 of 24.6k-46k test items; 0.006 * 46000 = 276 -> 200
    assert headline_preservation_k(ks, 46_001, 0.006) == 200
    # 0.006 * 1000 = 6 -> 5 (share 0.005)
    assert headline_preservation_k(ks, 1_001, 0.006) == 5
    # 0.006 * 10000 = 60 -> 50
    assert headline_preservation_k(ks, 10_001, 0.006) == 50
    # ks of n - 1 or more are every other item, never a candidate: 20 is kept out on 20 items
    assert (
        headline_preservation_k((20, 50), 21, 0.9) == 20 and headline_preservation_k((20, 50), 20, 0.9) == 17
    )
    # equally close (2/8 and 6/8 are both 0.25 from 0.5): the smaller k
    assert headline_preservation_k((6, 2), 9, 0.5) == 2
    # no k of the profile fits: the k in 1..n-1 closest to the paper's share
    assert headline_preservation_k(ks, 4, 0.006) == 1
    assert headline_preservation_k(ks, 5, 0.5) == 2
    with pytest.raises(ValueError, match="positive share"):
        headline_preservation_k(ks, 100, 0.0)


def test_within_modality_topic_precision_by_hand():
    # topics: A x, B x, C y, D y, E x; learned nearest lists above
    #   k=1: A->B x, B->A x, C->B (C is y), D->C y, E->A x  -> 4/5
    #   k=2: A {B, C}: 1/2, B {A, C}: 1/2, C {B, A}: 0, D {C, B}: 1/2, E {A, D}: 1/2 -> 2/5
    topics = np.array(["x", "x", "y", "y", "x"])
    assert within_modality_topic_precision(LEARNED_5, topics, 1) == pytest.approx(0.8)
    assert within_modality_topic_precision(LEARNED_5, topics, 2) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="between 1 and n - 1"):
        within_modality_topic_precision(LEARNED_5, topics, 5)
    with pytest.raises(ValueError, match="one topic per sample"):
        within_modality_topic_precision(LEARNED_5, topics[:4], 1)


def test_evaluate_reports_preservation_at_every_k_and_saves_the_headline_per_sample():
    n = 60
    image, text = random_unit((n, 8), 6), random_unit((n, 8), 7)
    doc_vectors = np.random.default_rng(8).normal(size=(n, 5))
    topics = np.arange(n) % 4
    result, arrays = evaluate_embeddings(
        image,
        text,
        doc_vectors,
        5,
        2,
        200,
        topics=topics,
        topic_k=5,
        preservation_ks=(5, 10, 20, 50, 200),
        paper_preservation_ratio=0.006,
    )
    at_k = result["neighbor_preservation_at_k"]
    # 0.006 * 59 = 0.35: k = 5 is the closest usable k; 200 is capped at n - 1 = 59
    assert at_k["headline_k"] == 5 and at_k["paper_k"] == 59 and at_k["n"] == n
    assert list(at_k["ks"]) == ["5", "10", "20", "50", "59"]
    for key, entry in at_k["ks"].items():
        k = int(key)
        assert entry["chance"] == k / 59
        for modality, embeddings in (("image", image), ("text", text)):
            expected = neighbor_preservation(embeddings, doc_vectors, k)["mean"]
            assert entry[modality]["mean"] == expected
            assert entry[modality]["lift"] == pytest.approx(expected / (k / 59))
    # the legacy entry: the paper's k, capped, as Table 3 always reported it
    assert result["neighbor_preservation"]["image"] == {"mean": 1.0, "k_used": 59, "k_requested": 200}
    for modality, embeddings in (("image", image), ("text", text)):
        np.testing.assert_array_equal(
            arrays[HEADLINE_PRESERVATION[modality]],
            neighbor_preservation(embeddings, doc_vectors, 5)["per_sample"],
        )
    assert set(arrays) == {"i2t_hits", "t2i_hits", *HEADLINE_PRESERVATION.values()}
    topic = result["topic_precision"]
    assert topic["within_k"] == 5
    assert topic["i2i"] == within_modality_topic_precision(image, topics, 5)
    assert topic["t2t"] == within_modality_topic_precision(text, topics, 5)


def test_evaluate_keeps_the_paper_k_when_it_is_not_among_the_ks():
    n = 30
    image, text = random_unit((n, 4), 9), random_unit((n, 4), 10)
    doc_vectors = np.random.default_rng(11).normal(size=(n, 3))
    result, _ = evaluate_embeddings(image, text, doc_vectors, 3, 1, 7, preservation_ks=(5, 10, 20, 50))
    at_k = result["neighbor_preservation_at_k"]
    assert list(at_k["ks"]) == ["5", "7", "10", "20"] and at_k["headline_k"] == 5
    assert (
        result["neighbor_preservation"]["text"]["mean"]
        == neighbor_preservation(text, doc_vectors, 7)["mean"]
    )
    assert "topic_precision" not in result
