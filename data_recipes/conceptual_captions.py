"""Conceptual Captions (Sharma et al., ACL 2018): about 3.3M web images with cleaned alt-text captions,
distributed as URLs only. The images are fetched by the user with img2dataset; this recipe reads
img2dataset's output folder and skips (and counts) what img2dataset marks as failed.

Download
--------
1. https://ai.google.com/research/ConceptualCaptions/download -> ``Train_GCC-training.tsv`` and
   ``Validation_GCC-1.1.0-Validation.tsv``: one pair a line, ``<caption><TAB><url>``, no header.
2. Add a header and fetch the images (img2dataset's ``dataset_examples/cc3m.md``)::

       sed -i '1s/^/caption\\turl\\n/' Train_GCC-training.tsv
       img2dataset --url_list Train_GCC-training.tsv --input_format tsv --url_col url \\
           --caption_col caption --output_format webdataset --output_folder raw_dir/train \\
           --processes_count 16 --thread_count 64 --image_size 256
       # the same for the validation TSV with --output_folder raw_dir/val

   ``--output_format files`` works too. Keep img2dataset's default ``save_metadata``: the per-shard
   ``.parquet`` files are the only record of failed downloads.

::

    raw_dir/                         one img2dataset output folder, or several (e.g. train/, val/)
        00000.tar                    webdataset: 000000000.jpg / .txt / .json per successful sample
        00000/000000000.jpg .txt .json    or files: one folder per shard
        00000.parquet                per shard: one row per URL with key, caption, url, status,
                                     error_message, width, height, ... (``_stats.json`` are ignored)

Format
------
``status`` is ``success``, ``failed_to_download`` or ``failed_to_resize``; only successes are written to
the tar / shard folder. Rows that are not ``success`` are skipped and counted by status in
``notes["skipped"]``. ``key`` (e.g. ``000010005``: shard id then position in the shard) names the sample's
files. Without a parquet the per-sample ``.json`` files are read instead (then failures are not known).
With ``--output_format parquet`` the image bytes are in the parquet's ``jpg`` column.

Images inside tars (or parquet bytes) are extracted once into ``work_dir/images/`` because the pipeline
reads image files by path.

Output
------
``pair_id`` ``cc-<key>``, or ``cc-<folder>-<key>`` when ``raw_dir`` holds several output folders;
``source`` ``<folder>/<shard>``.

Splits
------
A folder named ``train``/``training``, ``val``/``validation`` or ``test`` (or containing such a word, e.g.
``cc3m_val``) names a split. Conceptual Captions publishes only a training and a validation set (its test
set is hidden), so the two downloads name no test split, and the pipeline needs all three. Option
``splits``:

* ``"auto"`` (default): the folders' splits when they name train, val and test; otherwise no ``split``
  column, and the pipeline splits every pair 80/10/10 by hash (Thomas & Kovashka §3.3);
* ``"folders"``: always the folders' splits (rows of a folder naming none are left to the pipeline);
* ``"hash"``: never; the pipeline splits every pair.

``notes["splits"]`` says which was used and ``notes["folder_splits"]`` what each folder names.
"""

from __future__ import annotations

import re
import tarfile
from collections import Counter
from pathlib import Path, PurePosixPath

import pandas as pd
import pyarrow.parquet as pq

from common.bounded_json import RAW_DATA, loads_bounded, read_bounded
from data_recipes.manifest import VALID_SPLITS, RecipeResult, check_manifest_columns, require_raw_dir
from data_recipes.registry import register_recipe

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
METADATA_COLUMNS = ("key", "caption", "url", "status", "error_message")
SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "validation": "val", "test": "test"}
EXTRACTED_DIR = "images"
SPLIT_CHOICES = ("auto", "folders", "hash")
_SHARD = re.compile(r"^\d+$")


def shard_ids(folder: Path) -> list[str]:
    """Shard ids of one img2dataset output folder (from ``<id>.parquet``, ``<id>.tar`` or ``<id>/``)."""
    ids = {
        p.stem
        for p in folder.iterdir()
        if _SHARD.match(p.stem) and (p.suffix in (".parquet", ".tar") or p.is_dir())
    }
    return sorted(ids)


