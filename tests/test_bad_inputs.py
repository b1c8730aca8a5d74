"""Every kind of bad input of issue 12, in one `pairs` table, through the pipeline's ingestion (PrepareDataset):
each bad row is rejected with its documented reason and an exact count, every good row (non-RGB images
included) survives with its own pixels, and schema problems stop the command with one line and exit 30."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import luigi
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from data_recipes.image_cache import build_image_cache
from pipeline import PrepareDataset
from tests.disks import tmpfs
from tests.fixtures.bad_files import (
    write_empty,
    write_html,
    write_noise,
    write_png_header_only,
    write_truncated,
)
from tests.luigi_runs import build

ROOT = Path(__file__).resolve().parents[1]
LUIGI = Path(sys.executable).with_name("luigi")
N_GOOD = 60
ONE_MEGABYTE_TEXT = ("word " * 210_000).strip()  # 1,049,999 characters


def _non_rgb_images(folder: Path) -> dict[str, Path]:
    """One picture per non-RGB mode the cache converts (kept, never rejected)."""
    rng = np.random.default_rng(7)
    gray = rng.integers(0, 256, (40, 40), dtype=np.uint8)
    made = {
        "cmyk": ("cmyk.jpg", Image.fromarray(rng.integers(0, 256, (40, 40, 4), dtype=np.uint8), "CMYK")),
        "gray": ("gray.png", Image.fromarray(gray, "L")),
        "gray16": ("gray16.png", Image.fromarray(gray.astype(np.uint16) * 257)),
        "rgba": ("rgba.png", Image.fromarray(rng.integers(0, 256, (40, 40, 4), dtype=np.uint8), "RGBA")),
        "palette": ("palette.gif", Image.fromarray(gray, "L").convert("P")),
    }
    paths = {}
    for name, (file, image) in made.items():
        image.save(folder / file)
        paths[name] = folder / file
    return paths


def write_bad_pairs(raw: Path) -> tuple[Path, dict[str, int], list[str]]:
    """A pairs.csv with N_GOOD good rows, five non-RGB images and one of every bad input; returns the table,
    the rejects expected per reason and the pair ids expected to survive."""
    rows: list[dict[str, object]] = []
    for i in range(N_GOOD):
        write_noise(raw / f"good{i}.png", seed=i, size=(40, 40))
        rows.append({"pair_id": f"good{i}", "image_path": f"good{i}.png", "text": f"story {i} about a place"})
    for name, path in _non_rgb_images(raw).items():
        rows.append({"pair_id": name, "image_path": path.name, "text": f"a {name} photograph"})
    bad_images = {
        "zero_byte": (write_empty(raw / "zero.jpg"), "empty_file"),
        "truncated": (write_truncated(raw / "cut.jpg", seed=99), "truncated_image"),
        "html_as_jpeg": (write_html(raw / "page.jpg"), "not_an_image"),
        "huge_header": (write_png_header_only(raw / "huge.png", 9000, 9000), "decompression_bomb"),
        "missing_file": (raw / "never_written.jpg", "missing_image"),
    }
    for pair_id, (path, _) in bad_images.items():
        rows.append({"pair_id": pair_id, "image_path": path.name, "text": f"text of {pair_id}"})
    bad_texts = {
        "empty": ("", "empty_text"),
        "whitespace": (" \t  ", "whitespace_text"),
        "non_utf8": (None, "invalid_utf8"),  # bytes written below
        "one_megabyte": (ONE_MEGABYTE_TEXT, "oversized_text"),
        "nul": ("a text with a \x00 inside", "nul_bytes"),
        # no word in any script: it would train as one unknown word
        "emoji_only": ("🎉🎉 👍", "no_tokens"),
        "punctuation_only": ("... --- !!! ?", "no_tokens"),
    }
    for pair_id, (text, _) in bad_texts.items():
        rows.append(
            {"pair_id": pair_id, "image_path": "good0.png", "text": text if text is not None else "@@"}
        )
    rows.append({"pair_id": "good1", "image_path": "good2.png", "text": "a repeated id"})
    rows.append({"pair_id": "good2", "image_path": "good3.png", "text": "another repeated id"})

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["pair_id", "image_path", "text"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    # a Latin-1 byte that is not UTF-8, as in a table exported by an old tool
    data = buffer.getvalue().encode("utf-8").replace(b"@@", b"caf\xe9 au lait")
    table = raw / "pairs.csv"
    table.write_bytes(data)

    expected = Counter(reason for _, reason in [*bad_images.values(), *bad_texts.values()])
    expected["duplicate_pair_id"] = 2
    survivors = [f"good{i}" for i in range(N_GOOD)] + list(_non_rgb_images(raw))
    return table, expected, survivors


def test_every_bad_input_is_rejected_with_its_reason_and_an_exact_count(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _, expected, survivors = write_bad_pairs(raw)
    task = PrepareDataset(
        profile="smoke", run_root=str(tmp_path / "runs"), dataset="pairs", raw_dir=str(raw), reject_budget=0.5
    )
    result, _ = build([task])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    out = task.output_dir()
    report = json.loads((out / "dataset_report.json").read_text())
    n_bad = sum(expected.values())
    assert report["n_input"] == len(survivors) + n_bad
    assert report["n_kept"] == len(survivors)
    assert report["rejects_by_reason"] == dict(expected)
    rejects = pd.read_csv(out / "rejects.csv", dtype=str, keep_default_na=False)
    assert len(rejects) == n_bad  # nothing lost: kept + rejected == input
    by_id = dict(zip(rejects["pair_id"], rejects["reason"], strict=False))
    assert by_id["non_utf8"] == "invalid_utf8" and by_id["one_megabyte"] == "oversized_text"
    assert by_id["huge_header"] == "decompression_bomb" and by_id["html_as_jpeg"] == "not_an_image"
    assert "max_text_chars=200000" in rejects.set_index("pair_id").loc["one_megabyte", "detail"]

    manifest = pd.read_parquet(out / "manifest.parquet")
    assert sorted(manifest["pair_id"]) == sorted(survivors)
    # the first row with a repeated id keeps its own text and image
    assert manifest.set_index("pair_id").loc["good1", "text"] == "story 1 about a place"
    images = task.images()
    for name in ("cmyk", "gray", "gray16", "rgba", "palette"):
        row = manifest.set_index("pair_id").loc[name, "cache_row"]
        assert images[row].shape == (32, 32, 3) and images[row].dtype == np.uint8


def _run_full_run(raw: Path, run_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LUIGI), "--module", "pipeline", "FullRun", "--profile", "smoke", "--dataset", "pairs",
         "--raw-dir", str(raw), "--run-root", str(run_root)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _pairs_table(raw: Path, header: str, rows: list[str], name: str = "pairs.csv") -> None:
    for i in range(len(rows)):
        write_noise(raw / f"{i}.png", seed=i, size=(24, 24))
    (raw / name).write_text("\n".join([header, *rows]) + "\n")


SCHEMA_PROBLEMS = {
    "missing_column": (
        lambda raw: _pairs_table(raw, "image_path,caption", [f"{i}.png,story {i}" for i in range(4)]),
        "pairs.csv lacks column(s) ['text'] (has ['image_path', 'caption']); rename them or pass",
    ),
    "unknown_split": (
        lambda raw: _pairs_table(
            raw,
            "image_path,text,split",
            [f"{i}.png,story {i},{'tset' if i in (2, 3) else 'train'}" for i in range(5)],
        ),
        "pairs.csv split column holds unknown value(s): 'tset' in 2 row(s), first at row index 2;",
    ),
    "broken_jsonl": (
        lambda raw: (raw / "pairs.jsonl").write_text(
            '{"image_path": "a.png", "text": "t"}\n{"image_path": \n'
        ),
        "pairs.jsonl line 2 is not JSON",
    ),
}


WORDS = (
    "court ruling immigration rally capitol senate vote climate storm flood budget tax school strike".split()
)


def _article(i: int) -> str:
    """A distinct text for row ``i`` (random words: no two rows are near-duplicates for the MinHash dedup)."""
    rng = np.random.default_rng(i)
    return " ".join(rng.choice(WORDS, 12))


def _rows(n: int, text=_article) -> list[str]:  # noqa: ANN001
    return [f"{i}.png,{text(i)}" for i in range(n)]


#: a new user's first tables that cannot make a run: (make the table, the task that stops, its message)
FIRST_TABLE_PROBLEMS = {
    "too_small_to_split": (
        lambda raw: _pairs_table(raw, "image_path,text", _rows(12)),
        "Split",
        "the dataset is too small for the split",
    ),
    "too_small_for_checkpoint_selection": (
        lambda raw: _pairs_table(raw, "image_path,text", _rows(40)),
        "Split",
        "the dataset is too small for the split",
    ),
    "one_text_for_every_pair": (
        lambda raw: _pairs_table(
            raw, "image_path,text", _rows(60, lambda i: "the same article on the ruling")
        ),
        "Split",
        "has 0 pairs after dedup",
    ),
    "unsupported_extension": (
        lambda raw: _pairs_table(raw, "image_path,text", _rows(50), name="pairs.xlsx"),
        "PrepareShard",
        "pairs table pairs.xlsx must end in one of ['.csv', '.jsonl', '.parquet']",
    ),
    "header_only": (
        lambda raw: (raw / "pairs.csv").write_text("image_path,text\n"),
        "PrepareShard",
        "pairs.csv holds no rows",
    ),
    "empty_file": (
        lambda raw: (raw / "pairs.csv").write_text(""),
        "PrepareShard",
        "pairs.csv cannot be read as csv",
    ),
    "every_image_missing": (
        lambda raw: (raw / "pairs.csv").write_text(
            "image_path,text\n" + "\n".join(f"gone{i}.png,{_article(i)}" for i in range(30))
        ),
        "PrepareDataset",
        "rejected 30 of 30 input pairs (100.0%)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("problem", list(FIRST_TABLE_PROBLEMS))
def test_a_first_table_that_cannot_make_a_run_stops_it_with_one_line(tmp_path, problem):
    """Issue 32: each shape ends in one ``ERROR: <Task> failed: ...`` line (exit 30), never a traceback."""
    raw = tmp_path / "raw"
    raw.mkdir()
    make, family, message = FIRST_TABLE_PROBLEMS[problem]
    make(raw)
    tables = [p for p in raw.iterdir() if p.name.startswith("pairs.")]
    result = _run_full_run(tables[0], tmp_path / "runs")
    assert result.returncode == 30, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"ERROR: {family} failed: ") and message in errors[0], errors[0]
    assert "Traceback" not in result.stderr
    if problem == "every_image_missing":
        assert "--reject-budget 1.00" in errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("problem", list(SCHEMA_PROBLEMS))
def test_a_schema_problem_stops_the_command_with_one_line(tmp_path, problem):
    raw = tmp_path / "raw"
    raw.mkdir()
    make, message = SCHEMA_PROBLEMS[problem]
    make(raw)
    result = _run_full_run(raw, tmp_path / "runs")
    assert result.returncode == 30, result.stderr  # [retcode] task_failed
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("ERROR: PrepareShard failed: ") and message in errors[0], errors[0]
    assert "Traceback" not in result.stderr


def test_a_cache_that_does_not_fit_on_the_disk_fails_with_enospc_not_sigbus(tmp_path, monkeypatch):
    """The cache's blocks are reserved before the memory map is written, so a full disk is an error naming
    the cache (a sparse memmap would die of SIGBUS with no message)."""

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for i in range(3):
        write_noise(tmp_path / f"{i}.png", seed=i, size=(24, 24))
    manifest = pd.DataFrame(
        {"pair_id": ["a", "b", "c"], "image_path": [str(tmp_path / f"{i}.png") for i in range(3)]}
    )
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    out = tmp_path / "cache" / "images.npy"
    out.parent.mkdir()
    with pytest.raises(OSError, match=r"no space left on device while writing .*images\.npy") as caught:
        build_image_cache(manifest, 16, out)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(out)
    assert list(out.parent.iterdir()) == [], "no temp file or partial cache left"


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB tmpfs."""
    with tmpfs(tmp_path / "small_disk", "64k") as disk:
        yield disk


@pytest.mark.slow
def test_a_cache_larger_than_the_disk_is_a_named_error_on_a_real_full_disk(tmp_path, small_disk):
    """PrepareDataset with its run root on a 64 KiB disk and a 150 KB image cache (50 images at 32 px): one
    line naming the cache, exit 30, nothing half-written left, where a sparse memory map would be killed
    by SIGBUS (exit -7) half way through."""
    raw = tmp_path / "raw"
    raw.mkdir()
    _pairs_table(raw, "image_path,text", [f"{i}.png,story number {i}" for i in range(50)])
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "PrepareDataset", "--profile", "smoke", "--dataset", "pairs",
         "--raw-dir", str(raw), "--run-root", str(small_disk)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 30, (result.returncode, result.stderr)
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert error.startswith("ERROR: PrepareShard failed: no space left on device while writing ")
    assert "images.npy" in error and "Traceback" not in result.stderr
    assert not list(small_disk.rglob("*.partial")) and not list(small_disk.rglob("*.tmp"))
