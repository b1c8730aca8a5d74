"""Where i' comes from (the authors' first-10 non-duplicate neighbors), the in_batch negative mask, early
stopping and frozen-trunk training — on tiny hand-built data."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.batching import Batch, BatchSampler
from models.losses import build_loss
from models.settings import TrainSettings
from models.training import PairData, Trainer, TrainingData, cross_modal_group_ids
from models.training.run import build_training_run, record_in_memory
from pipeline.steps import neighbors as neighbor_steps
from pipeline.steps.neighbors import (
    DUPLICATE_DISTANCE,
    angular_distances,
    annoy_neighbor_table,
    same_topic_share,
    sampling_pool,
)
from tests.test_training import SETTINGS, TINY_WORDS


def test_angular_distances_in_row_blocks_equal_the_loop_reference(monkeypatch):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(37, 6))
    table = rng.integers(0, 37, size=(37, 4))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    reference = np.array(
        [
            [np.sqrt(max(0.0, 2 - 2 * unit[row] @ unit[other])) for other in listed]
            for row, listed in enumerate(table)
        ]
    )
    one_shot = angular_distances(vectors, table)
    # a block of 3 rows: 37 rows in 13 blocks, the last one short
    monkeypatch.setattr(neighbor_steps, "DISTANCE_BLOCK_BYTES", 3 * 4 * 6 * 8)
    blocked = angular_distances(vectors, table)
    np.testing.assert_allclose(one_shot, reference, atol=1e-6)
    assert np.array_equal(blocked, one_shot)


def test_sampling_pool_takes_the_first_sample_k_non_duplicates():
    neighbors = np.array([[5, 6, 7, 8, 9, 1], [0, 2, 3, 4, 5, 6]])
    distances = np.array([[0.0, 0.0, 0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], dtype=np.float32)
    pool = sampling_pool(neighbors, distances, sample_k=3)
    # row 0: 5 and 6 sit at distance 0 (copies of the anchor's text) and are skipped
    assert pool.tolist() == [[7, 8, 9], [0, 2, 3]]
    assert sampling_pool(neighbors, distances, None) is neighbors


def test_sampling_pool_repeats_scarce_non_duplicates_and_keeps_all_duplicate_rows():
    neighbors = np.array([[1, 2, 3, 4], [0, 2, 3, 4]])
    distances = np.array([[0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    pool = sampling_pool(neighbors, distances, sample_k=3)
    assert pool.tolist() == [[4, 4, 4], [0, 2, 3]]
    with pytest.raises(ValueError, match="sample_k"):
        sampling_pool(neighbors, distances, 0)


def test_annoy_table_reports_zero_distance_for_an_exact_copy():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    vectors[1] = vectors[0]
    table = annoy_neighbor_table(vectors, k=5, n_trees=10, seed=0)
    assert table.neighbors[0, 0] == 1 and table.distances[0, 0] <= DUPLICATE_DISTANCE
    assert (table.distances[:, 1:] >= table.distances[:, :-1] - 1e-5).all(), "nearest first"
    assert sampling_pool(table.neighbors, table.distances, 2)[0].tolist() == table.neighbors[0, 1:3].tolist()


def test_sampler_draws_i_prime_only_from_the_pool():
    n, k, sample_k = 60, 20, 4
    rng = np.random.default_rng(1)
    neighbors = np.stack([rng.permutation(np.delete(np.arange(n), i))[:k] for i in range(n)])
    distances = np.sort(rng.uniform(0.1, 1.0, (n, k)), axis=1).astype(np.float32)
    distances[:, 0] = 0.0  # every row's nearest entry is a duplicate
    pool = sampling_pool(neighbors, distances, sample_k)
    for mode in ("in_batch", "extra_rows"):
        sampler = BatchSampler(np.arange(n), 12, np.random.default_rng(0), pool, mode)
        for _ in range(5):
            for batch in sampler.epoch():
                anchors, drawn = batch.rows[batch.neighbor_of], batch.rows[batch.neighbor_rows]
                for anchor, neighbor in zip(anchors, drawn, strict=True):
                    assert neighbor in neighbors[anchor, 1 : sample_k + 1]


def test_same_topic_share_counts_table_entries():
    topics = np.array(["a", "a", "b", "b"])
    assert same_topic_share(topics, np.array([[1, 2], [0, 3], [3, 0], [2, 1]])) == 0.5


def test_in_batch_anchor_and_neighbor_are_not_negatives():
    # rows 0-2 are anchors, rows 3-5 their sampled neighbors (in_batch: all six are cross-modal rows)
    batch = Batch(
        rows=np.arange(6), n_main=6, neighbor_rows=np.array([3, 4, 5]), neighbor_of=np.array([0, 1, 2])
    )
    merged = cross_modal_group_ids(np.array([10, 11, 12, 13, 14, 10]), batch)
    # anchor-neighbor links 0~3, 1~4, 2~5, and rows 0 and 5 already share group 10: two components
    component = {0: "A", 2: "A", 3: "A", 5: "A", 1: "B", 4: "B"}
    for a in range(6):
        for b in range(6):
            assert (merged[a] == merged[b]) == (component[a] == component[b]), (a, b)
    # extra rows lie outside the cross-modal pool: nothing to merge
    extra = Batch(
        rows=np.arange(6), n_main=3, neighbor_rows=np.array([3, 4, 5]), neighbor_of=np.array([0, 1, 2])
    )
    assert cross_modal_group_ids(np.arange(6), extra).tolist() == list(range(6))


def test_masked_cross_pairs_change_the_angular_loss_exactly_as_removing_those_negatives():
    torch.manual_seed(0)
    image = torch.nn.functional.normalize(torch.randn(4, 5), dim=1)
    text = torch.nn.functional.normalize(torch.randn(4, 5), dim=1)
    batch = Batch(rows=np.arange(4), n_main=4, neighbor_rows=np.array([2, 3]), neighbor_of=np.array([0, 1]))
    groups = torch.from_numpy(cross_modal_group_ids(np.arange(4), batch))
    loss = build_loss("angular", symmetric=False)(image=image, text=text, group_ids=groups)[
        "image_to_text_loss"
    ]
    # naive reference: image i against the texts of rows that are neither i nor i's anchor/neighbor
    partner = {0: 2, 2: 0, 1: 3, 3: 1}
    terms = []
    for i in range(4):
        a, p = image[i], text[i]
        logits = [4 * (a + p) @ text[j] - 4 * (a @ p) for j in range(4) if j not in (i, partner[i])]
        terms.append(torch.log1p(torch.exp(torch.stack(logits)).sum()))
    assert torch.allclose(loss, torch.stack(terms).mean(), atol=1e-6)


def feature_data(n: int = 40, width: int = 12) -> PairData:
    rng = np.random.default_rng(0)
    return PairData(
        images=np.zeros((n, 1, 1, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(2, 20, (n, 6)),
        lengths=rng.integers(1, 7, n),
        group_ids=np.arange(n),
        image_features=rng.normal(size=(n, width)).astype(np.float32),
    )


#: the tiny settings on cached features (no flips: a cached feature is not flipped)
FROZEN = replace(SETTINGS, trunk="frozen", horizontal_flip=False)


def frozen_trainer(work_dir, settings: TrainSettings = FROZEN, data: PairData | None = None) -> Trainer:
    """The angular loss on 12-wide cached features (:func:`feature_data`), built as a Train builds its run from the
    record of a frozen-trunk model (32 train pairs, 8 validation pairs)."""
    record = record_in_memory("vse", FROZEN, TINY_WORDS, feature_dim=12)
    pairs = TrainingData(feature_data() if data is None else data, np.arange(32), np.arange(32, 40))
    return build_training_run(record, pairs, settings, [build_loss("angular")], seed=0, work_dir=work_dir).trainer


def test_frozen_trunk_model_holds_no_trunk_and_trains_on_cached_features(tmp_path):
    trainer = frozen_trainer(tmp_path)
    model = trainer.model
    assert model.image_encoder.trunk is None
    assert not any(name.startswith("image_encoder.trunk") for name in model.state_dict())
    before = model.image_encoder.project.weight.detach().clone()
    result = trainer.fit()
    assert len(result.history) == 2
    assert not torch.equal(before, model.image_encoder.project.weight)


def test_frozen_trunk_refuses_flips_and_missing_features(tmp_path):
    with pytest.raises(ValueError, match="horizontal_flip"):
        frozen_trainer(tmp_path, replace(SETTINGS, trunk="frozen"))
    no_features = replace(feature_data(), image_features=None)
    with pytest.raises(ValueError, match="cached trunk features"):
        frozen_trainer(tmp_path, data=no_features)


def test_early_stopping_ends_training_after_patience_epochs_without_improvement(tmp_path):
    settings = replace(FROZEN, epochs=30, early_stopping_patience=2)
    # lr 0: the validation loss never improves after epoch 1 (a rate no run accepts, so set past the settings' check)
    object.__setattr__(settings, "learning_rate", 0.0)
    result = frozen_trainer(tmp_path, settings).fit()
    assert result.best_epoch == 1 and len(result.history) == 3 and result.stopped_early_at == 3
