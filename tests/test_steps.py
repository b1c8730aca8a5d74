"""The plain functions behind the tasks, on tiny data, without Luigi."""

from __future__ import annotations

import errno
import os
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from common.hashing import stable_hash
from models.doc2vec import infer_vectors
from pipeline.config.checks import RunConfigurationError
from pipeline.config.plan import resolve_plan
from pipeline.config.variant_spec import VariantError
from pipeline.config.variants import VARIANTS
from pipeline.steps.doc2vec import Doc2VecSettings, document_vectors, train_doc2vec
from pipeline.steps.neighbors import annoy_neighbor_table, exact_neighbors, recall_against_exact
from pipeline.steps.splits import assign_splits
from pipeline.steps.text import PAD, UNK, encode_texts, tokenize
from pipeline.steps.word_vectors import WordVectorSettings, train_word_vectors
from task_engine.outputs import DiskFullError, atomic_directory, save_array, save_array_blocks


def test_splits_are_80_10_10_and_stable_when_data_is_added():
    ids = [f"pair-{i}" for i in range(5000)]
    first = assign_splits(pd.DataFrame({"pair_id": ids}))
    shares = first["split"].value_counts(normalize=True)
    assert abs(shares["train"] - 0.8) < 0.02 and abs(shares["val"] - 0.1) < 0.015
    grown = assign_splits(pd.DataFrame({"pair_id": ids[::-1] + [f"new-{i}" for i in range(1000)]}))
    merged = first.merge(grown, on="pair_id", suffixes=("_old", "_new"))
    assert (merged["split_old"] == merged["split_new"]).all()


def test_splits_keep_groups_together_and_respect_given_splits():
    frame = pd.DataFrame(
        {
            "pair_id": [f"c{i}" for i in range(300)],
            "group_id": [f"img{i // 5}" for i in range(300)],
            "split": [None] * 295 + ["test"] * 5,
        }
    )
    out = assign_splits(frame)
    assert (out.groupby("group_id")["split"].nunique() == 1).all()
    assert (out["split"].iloc[-5:] == "test").all()


def test_tokenize_and_encode():
    assert tokenize("The U.S. Supreme Court's ruling, 2019!") == [
        "the",
        "u",
        "s",
        "supreme",
        "court's",
        "ruling",
        "2019",
    ]
    ids, lengths = encode_texts([["a", "b", "zzz"], [], ["b"] * 10], {"a": 2, "b": 3}, max_tokens=4)
    assert ids.tolist() == [[2, 3, UNK, PAD], [UNK, PAD, PAD, PAD], [3, 3, 3, 3]]
    assert lengths.tolist() == [3, 1, 4]


def _topic_corpus(n: int = 300) -> list[list[str]]:
    rng = np.random.default_rng(0)
    topics = [
        ["court", "judge", "ruling", "justice", "appeal", "verdict"],
        ["border", "wall", "migrants", "asylum", "visa", "patrol"],
    ]
    background = ["the", "news", "said", "on", "in", "a", "of", "today"]
    return [list(rng.choice(topics[i % 2], size=10)) + list(rng.choice(background, size=6)) for i in range(n)]


def _same_topic_gap(vectors: np.ndarray, offset: int) -> float:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = unit @ unit.T
    topic = (np.arange(len(vectors)) + offset) % 2
    same = topic[:, None] == topic[None, :]
    return float(similarity[same].mean() - similarity[~same].mean())


def test_doc2vec_is_reproducible_and_separates_topics():
    corpus = _topic_corpus()
    train, other = corpus[:250], corpus[250:]
    settings = Doc2VecSettings(vector_size=16, window=3, min_count=2, epochs=40, infer_epochs=40)
    model_a = train_doc2vec(train, settings, seed=3)
    model_b = train_doc2vec(train, settings, seed=3)
    train_a, other_a = document_vectors(model_a, train, other, settings.infer_epochs)
    train_b, other_b = document_vectors(model_b, train, other, settings.infer_epochs)
    np.testing.assert_array_equal(train_a, train_b)
    np.testing.assert_array_equal(other_a, other_b)
    # an inferred vector depends on its text only, not on what was inferred before it
    np.testing.assert_array_equal(infer_vectors(model_a, other[1:2], 40)[0], other_a[1])
    assert _same_topic_gap(train_a, 0) > 0.5
    assert _same_topic_gap(other_a, 250) > 0.5


