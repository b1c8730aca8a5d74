"""Incremental rebuilds: a shard of raw data added later is read, validated, cached and deduplicated on its
own; earlier shards are not touched, earlier pairs keep their split, downstream tasks rerun.
"""

from __future__ import annotations

import json
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from data_recipes.image_cache import ShardedImageCache
from pipeline import Deduplicate, FullRun, PrepareDataset, PrepareShard, Split, Train
from pipeline.steps.dedup import deduplicate, deduplicate_into
from pipeline.steps.lsh_index import DedupIndex
from pipeline.tasks.data import stack_shards
from tests.luigi_runs import build

pytestmark = pytest.mark.slow

WORDS = [f"w{i}" for i in range(400)]
SUCCESS = luigi.execution_summary.LuigiStatusCode.SUCCESS


def _text(rng: np.random.Generator) -> str:
    # 12 words drawn from 400: two such texts share almost no word 3-shingle, so only planted ones are duplicates
    return " ".join(rng.choice(WORDS, size=12, replace=False))


def _image(folder: Path, name: str, rng: np.random.Generator) -> str:
    Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / name)
    return name


def _write_shard(folder: Path, prefix: str, n_good: int, seed: int) -> pd.DataFrame:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rows = [
        {"pair_id": f"{prefix}-{i:02d}", "image_path": _image(folder, f"{i}.png", rng), "text": _text(rng)}
        for i in range(n_good)
    ]
    frame = pd.DataFrame(rows)
    frame.to_csv(folder / "pairs.csv", index=False)
    return frame


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """FullRun on shard A, then on A + B: B holds 60 new pairs, a copy of an A text, a copy of a B text, an A
    pair_id and an HTML page saved as .png.
    """
    root = tmp_path_factory.mktemp("incremental")
    shard_a = _write_shard(root / "raw_a", "a", n_good=120, seed=0)
    shard_b = _write_shard(root / "raw_b", "b", n_good=60, seed=1)
    rng = np.random.default_rng(2)
    (root / "raw_b" / "page.png").write_text("<html>gone</html>")
    extra = [
        {
            "pair_id": "b-dup-of-a03",
            "image_path": _image(root / "raw_b", "x1.png", rng),
            "text": shard_a.text[3],
        },
        {"pair_id": "b-05x", "image_path": _image(root / "raw_b", "x2.png", rng), "text": shard_b.text[5]},
        {"pair_id": "a-07", "image_path": _image(root / "raw_b", "x3.png", rng), "text": _text(rng)},
        {"pair_id": "b-html", "image_path": "page.png", "text": _text(rng)},
    ]
    pd.concat([shard_b, pd.DataFrame(extra)]).to_csv(root / "raw_b" / "pairs.csv", index=False)
    common = {
        "profile": "smoke",
        "run_root": str(root / "runs"),
        "dataset": "pairs",
        "variants": ["ours"],
        "protocol": "shared",
    }
    first = FullRun(raw_dir=str(root / "raw_a"), **common)
    result, _ = build([first])
    assert result.status == SUCCESS, result.summary_text
    shard_a_task = first.clone(PrepareShard, shard_dir=str(root / "raw_a"))
    a_cache = shard_a_task.output_dir() / "images.npy"
    before = {
        "a_meta": shard_a_task.meta(),
        "a_cache_stat": (a_cache.stat().st_ino, a_cache.stat().st_mtime_ns),
        "split": first.clone(Split).manifest().set_index("pair_id")["split"],
    }
    second = FullRun(raw_dir=str(root / "raw_a"), shards=[str(root / "raw_b")], **common)
    result, ran = build([second])
    assert result.status == SUCCESS, result.summary_text
    return {
        "root": root,
        "a_text_07": shard_a.text[7],
        "first": first,
        "second": second,
        "ran": ran,
        "before": before,
        "a_cache": a_cache,
    }


def test_only_the_new_shard_is_read_and_cached(runs):
    ran = runs["ran"]
    shards_ran = [t for t in ran.ran if isinstance(t, PrepareShard)]
    assert [Path(t.shard_dir).name for t in shards_ran] == ["raw_b"]
    a_cache = runs["a_cache"]
    assert (a_cache.stat().st_ino, a_cache.stat().st_mtime_ns) == runs["before"]["a_cache_stat"]
    a_task = runs["second"].clone(PrepareShard, shard_dir=str(runs["root"] / "raw_a"))
    assert a_task.meta() == runs["before"]["a_meta"], "shard A's output was not rewritten"
    b_report = shards_ran[0].meta()["summary"]
    # B's own 64 rows were read and its 64 distinct images decoded, none of A's 120
    assert b_report["n_input"] == 64 and b_report["image_cache"]["n_distinct_images"] == 64
    assert b_report["rejects_by_reason"] == {"not_an_image": 1}


def test_downstream_tasks_rerun_on_the_grown_dataset(runs):
    families = runs["ran"].families()
    for family in (
        "PrepareDataset",
        "Deduplicate",
        "Split",
        "TrainDoc2Vec",
        "NeighborTables",
        "Train",
        "Report",
    ):
        assert family in families, family
    assert families.count("PrepareShard") == 1 and families.count("Deduplicate") == 1
    assert {t.variant for t in runs["ran"].ran if isinstance(t, Train)} == {"ours"}