def find_output_folders(raw_dir: Path) -> list[tuple[str | None, Path]]:
    """``[(None, raw_dir)]`` when ``raw_dir`` is an output folder, else ``[(name, subfolder), ...]``."""
    if shard_ids(raw_dir):
        return [(None, raw_dir)]
    return [(p.name, p) for p in sorted(raw_dir.iterdir()) if p.is_dir() and shard_ids(p)]


def split_from_name(name: str | None) -> str | None:
    """``train``/``val``/``test`` when the folder name is, or contains as a word, a split name."""
    if name is None:
        return None
    words = [w for w in re.split(r"[^a-z]+", name.lower()) if w]
    found = {SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS}
    return found.pop() if len(found) == 1 else None


def _normalise_key(key: object) -> str:
    return str(key).strip()


def _by_stem(names: list[str]) -> dict[str, str]:
    """Map a sample key (and, for old numeric keys, its integer value) to its image file name."""
    index: dict[str, str] = {}
    for name in names:
        path = PurePosixPath(name)
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            index[path.stem] = name
            if path.stem.isdigit():
                index.setdefault(str(int(path.stem)), name)
    return index


def _lookup(index: dict[str, str], key: str) -> str | None:
    return index.get(key) or (index.get(str(int(key))) if key.isdigit() else None)


def _read_parquet(path: Path) -> tuple[pd.DataFrame, bool]:
    """The shard's metadata rows; and whether it carries image bytes (``--output_format parquet``)."""
    names = pq.read_schema(path).names
    columns = [c for c in METADATA_COLUMNS if c in names]
    with_bytes = "jpg" in names
    table = pq.read_table(path, columns=columns + (["jpg"] if with_bytes else []))
    return table.to_pandas(), with_bytes


def _write_once(target: Path, payload: bytes) -> None:
    if target.is_file() and target.stat().st_size == len(payload):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(payload)


def _read_tar(tar_path: Path, target_dir: Path) -> tuple[dict[str, str], dict[str, str], list[dict]]:
    """Extract a webdataset shard's images into ``target_dir``; return image index, captions, json records."""
    images: dict[str, str] = {}
    captions: dict[str, str] = {}
    records: list[dict] = []
    with tarfile.open(tar_path) as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = PurePosixPath(member.name).name  # never trust directories inside an archive
            stem, suffix = PurePosixPath(name).stem, PurePosixPath(name).suffix.lower()
            payload = tar.extractfile(member).read()
            if suffix in IMAGE_EXTENSIONS:
                _write_once(target_dir / name, payload)
                images[name] = str(target_dir / name)
            elif suffix == ".txt":
                captions[stem] = payload.decode("utf-8", errors="replace")
            elif suffix == ".json":
                records.append(loads_bounded(payload, f"{member.name} of {tar.name}", RAW_DATA))
    return images, captions, records


def _read_folder(shard_dir: Path) -> tuple[dict[str, str], dict[str, str], list[dict]]:
    """A files-format shard: image paths, captions from ``.txt``, records from ``.json``."""
    images, captions, records = {}, {}, []
    for path in sorted(shard_dir.iterdir()):
        suffix = path.suffix.lower()
        if suffix in IMAGE_EXTENSIONS:
            images[path.name] = str(path)
        elif suffix == ".txt":
            captions[path.stem] = path.read_text(encoding="utf-8", errors="replace")
        elif suffix == ".json":
            records.append(read_bounded(path, RAW_DATA))
    return images, captions, records


