"""Every registered loss trains one epoch on the smoke pipeline's data without NaN."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import luigi
import numpy as np
import pytest

from data_recipes.manifest import integer_group_ids
from models.losses import LOSSES, build_loss
from models.training import PairData, TrainingData, pick_device
from models.training.run import build_training_run, record_in_memory
from pipeline import NeighborTables, PrepareDataset, Split, TrainWordVectors
from pipeline.config.profiles import PROFILES
from pipeline.steps.text import encode_texts, tokenize
from pipeline.tasks.train_inputs import load_pair_data
from tests.fixtures.recipes.make_fixtures import make_fixture

SMOKE = PROFILES.get("smoke").settings()

pytestmark = pytest.mark.slow
# the smoke profile trains on cached frozen-trunk features, which this test does not compute; the losses see
# embeddings either way, so here the trunk trains on the cached pixels
SETTINGS = replace(SMOKE.train, epochs=1, trunk="finetune", selection="val_loss")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The smoke pipeline up to the neighbor tables (what Train reads)."""
    common = {"profile": "smoke", "run_root": str(tmp_path_factory.mktemp("runs"))}
    tasks = [Split(**common), PrepareDataset(**common), TrainWordVectors(**common), NeighborTables(**common)]
    assert luigi.build(tasks, local_scheduler=True, log_level="WARNING")
    split, prepared, words, neighbors = tasks
    data, manifest = load_pair_data(
        {"split": split, "prepared": prepared, "words": words}, SETTINGS.max_text_tokens
    )
    _, vectors = words.vocabulary()
    positions = {name: np.flatnonzero(manifest["split"].to_numpy() == name) for name in ("train", "val")}
    return data, vectors, positions, neighbors.load("neighbors")


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """The COCO-format fixture (several captions per image) through PrepareDataset, for group losses."""
    raw = make_fixture("coco", tmp_path_factory.mktemp("coco_raw"))
    task = PrepareDataset(
        profile="smoke", run_root=str(tmp_path_factory.mktemp("runs")), dataset="coco", raw_dir=str(raw)
    )
    assert luigi.build([task], local_scheduler=True, log_level="WARNING")
    manifest = task.manifest()
    token_lists = [tokenize(text) for text in manifest["text"]]
    vocab = {word: i + 2 for i, word in enumerate(sorted({w for tokens in token_lists for w in tokens}))}
    tokens, lengths = encode_texts(token_lists, vocab, SETTINGS.max_text_tokens)
    data = PairData(
        task.images(),
        manifest["cache_row"].to_numpy(),
        tokens,
        lengths,
        integer_group_ids(manifest).to_numpy(),
    )
    rng = np.random.default_rng(0)
    vectors = rng.normal(scale=0.1, size=(len(vocab) + 2, SMOKE.word_vectors.vector_size)).astype(np.float32)
    everything = np.arange(len(manifest))
    return data, vectors, {"train": everything, "val": everything}, None


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_loss_trains_one_smoke_epoch_without_nan(name, embedded, grouped, tmp_path):
    loss = build_loss(name)
    data, vectors, positions, table = grouped if "group_mates" in loss.needs else embedded
    model_name = "pvse" if name.startswith("pvse") else "vse"
    losses = [loss]
    if loss.needs_neighbors:  # within-modality terms are used beside a cross-modal loss (Eq. 8)
        losses.insert(0, build_loss("pvse_mil" if model_name == "pvse" else "angular"))
    record = record_in_memory(model_name, SETTINGS, vectors)
    training = TrainingData(data, positions["train"], positions["val"], table if loss.needs_neighbors else None)
    run = build_training_run(
        record, training, SETTINGS, losses, seed=0, work_dir=Path(tmp_path), word_vectors=vectors, device=pick_device()
    )
    history = run.trainer.fit().history
    assert len(history) == 1
    logged = [key for key in history[0] if key.startswith(f"train_{name}.")]
    assert logged, f"{name} logged no sub-loss"
    for key, value in history[0].items():
        assert np.isfinite(value), f"{name}: {key} = {value}"
