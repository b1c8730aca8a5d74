"""Near-duplicate removal: exact datasketch signatures, LSH equivalence, order-free clusters, metrics."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest
from datasketch import LeanMinHash, MinHash, MinHashLSH

from pipeline.config.run_settings import RunSettings
from pipeline.steps import dedup, minhash
from pipeline.steps.dedup import deduplicate
from pipeline.steps.dedup_quality import dedup_precision_recall
from pipeline.steps.lsh_index import DedupIndex, default_lsh_threshold
from pipeline.steps.lsh_store import load_dedup_index, save_dedup_index
from pipeline.steps.minhash import minhash_signatures, text_shingles

VOCAB = [f"w{i}" for i in range(400)]


def find_duplicate_clusters(
    pair_ids: list[str],
    signatures: np.ndarray,
    threshold: float,
    num_perm: int,
    *,
    seed: int = 1,
    lsh_threshold: float | None = None,
) -> list[list[str]]:
    """All clusters of a one-shot index: the reference the incremental index is compared with (moved here
    from pipeline.steps.dedup, which only tests used)."""
    return DedupIndex(threshold, num_perm, seed, lsh_threshold).add_and_find(list(pair_ids), signatures)


def random_texts(n: int, seed: int, words: int = 12) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(VOCAB, words)) for _ in range(n)]


def mutate(text: str, n_changes: int, rng: np.random.Generator) -> str:
    words = text.split()
    for _ in range(n_changes):
        words[rng.integers(len(words))] = str(rng.choice(VOCAB))
    return " ".join(words)


def corpus_with_planted_duplicates(seed: int = 0) -> tuple[list[str], list[str], dict[str, int]]:
    """200 random 20-word texts; 20 get 1-3 near copies (a word changed, case and punctuation noise)."""
    rng = np.random.default_rng(seed)
    texts = random_texts(200, seed, words=20)
    ids = [f"doc{i:04d}" for i in range(len(texts))]
    cluster_of = {}
    for source in range(20):
        cluster_of[ids[source]] = source
        for copy in range(1 + source % 3):
            noisy = mutate(texts[source], 1, rng).upper().replace(" ", ", ", 1) + "!"
            ids.append(f"dup{source:02d}_{copy}")
            texts.append(noisy)
            cluster_of[ids[-1]] = source
    return ids, texts, cluster_of


def test_shingles_normalise_case_and_punctuation_and_short_texts_use_their_words():
    assert text_shingles("A dog, runs FAST!", 3) == ["a dog runs", "dog runs fast"]
    assert text_shingles("Hello world", 3) == ["hello", "world"]
    assert text_shingles("Don't stop", 1) == ["dont", "stop"]
    assert text_shingles("?!", 3) == []


@pytest.mark.parametrize(("num_perm", "seed", "shingle_size"), [(128, 1, 3), (64, 7, 2)])
def test_signatures_equal_datasketch_minhash_exactly(monkeypatch, num_perm, seed, shingle_size):
    monkeypatch.setattr(minhash, "_BATCH_SHINGLES", 50)  # force many batches, incl. boundaries mid-corpus
    odd_texts = ["", "Hi", "a b", "Ünïcödé wörds, here and there", "x " * 40]
    texts = random_texts(150, seed=3, words=8) + odd_texts
    signatures = minhash_signatures(texts, num_perm=num_perm, seed=seed, shingle_size=shingle_size)
    assert signatures.shape == (len(texts), num_perm)
    for text, row in zip(texts, signatures, strict=True):
        reference = MinHash(num_perm=num_perm, seed=seed)
        for shingle in text_shingles(text, shingle_size):
            reference.update(shingle.encode("utf-8"))
        np.testing.assert_array_equal(row, reference.hashvalues)
        assert row.dtype == reference.hashvalues.dtype


@pytest.mark.parametrize("lsh_threshold", [0.6, None])
def test_clusters_match_a_datasketch_lsh_insert_query_pipeline(lsh_threshold):
    """Same clusters as datasketch MinHashLSH insert/query + estimated-Jaccard check + union-find."""
    ids, texts, _ = corpus_with_planted_duplicates()
    texts[5] = texts[6]  # exact repeats take the linked-representative path
    texts[7] = texts[6]
    signatures = minhash_signatures(texts)
    banding = default_lsh_threshold(0.6) if lsh_threshold is None else lsh_threshold
    lsh = MinHashLSH(threshold=banding, num_perm=128)
    sketches = [LeanMinHash(seed=1, hashvalues=row, scheme=minhash.MINHASH_SCHEME) for row in signatures]
    for i, sketch in enumerate(sketches):
        lsh.insert(i, sketch)
    parent = list(range(len(ids)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, sketch in enumerate(sketches):
        for j in lsh.query(sketch):
            if j != i and sketch.jaccard(sketches[j]) >= 0.6:
                parent[max(root(i), root(j))] = min(root(i), root(j))
    groups: dict[int, list[str]] = {}
    for i, pair_id in enumerate(ids):
        groups.setdefault(root(i), []).append(pair_id)
    expected = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    assert len(expected) >= 15
    assert find_duplicate_clusters(ids, signatures, 0.6, 128, lsh_threshold=lsh_threshold) == expected


def test_planted_clusters_are_found_and_scored():
    ids, texts, cluster_of = corpus_with_planted_duplicates()
    manifest = pd.DataFrame({"pair_id": ids, "image_path": "x.jpg", "text": texts})
    result = deduplicate(manifest, threshold=0.6)
    planted = {source: sorted(p for p, c in cluster_of.items() if c == source) for source in range(20)}
    for members in planted.values():
        assert members in result.clusters
    truth = pd.DataFrame({"pair_id": ids, "dup_cluster": [cluster_of.get(p) for p in ids]})
    scores = dedup_precision_recall(result.clusters, truth)
    assert scores["recall"] == 1.0 and scores["precision"] == 1.0
    assert result.report["n_input"] == len(ids)
    assert result.report["n_removed"] == len(ids) - 200
    assert result.report["n_kept"] == 200
    assert result.report["cluster_size_histogram"] == {"2": 7, "3": 7, "4": 6}
    assert len(result.report["example_clusters"]) == 5
    assert result.kept["pair_id"].tolist() == [f"doc{i:04d}" for i in range(200)]  # smallest id kept


def test_clusters_and_kept_set_do_not_depend_on_input_order():
    ids, texts, _ = corpus_with_planted_duplicates(seed=4)
    manifest = pd.DataFrame({"pair_id": ids, "text": texts})
    first = deduplicate(manifest, threshold=0.6)
    for seed in range(3):
        shuffled = manifest.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        again = deduplicate(shuffled, threshold=0.6)
        assert again.clusters == first.clusters
        assert set(again.kept["pair_id"]) == set(first.kept["pair_id"])


def test_texts_without_shingles_are_never_duplicates():
    manifest = pd.DataFrame({"pair_id": ["a", "b", "c"], "text": ["!!!", "...", "two words"]})
    result = deduplicate(manifest, threshold=0.6)
    assert result.clusters == [] and len(result.kept) == 3
    assert result.report["n_without_shingles"] == 2


def test_precision_recall_on_a_hand_worked_example():
    # injected: {a, b, c} -> pairs ab ac bc; {d, e} -> de; f and g never injected
    truth = pd.DataFrame({"pair_id": list("abcdefg"), "dup_cluster": [1, 1, 1, 2, 2, None, np.nan]})
    # found: {a, b} -> ab (right); {c, f} -> cf (wrong); {d, e, g} -> de (right), dg, eg (wrong)
    found = [["a", "b"], ["c", "f"], ["d", "e", "g"]]
    scores = dedup_precision_recall(found, truth)
    assert scores["n_found_pairs"] == 5 and scores["n_true_pairs"] == 4 and scores["n_correct_pairs"] == 2
    assert scores["precision"] == pytest.approx(2 / 5)
    assert scores["recall"] == pytest.approx(2 / 4)
    assert scores["f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    indexed = truth.set_index("pair_id")  # ground truth as recipes return it: indexed by pair_id
    assert dedup_precision_recall(found, indexed) == scores


def test_incremental_index_finds_what_a_full_run_finds(tmp_path):
    ids, texts, _ = corpus_with_planted_duplicates(seed=5)
    signatures = minhash_signatures(texts)
    full = find_duplicate_clusters(ids, signatures, 0.6, 128)

    order = np.random.default_rng(0).permutation(len(ids))
    first, second = order[:150], order[150:]
    index = DedupIndex(0.6, 128)
    index.add_and_find([ids[i] for i in first], signatures[first])
    save_dedup_index(index, tmp_path / "dedup_index.npz")
    reloaded = load_dedup_index(tmp_path / "dedup_index.npz")
    touched = reloaded.add_and_find([ids[i] for i in second], signatures[second])

    assert reloaded.clusters() == full
    new_ids = {ids[i] for i in second}
    assert touched == [c for c in full if new_ids & set(c)]
    with pytest.raises(ValueError, match="already in the index"):
        reloaded.add_and_find([ids[0]], signatures[:1])


def test_deduplicate_defaults_are_the_run_s_settings():
    """The one-shot call's defaults are read from the settings' declaration, so it removes what the pipeline
    removes."""
    settings = RunSettings().dedup
    defaults = inspect.signature(dedup.deduplicate).parameters
    assert (defaults["threshold"].default, defaults["num_perm"].default, defaults["shingle_size"].default) == (
        settings.threshold,
        settings.num_perm,
        settings.shingle_size,
    )