def shard_rows(folder: Path, shard: str, part: str | None, extract_dir: Path, skipped: Counter) -> list[dict]:
    """Manifest rows of one shard; failed samples are counted in ``skipped`` by their status."""
    parquet_path, tar_path, shard_dir = folder / f"{shard}.parquet", folder / f"{shard}.tar", folder / shard
    images: dict[str, str] = {}
    captions: dict[str, str] = {}
    records: list[dict] = []
    if tar_path.is_file():
        images, captions, records = _read_tar(tar_path, extract_dir / shard)
    elif shard_dir.is_dir():
        images, captions, records = _read_folder(shard_dir)

    if parquet_path.is_file():
        frame, with_bytes = _read_parquet(parquet_path)
        if with_bytes:
            for key, payload in zip(frame["key"], frame["jpg"], strict=True):
                if payload is not None:
                    name = f"{_normalise_key(key)}.jpg"
                    _write_once(extract_dir / shard / name, payload)
                    images[name] = str(extract_dir / shard / name)
            frame = frame.drop(columns="jpg")
        records = frame.to_dict("records")
    index = _by_stem(list(images))

    rows = []
    for record in records:
        status = record.get("status")
        status = status if isinstance(status, str) else "success"  # per-sample json: successes only
        if status != "success":
            skipped[str(status)] += 1
            continue
        key = _normalise_key(record["key"])
        name = _lookup(index, key)
        caption = record.get("caption")
        if not isinstance(caption, str):  # no caption column (or a null in it): the sample's .txt
            caption = captions.get(key, "")
        prefix = "cc" if part is None else f"cc-{part}"
        rows.append(
            {
                "pair_id": f"{prefix}-{key}",
                "image_path": images[name] if name else str(folder / shard / f"{key}.jpg"),
                "text": str(caption).strip(),
                "source": f"{part or folder.name}/{shard}",
            }
        )
    return rows


def _relative_to(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path


def use_folder_splits(folder_splits: dict[str | None, str | None], splits: str) -> bool:
    """Whether the folders' splits fill the ``split`` column (see the module's "Splits")."""
    if splits not in SPLIT_CHOICES:
        raise ValueError(f"conceptual_captions splits={splits!r} is not one of {SPLIT_CHOICES}")
    if splits == "auto":
        return set(VALID_SPLITS) <= set(folder_splits.values())
    return splits == "folders"


@register_recipe("conceptual_captions")
def build(
    raw_dir: Path | None, work_dir: Path, *, images_dir: str | Path | None = None, splits: str = "auto"
) -> RecipeResult:
    """Convert img2dataset output folder(s) of Conceptual Captions into a manifest."""
    raw_dir = require_raw_dir(
        raw_dir, "conceptual_captions", "the img2dataset output folder (or a folder of them)"
    )
    if images_dir is not None:
        folder = Path(images_dir) if Path(images_dir).is_absolute() else raw_dir / images_dir
        if not folder.is_dir() or not shard_ids(folder):
            raise FileNotFoundError(f"{folder} holds no img2dataset shards (00000.parquet/.tar/ folder)")
        folders = [(None, folder)]
    else:
        folders = find_output_folders(raw_dir)
    if not folders:
        raise FileNotFoundError(
            f"no img2dataset output in {raw_dir} (expected 00000.parquet with 00000.tar or 00000/); fetch the "
            "images as described in data_recipes/conceptual_captions.py"
        )

    work_dir = Path(work_dir)
    folder_splits = {part: split_from_name(part) for part, _ in folders}
    with_folder_splits = use_folder_splits(folder_splits, splits)
    skipped: Counter = Counter()
    frames = []
    for part, folder in folders:
        extract_dir = work_dir / EXTRACTED_DIR / (part or folder.name)
        rows = [
            row
            for shard in shard_ids(folder)
            for row in shard_rows(folder, shard, part, extract_dir, skipped)
        ]
        frame = pd.DataFrame(rows, columns=["pair_id", "image_path", "text", "source"])
        frame["split"] = folder_splits[part] if with_folder_splits else None
        frames.append(frame)

    manifest = pd.concat(frames, ignore_index=True)
    manifest["image_path"] = [_relative_to(p, raw_dir) for p in manifest["image_path"]]
    if manifest["split"].isna().all():
        manifest = manifest.drop(columns="split")
    notes = {
        "skipped": dict(sorted(skipped.items())),
        "folders": [str(folder) for _, folder in folders],
        "extracted_to": str(work_dir / EXTRACTED_DIR),
        "splits": "folders" if with_folder_splits else "hash",
        "folder_splits": {folder.name: folder_splits[part] for part, folder in folders},
    }
    return RecipeResult(manifest=check_manifest_columns(manifest), image_root=raw_dir, notes=notes)