def test_doc2vec_guards_empty_vocabulary():
    with pytest.raises(ValueError, match="lower doc2vec min_count"):
        train_doc2vec([["one"], ["two"]], Doc2VecSettings(min_count=20), seed=0)


def test_word_vectors_vocabulary_from_train_only():
    corpus = _topic_corpus()
    vocab, matrix = train_word_vectors(
        corpus, WordVectorSettings(vector_size=8, min_count=2, epochs=2), seed=0
    )
    assert set(vocab) == {w for doc in corpus for w in doc}
    assert min(vocab.values()) == 2 and matrix.shape == (len(vocab) + 2, 8)
    assert not matrix[PAD].any() and matrix[UNK].any()


def test_annoy_table_excludes_self_and_matches_exact_search():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    table = annoy_neighbor_table(vectors, k=10, n_trees=30, seed=0)
    assert table.neighbors.shape == (300, 10)
    assert not (table.neighbors == np.arange(300)[:, None]).any()
    recall = recall_against_exact(vectors, table.neighbors, n_queries=100)
    assert recall["recall_at_k"] > 0.9
    assert table.settings["metric"] == "angular" and table.settings["n_trees"] == 30
    exact = exact_neighbors(vectors, np.arange(3), 10)
    assert set(exact[0]) == set(exact_neighbors(vectors, np.array([0]), 10)[0])


def test_annoy_table_caps_k_at_n_minus_one():
    vectors = np.eye(4, dtype=np.float32) + 0.01
    table = annoy_neighbor_table(vectors, k=200, n_trees=5)
    assert table.neighbors.shape == (4, 3) and table.settings["k"] == 3


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    final = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_directory(final) as work:
        (work / "half.txt").write_text("x")
        raise RuntimeError("killed")
    assert not final.exists()
    with atomic_directory(final, resume=True) as work:
        assert (work / "half.txt").exists(), "a resumable task finds what the killed run left"
    assert (final / "half.txt").exists()


@pytest.mark.parametrize("shape, dtype", [((300, 7), np.float32), ((130, 4, 3, 3), np.float16)])
def test_an_array_saved_block_by_block_is_the_file_save_array_writes(tmp_path, shape, dtype):
    """TrunkFeatures writes its features batch by batch through a memory map: same bytes as one np.save."""
    array = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    save_array(tmp_path / "whole.npy", array)
    blocks = (array[start : start + 64] for start in range(0, len(array), 64))
    assert save_array_blocks(tmp_path / "blocks.npy", len(array), blocks) == (shape, np.dtype(dtype))
    assert (tmp_path / "blocks.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()


def test_block_writes_refuse_a_wrong_row_count_and_name_a_full_disk(tmp_path, monkeypatch):
    blocks = [np.zeros((4, 2), np.float32)] * 3
    for rows, message in [(13, "12 rows written, 13 expected"), (11, "more than the 11 rows expected")]:
        with pytest.raises(ValueError, match=message):
            save_array_blocks(tmp_path / "a.npy", rows, iter(blocks))
    with pytest.raises(ValueError, match="no rows to write to a.npy"):
        save_array_blocks(tmp_path / "a.npy", 0, [])

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(DiskFullError, match=r"no space left on device while writing .*a\.npy"):
        save_array_blocks(tmp_path / "a.npy", 12, iter(blocks))
    assert list(tmp_path.iterdir()) == [], "no temp file or partial array left"


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


def resolve_variant(name: str, point: dict | None = None, profile: str = "paper"):
    """Variant ``name`` as a run of ``profile`` builds it (the paper profile sets no loss defaults), with a
    trial's ``point`` on top."""
    return resolve_plan(profile, grid=[name]).variant(name, point)


def test_variant_overrides_change_only_the_named_loss():
    spec = resolve_variant("ours", {"within_modality": {"text_weight": 0.7}})
    assert spec.losses[1].params["text_weight"] == 0.7
    assert VARIANTS["ours"].losses[1].params["text_weight"] == 0.2, "the registry entry is not mutated"
    assert spec.as_dict()["losses"][1]["params"]["alpha"] == 0.7, "hashed under the paper's symbol: no path moved"
    with pytest.raises(VariantError, match="does not match"):
        resolve_variant("ang_np_sym", {"within_modality": {"text_weight": 0.7}})


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"within_modality": {"alpah": 0.7}}, r"unknown parameter\(s\) of loss 'within_modality' \['alpah'\]; valid: \[.*'text_weight'"),
        ({"train": {"learning_rat": 0.1}}, r"unknown training setting\(s\) \['learning_rat'\]; valid: \[.*'learning_rate'"),
        ({"model_options": {"num_embed": 2}}, r"unknown model option\(s\) of 'vse' \['num_embed'\]"),
        ({"neighbor_source": "txt"}, r"neighbor_source 'txt' is unknown; valid: \('text', 'image', None\)"),
    ],
)
def test_a_typo_in_an_override_is_refused_when_the_variant_is_built_naming_the_valid_keys(overrides, named):
    with pytest.raises(VariantError, match=named):
        resolve_variant("ours", overrides)