def test_rejects_of_every_shard_are_counted_with_the_cross_shard_id_clash(runs):
    prepared = runs["second"].clone(PrepareDataset)
    report = json.loads((prepared.output_dir() / "dataset_report.json").read_text())
    assert report["n_input"] == 184 and report["n_shards"] == 2
    assert report["rejects_by_reason"] == {"not_an_image": 1, "duplicate_pair_id": 1}
    assert report["n_kept"] == 182
    rejects = pd.read_csv(prepared.output_dir() / "rejects.csv")
    assert sorted(zip(rejects.pair_id, rejects.reason, strict=True)) == [
        ("a-07", "duplicate_pair_id"),
        ("b-html", "not_an_image"),
    ]
    manifest = prepared.manifest()
    # the first a-07 (shard A's) is the one kept, with A's text
    assert (manifest.pair_id == "a-07").sum() == 1
    assert manifest.set_index("pair_id").loc["a-07", "text"] == runs["a_text_07"]


def test_new_pairs_are_deduplicated_against_the_persisted_index_only(runs):
    dedup = runs["second"].clone(Deduplicate)
    report = json.loads((dedup.output_dir() / "dedup_report.json").read_text())
    # only B's 62 new texts were hashed; A's 120 came from the previous run's index
    assert report["n_indexed_before"] == 120 and report["n_signatures_computed"] == 62
    assert report["n_removed_as_duplicates_of_earlier_shards"] == 1
    kept = set(dedup.manifest().pair_id)
    assert "b-dup-of-a03" not in kept and "a-03" in kept
    assert "b-05x" not in kept and "b-05" in kept
    assert len(kept) == 180
    # the same kept set as deduplicating everything at once
    stacked = runs["second"].clone(PrepareDataset).manifest()
    assert set(deduplicate(stacked, threshold=0.7).kept.pair_id) == kept


def test_earlier_pairs_keep_their_split_and_their_own_image(runs):
    after = runs["second"].clone(Split).manifest().set_index("pair_id")
    before = runs["before"]["split"]
    assert after.loc[before.index, "split"].tolist() == before.tolist()
    images = runs["second"].clone(PrepareDataset).images()
    for pair_id, folder, name in (("a-12", "raw_a", "12.png"), ("b-12", "raw_b", "12.png")):
        original = np.asarray(Image.open(runs["root"] / folder / name).convert("RGB"), dtype=float)
        cached = images[int(after.loc[pair_id, "cache_row"])].astype(float)
        assert cached.shape == (32, 32, 3)
        assert abs(cached.mean() - original.mean()) < 3.0


def test_a_later_pair_never_displaces_an_earlier_one():
    index = DedupIndex(threshold=0.7, num_perm=64)
    text = "the council voted late on tuesday to close the old bridge for repairs"
    first = deduplicate_into(index, pd.DataFrame({"pair_id": ["z-late-id"], "text": [text]}))
    assert first.kept.pair_id.tolist() == ["z-late-id"]
    second = deduplicate_into(index, pd.DataFrame({"pair_id": ["a-early-id", "m-2"], "text": [text, text]}))
    # one-shot dedup would keep the smallest id, a-early-id; here the indexed pair stays and both new go
    assert second.kept.empty and second.report["n_signatures_computed"] == 2
    assert index.clusters() == [["a-early-id", "m-2", "z-late-id"]]


def test_stack_shards_offsets_cache_rows_and_rejects_repeated_ids():
    a = pd.DataFrame({"pair_id": ["x", "y"], "text": ["1", "2"], "cache_row": [1, 0]})
    b = pd.DataFrame({"pair_id": ["y", "z"], "text": ["3", "4"], "cache_row": [0, 2]})
    stacked = stack_shards([a, b], cache_lengths=[2, 3])
    assert stacked.manifest.pair_id.tolist() == ["x", "y", "z"]
    assert stacked.manifest.cache_row.tolist() == [1, 0, 4]
    assert stacked.rejects[["pair_id", "reason"]].values.tolist() == [["y", "duplicate_pair_id"]]


def test_sharded_image_cache_reads_across_shards_in_any_order():
    first = np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3)
    second = 100 + np.arange(3 * 2 * 2 * 3, dtype=np.uint8).reshape(3, 2, 2, 3)
    cache = ShardedImageCache([first, second])
    assert cache.shape == (5, 2, 2, 3) and len(cache) == 5
    whole = np.concatenate([first, second])
    rows = np.array([4, 0, 2, 1, 3, 2])
    np.testing.assert_array_equal(cache[rows], whole[rows])
    np.testing.assert_array_equal(cache[3], whole[3])
    with pytest.raises(IndexError):
        cache[np.array([5])]
    with pytest.raises(ValueError, match="image size"):
        ShardedImageCache([first, np.zeros((1, 3, 3, 3), dtype=np.uint8)])
