"""Growing data gives the same dataset as building it at once: a ``pairs`` table prepared whole, and the same
rows as shard A then shard B (``--shards``), keep exactly the same pairs, rejects, duplicates and splits.

The table straddles every check that looks beyond one row: a placeholder image behind 6 paths in A and 4 in
B (10 = the threshold only together), a pair_id of A repeated in B (once for a kept row, once for a row A
rejected), a B text duplicating an A text with a smaller id than A's (one-shot dedup keeps the smallest id),
and a B text duplicating the text of an A row the placeholder rejects once B arrives.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline import Deduplicate, PrepareDataset, PrepareShard, Split
from task_engine.outputs import output_lock, remove_abandoned_partials
from tests.luigi_runs import build

pytestmark = pytest.mark.slow

SUCCESS = luigi.execution_summary.LuigiStatusCode.SUCCESS
WORDS = [f"w{i}" for i in range(400)]
BUDGET = 0.3


def _text(rng: np.random.Generator) -> str:
    # 12 words drawn from 400: two such texts share almost no word 3-shingle, so only planted ones are duplicates
    return " ".join(rng.choice(WORDS, size=12, replace=False))


def _image(folder: Path, name: str, rng: np.random.Generator, pixels: np.ndarray | None = None) -> str:
    pixels = rng.integers(0, 255, (24, 24, 3), dtype=np.uint8) if pixels is None else pixels
    Image.fromarray(pixels).save(folder / name)
    return name


def _tables(root: Path) -> tuple[list[dict], list[dict]]:
    """The rows of shard A and shard B, their images written under ``root/raw_a`` and ``root/raw_b``."""
    rng = np.random.default_rng(0)
    gone = np.full((24, 24, 3), 200, dtype=np.uint8)
    gone[8:16] = 90  # "photo no longer available": the same pixels behind every placeholder path
    rows: dict[str, list[dict]] = {"a": [], "b": []}
    for shard, n_good, n_placeholder in (("a", 100, 6), ("b", 60, 4)):
        folder = root / f"raw_{shard}"
        folder.mkdir(parents=True)
        for i in range(n_good):
            row = {
                "pair_id": f"{shard}-{i:02d}",
                "image_path": _image(folder, f"{i}.png", rng),
                "text": _text(rng),
            }
            rows[shard].append(row)
        for i in range(n_placeholder):
            name = _image(folder, f"gone{i}.png", rng, gone)
            rows[shard].append({"pair_id": f"{shard}-ph{i}", "image_path": name, "text": _text(rng)})
    a, b = rows["a"], rows["b"]
    text_of = {row["pair_id"]: row["text"] for row in a}
    (root / "raw_a" / "page.png").write_text("<html>gone</html>")
    png = (root / "raw_b" / "0.png").read_bytes()
    (root / "raw_b" / "cut.png").write_bytes(png[: len(png) // 2])
    a += [
        {
            "pair_id": "a-dup-of-a03",
            "image_path": _image(root / "raw_a", "d1.png", rng),
            "text": text_of["a-03"],
        },
        {"pair_id": "a-bad", "image_path": "page.png", "text": _text(rng)},
    ]
    b += [
        {
            "pair_id": "b-dup-of-a05",
            "image_path": _image(root / "raw_b", "d1.png", rng),
            "text": text_of["a-05"],
        },
        # a smaller id than a-10's: the one-shot build keeps this one and drops a-10
        {"pair_id": "0-early", "image_path": _image(root / "raw_b", "d2.png", rng), "text": text_of["a-10"]},
        # a-ph1 becomes a placeholder only with B: then nothing duplicates this text any more
        {
            "pair_id": "b-dup-of-aph1",
            "image_path": _image(root / "raw_b", "d3.png", rng),
            "text": text_of["a-ph1"],
        },
        {"pair_id": "a-07", "image_path": _image(root / "raw_b", "d4.png", rng), "text": _text(rng)},
        {"pair_id": "a-bad", "image_path": _image(root / "raw_b", "d5.png", rng), "text": _text(rng)},
        {"pair_id": "b-cut", "image_path": "cut.png", "text": _text(rng)},
    ]
    return a, b


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    a, b = _tables(root)
    pd.DataFrame(a).to_csv(root / "raw_a" / "pairs.csv", index=False)
    pd.DataFrame(b).to_csv(root / "raw_b" / "pairs.csv", index=False)
    # the one-shot table: every row in arrival order, every image in one folder
    whole = root / "raw_whole"
    whole.mkdir()
    for shard, rows in (("a", a), ("b", b)):
        for path in (root / f"raw_{shard}").iterdir():
            if path.name != "pairs.csv":
                (whole / f"{shard}_{path.name}").write_bytes(path.read_bytes())
        for row in rows:
            row["image_path"] = f"{shard}_{row['image_path']}"
    pd.DataFrame([*a, *b]).to_csv(whole / "pairs.csv", index=False)

    common = {"profile": "smoke", "dataset": "pairs", "reject_budget": BUDGET}
    once = Split(run_root=str(root / "once"), raw_dir=str(whole), **common)
    result, _ = build([once])
    assert result.status == SUCCESS, result.summary_text
    grown_root = root / "grown"
    first = Split(run_root=str(grown_root), raw_dir=str(root / "raw_a"), **common)
    result, _ = build([first])
    assert result.status == SUCCESS, result.summary_text
    abandoned = grown_root / "PrepareDataset" / "0123456789ab.partial"
    abandoned.mkdir()
    grown = Split(
        run_root=str(grown_root), raw_dir=str(root / "raw_a"), shards=[str(root / "raw_b")], **common
    )
    result, ran = build([grown])
    assert result.status == SUCCESS, result.summary_text
    return {"root": root, "once": once, "grown": grown, "ran": ran, "abandoned": abandoned}


def _rejects(task: Split) -> Counter:
    rejects = task.clone(PrepareDataset).load("rejects")
    return Counter(zip(rejects["pair_id"], rejects["reason"], strict=True))


def test_grown_dataset_keeps_the_one_shot_pairs_rejects_duplicates_and_splits(built):
    once, grown = built["once"], built["grown"]
    expected_rejects = Counter(
        {
            **{(f"a-ph{i}", "placeholder_image"): 1 for i in range(6)},
            **{(f"b-ph{i}", "placeholder_image"): 1 for i in range(4)},
            ("a-bad", "not_an_image"): 1,
            ("a-bad", "duplicate_pair_id"): 1,
            ("a-07", "duplicate_pair_id"): 1,
            ("b-cut", "truncated_image"): 1,
        }
    )
    assert _rejects(once) == expected_rejects
    assert _rejects(grown) == expected_rejects
    reports = [t.clone(PrepareDataset).load("report") for t in (once, grown)]
    assert [(r["n_input"], r["n_kept"], r["n_rejected"]) for r in reports] == [(178, 164, 14)] * 2
    assert reports[1]["placeholders"] == {
        "n_placeholder_images": 1,
        "placeholder_paths": 10,
        "placeholder_pairs": 10,
    }
    # every count adds up to what was read: each shard's and the whole dataset's (issue 32)
    for report in reports:
        assert report["n_kept"] + report["n_rejected"] == report["n_input"]
        assert all(s["n_kept"] + s["n_rejected"] == s["n_input"] for s in report["shards"])
        assert sum(s["n_kept"] for s in report["shards"]) == report["n_kept"]
    # every shard alone had fewer than 10 placeholder paths: no shard rejected them on its own
    assert [s["image_cache"]["n_placeholder_images"] for s in reports[1]["shards"]] == [0, 0]

    clusters = [t.clone(Deduplicate).load("clusters") for t in (once, grown)]
    assert (
        clusters[0]
        == clusters[1]
        == [
            ["0-early", "a-10"],
            ["a-03", "a-dup-of-a03"],
            ["a-05", "b-dup-of-a05"],
        ]
    )
    splits = [t.manifest().set_index("pair_id") for t in (once, grown)]
    assert len(splits[0]) == 161 and "0-early" in splits[0].index and "a-10" not in splits[0].index
    assert "b-dup-of-aph1" in splits[0].index
    pd.testing.assert_frame_equal(splits[0][["text", "split"]], splits[1][["text", "split"]])
    dedup_report = grown.clone(Deduplicate).load("report")
    # only B's texts were hashed; A's signatures came from the first build's index
    assert dedup_report["n_signatures_computed"] == 63 and dedup_report["n_reused"] == 101
    assert dedup_report["n_indexed_before"] == 107  # a-ph0..5 too: placeholders only once B arrived
    assert dedup_report["n_removed_earlier_pairs"] == 2  # a-dup-of-a03, as before, and a-10
    assert dedup_report["n_displaced"] == 1  # a-10, kept by A's build, displaced by 0-early

    images = [t.clone(PrepareDataset).images() for t in (once, grown)]
    for pair_id in ("a-00", "a-99", "b-00", "0-early"):
        rows = [int(s.loc[pair_id, "cache_row"]) for s in splits]
        np.testing.assert_array_equal(images[0][rows[0]], images[1][rows[1]])


def test_growth_decodes_only_the_new_shard_and_clears_an_abandoned_partial(built):
    shards_ran = [t for t in built["ran"].ran if isinstance(t, PrepareShard)]
    assert [Path(t.shard_dir).name for t in shards_ran] == ["raw_b"]
    assert not built["abandoned"].exists()


def test_the_reject_budget_is_a_gate_not_part_of_the_decoded_shards(built):
    grown = built["grown"]
    # a larger budget reuses every output: nothing is validated or decoded again
    flags = {name: grown.param_kwargs[name] for name in ("run_root", "profile", "dataset", "raw_dir", "shards")}
    result, ran = build([Split(**flags, reject_budget=0.5)])
    assert result.status == SUCCESS and ran.ran == []
    # B rejects 7 of its 70 rows (10%; 14 of 178 in all, 7.9%): a smaller budget stops the build, without
    # decoding anything
    strict = PrepareDataset(**flags, reject_budget=0.08)
    assert not strict.complete()
    result, ran = build([strict])
    assert result.status == luigi.execution_summary.LuigiStatusCode.FAILED and ran.ran == []
    assert not list(strict.output_dir().parent.glob("*.partial"))
    report = json.loads((strict.output_dir() / "dataset_report.json").read_text())
    assert [s["n_rejected"] for s in report["shards"]] == [7, 7]


def test_only_partials_nobody_builds_are_removed(tmp_path):
    family = tmp_path / "Task"
    abandoned, building = family / "aaaa.partial", family / "bbbb.partial"
    abandoned.mkdir(parents=True)
    building.mkdir()
    with output_lock(family / "bbbb"):
        removed = remove_abandoned_partials(family, keep=family / "cccc")
    assert removed == [abandoned] and not abandoned.exists() and building.exists()
    assert remove_abandoned_partials(family, keep=family / "bbbb") == []
    assert building.exists() and not list(family.glob("*.lock"))