def test_a_search_space_names_real_settings_and_its_trials_honour_one_budget():
    from pipeline.config.variant_spec import SearchSpace

    with pytest.raises(VariantError, match="unknown training setting"):
        replace(VARIANTS["ours"], search_space=SearchSpace({"train.learnin_rate": (1e-3,)}))
    space = SearchSpace({"train.learning_rate": (3e-4, 1e-3, 3e-3), "angular.alpha_degrees": (30.0, 45.0)})
    replace(VARIANTS["ours"], search_space=space)  # both paths exist for Ours
    assert len(space.points()) == 6 and space.points()[0] == {"angular": {"alpha_degrees": 30.0}, "train": {"learning_rate": 3e-4}}
    drawn = space.trials(3, seed=0)
    assert len(drawn) == 3 and drawn == space.trials(3, seed=0) and all(p in space.grid() for p in drawn)
    assert space.trials(6, seed=0) == space.grid()
    with pytest.raises(VariantError, match="exceeds this search space's 6 points"):
        space.trials(7, seed=0)
    with pytest.raises(VariantError, match="train.epochs is no tuning knob"):
        replace(VARIANTS["ours"], search_space=SearchSpace({"train.epochs": (10, 20)}))
    with pytest.raises(VariantError, match="several joined by"):
        SearchSpace({"angular.alpha_degrees+within_modality": (30.0,)})


def test_variant_train_changes_reach_the_train_settings(tmp_path):
    from pipeline.tasks.training import Train

    task = Train(profile="smoke", variant="ours", run_root=str(tmp_path), set=("variants.ours.train.neighbor_mode=extra_rows",))
    assert task.train_settings().neighbor_mode == "extra_rows"
    assert task.config()["train"]["neighbor_mode"] == "extra_rows"
    assert Train(profile="smoke", variant="ours", run_root=str(tmp_path)).config()["train"]["neighbor_mode"] == "in_batch"
    trial = Train(profile="smoke", variant="ours", run_root=str(tmp_path), point={"train": {"neighbor_mode": "extra_rows"}})
    assert trial.config() == task.config(), "a trial's point and a run's change of the same setting are one run"
    with pytest.raises(RunConfigurationError, match="--point train.nonsense: train has no setting 'nonsense'"):
        Train(profile="smoke", variant="ours", run_root=str(tmp_path), point={"train": {"nonsense": 1}})
    assert list(tmp_path.iterdir()) == [], "planning writes nothing: the first task that runs writes the plan"


def test_every_registered_loss_is_selectable_as_a_variant():
    from models.losses import LOSSES

    for name in LOSSES:
        spec = resolve_variant(f"loss_{name}")
        assert name in spec.loss_names()
        spec.build_losses()


def test_profile_loss_defaults_fill_unset_parameters_and_overrides_win():
    assert resolve_variant("pvse", profile="demo").losses[0].params == {"max_violation": False}
    assert resolve_variant("pvse").losses[0].params == {}, "the paper profile keeps PVSE's hardest negative"
    overridden = resolve_variant("pvse", {"pvse_mil": {"max_violation": True}}, profile="demo")
    assert overridden.losses[0].params == {"max_violation": True}
    assert resolve_variant("ours", profile="demo") == resolve_variant("ours")
