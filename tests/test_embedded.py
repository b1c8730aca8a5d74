"""The embedded dataset: determinism, manifest validity, topic/motif design, injected duplicates, and the
claim of the dataset card that text gives the topic away better than the image motif, which beats chance."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageDraw

from benchmarks.embedded_guessability import topic_guessability
from data_recipes import build_recipe
from data_recipes.embedded import (
    BOILERPLATE_TEXTS,
    MAX_WORDS,
    MIN_WORDS,
    MOTIF_PAINTERS,
    MOTIF_PALETTES,
    MOTIF_PHRASES,
    MOTIFS,
    NEAR_DUPLICATE_MIN_JACCARD,
    TOPIC_MOTIFS,
    TOPIC_VOCAB,
    TOPICS,
    build,
    shingle_jaccard,
    word_shingles,
    words,
)
from data_recipes.manifest import check_manifest_columns

N_PAIRS = 480


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    return build(None, tmp_path_factory.mktemp("embedded"), n_pairs=N_PAIRS, seed=3)


def _file_digests(paths: list[str]) -> list[str]:
    return [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]


def test_same_seed_gives_byte_identical_outputs_and_another_seed_differs(tmp_path: Path) -> None:
    first = build(None, tmp_path / "a", n_pairs=60, seed=7, image_size=32)
    second = build(None, tmp_path / "b", n_pairs=60, seed=7, image_size=32)
    other = build(None, tmp_path / "c", n_pairs=60, seed=8, image_size=32)

    assert first.manifest["text"].tolist() == second.manifest["text"].tolist()
    assert first.manifest["pair_id"].tolist() == second.manifest["pair_id"].tolist()
    pd.testing.assert_frame_equal(first.ground_truth, second.ground_truth)
    assert _file_digests(first.manifest["image_path"].tolist()) == _file_digests(
        second.manifest["image_path"].tolist()
    )
    assert first.manifest["text"].tolist() != other.manifest["text"].tolist()
    assert _file_digests(first.manifest["image_path"].tolist()) != _file_digests(
        other.manifest["image_path"].tolist()
    )


def test_manifest_is_valid_and_holds_no_ground_truth(built) -> None:
    manifest = check_manifest_columns(built.manifest)
    assert list(manifest.columns) == ["pair_id", "image_path", "text"]
    assert len(manifest) == N_PAIRS and manifest["pair_id"].is_unique
    assert all(re.fullmatch(r"emb-\d{6}", pair_id) for pair_id in manifest["pair_id"])
    for path in manifest["image_path"].iloc[:25]:
        assert Path(path).is_absolute()
        with Image.open(path) as image:
            assert image.mode == "RGB" and image.size == (64, 64)
    assert all(Path(p).is_file() for p in manifest["image_path"])
    assert list(built.ground_truth.columns) == ["pair_id", "topic", "dup_cluster", "kind", "motif"]
    assert built.ground_truth["pair_id"].tolist() == manifest["pair_id"].tolist()
    # no ground-truth value may ride along in the manifest under any column
    assert not set(built.ground_truth.columns[1:]) & set(manifest.columns)


def test_build_through_the_recipe_registry(tmp_path: Path) -> None:
    result = build_recipe("embedded", None, tmp_path, n_pairs=40, image_size=16)
    assert len(result.manifest) == 40 and len(result.ground_truth) == 40


def test_texts_have_two_sentences_within_word_bounds_and_do_not_repeat(built) -> None:
    lengths = [len(words(text)) for text in built.manifest["text"]]
    assert MIN_WORDS <= min(lengths) and max(lengths) <= MAX_WORDS
    originals = built.manifest["text"][built.ground_truth["kind"] == "original"]
    assert originals.is_unique
    assert all(text.count(". ") >= 1 and text.endswith(".") for text in originals)


def test_every_motif_serves_two_or_three_topics_and_every_topic_has_three_motifs() -> None:
    assert set(MOTIFS) == set(MOTIF_PAINTERS) == set(MOTIF_PALETTES) == set(MOTIF_PHRASES)
    assert all(2 <= len(topics) <= 3 for topics in MOTIFS.values())
    for topic in TOPICS:
        motifs = [motif for motif, _ in TOPIC_MOTIFS[topic]]
        assert len(set(motifs)) >= 3
        assert sum(weight for _, weight in TOPIC_MOTIFS[topic]) == pytest.approx(1.0)
    # scales of justice illustrate abortion, same-sex marriage and immigration (Thomas & Kovashka, Fig. 2)
    assert set(MOTIFS["scales"]) == {"abortion", "same_sex_marriage", "immigration"}


def test_topic_vocabularies_are_large_and_mostly_their_own() -> None:
    vocab = {
        topic: {w for phrases in slots.values() for p in phrases for w in words(p)}
        for topic, slots in TOPIC_VOCAB.items()
    }
    for topic, own in vocab.items():
        others = set().union(*(v for t, v in vocab.items() if t != topic))
        assert len(own) >= 50, topic
        assert len(own - others) >= 0.6 * len(own), topic


def test_every_motif_painter_draws_a_substantial_shape() -> None:
    for motif, painter in MOTIF_PAINTERS.items():
        layer = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
        colours = [(*rgb, 255) for rgb in MOTIF_PALETTES[motif]]
        painter(ImageDraw.Draw(layer), 64, colours)
        covered = float(np.mean(np.asarray(layer)[:, :, 3] > 0))
        assert 0.1 < covered < 0.95, f"{motif} covers {covered:.0%} of its layer"


def test_injected_duplicates_have_the_requested_shares(built) -> None:
    kinds = Counter(built.ground_truth["kind"])
    assert kinds["boilerplate"] == round(N_PAIRS * 0.05)
    assert kinds["near_duplicate"] == round(N_PAIRS * 0.05)
    assert kinds["original"] == N_PAIRS - kinds["boilerplate"] - kinds["near_duplicate"]
    assert built.ground_truth.loc[built.ground_truth["kind"] == "near_duplicate", "dup_cluster"].notna().all()


def test_boilerplate_clusters_are_identical_notices_over_many_images(built) -> None:
    pairs = built.manifest.merge(built.ground_truth, on="pair_id")
    boilerplate = pairs[pairs["kind"] == "boilerplate"]
    for cluster, members in boilerplate.groupby("dup_cluster"):
        assert cluster.startswith("bp-") and len(members) >= 2
        assert members["text"].nunique() == 1 and members["text"].iloc[0] in BOILERPLATE_TEXTS
        assert members["image_path"].is_unique
    assert not pairs.loc[pairs["kind"] != "boilerplate", "text"].isin(BOILERPLATE_TEXTS).any()


def test_near_duplicate_clusters_hold_one_original_and_close_copies(built) -> None:
    pairs = built.manifest.merge(built.ground_truth, on="pair_id")
    clusters = pairs[pairs["dup_cluster"].fillna("").str.startswith("nd-")]
    assert clusters["dup_cluster"].nunique() >= 5
    for _, members in clusters.groupby("dup_cluster"):
        original = members[members["kind"] == "original"]
        copies = members[members["kind"] == "near_duplicate"]
        assert len(original) == 1 and len(copies) >= 1
        assert members["topic"].nunique() == 1
        for copy in copies["text"]:
            assert copy != original["text"].iloc[0]
            assert shingle_jaccard(copy, original["text"].iloc[0]) >= NEAR_DUPLICATE_MIN_JACCARD


def test_texts_outside_a_cluster_stay_below_any_dedup_threshold(built) -> None:
    pairs = built.manifest.merge(built.ground_truth, on="pair_id")
    shingles = [word_shingles(text) for text in pairs["text"]]
    cluster = pairs["dup_cluster"].fillna("").tolist()
    highest = max(
        len(shingles[i] & shingles[j]) / len(shingles[i] | shingles[j])
        for i, j in itertools.combinations(range(len(shingles)), 2)
        if not (cluster[i] and cluster[i] == cluster[j])
    )
    assert highest < 0.5


@pytest.mark.slow
def test_topic_is_guessed_from_text_better_than_from_motif_better_than_chance(built) -> None:
    figures = topic_guessability(built, seed=0)
    assert figures["n_topics"] == len(TOPICS)
    assert figures["text_naive_bayes"] > figures["image_motif_rule"] + 0.1
    assert figures["image_motif_rule"] > 2 * max(figures["chance_uniform"], figures["chance_majority"])
    assert figures["image_pixels_logistic"] > figures["chance_uniform"]


@pytest.mark.parametrize(
    "options",
    [
        {"n_pairs": 5},
        {"seed": -1},
        {"boilerplate_share": 0.7},
        {"near_duplicate_share": -0.1},
        {"image_size": 8},
    ],
)
def test_build_rejects_unusable_options(tmp_path: Path, options: dict) -> None:
    with pytest.raises(ValueError):
        build(None, tmp_path, **options)
