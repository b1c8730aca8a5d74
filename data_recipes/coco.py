"""COCO Captions (Chen et al. 2015; Lin et al. 2014): about 120k images, each with five (four to seven)
captions. Every caption is one pair; captions of one image share ``group_id`` (Struc's ground-truth
neighbors and five-caption evaluation need it).

Download (https://cocodataset.org/#download)
--------------------------------------------
* images: ``http://images.cocodataset.org/zips/train2017.zip`` and ``val2017.zip`` (or the 2014 zips),
  unpacked into ``raw_dir/train2017/`` and ``raw_dir/val2017/``;
* captions: ``http://images.cocodataset.org/annotations/annotations_trainval2017.zip`` unpacked into
  ``raw_dir/annotations/`` (gives ``captions_train2017.json`` and ``captions_val2017.json``);
* optional, for the Karpathy split: ``https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip``;
  put ``dataset_coco.json`` in ``raw_dir`` (``raw_dir/caption_datasets/`` also works).

::

    raw_dir/
        annotations/captions_train2017.json, captions_val2017.json
        train2017/000000000009.jpg ...      val2017/000000000139.jpg ...
        dataset_coco.json                   optional (Karpathy split)

Formats
-------
Official ``captions_<split><year>.json``: ``{"images": [{"id", "file_name", ...}], "annotations":
[{"id", "image_id", "caption"}], ...}``; the image lives in the folder named like the file's suffix
(``captions_val2017.json`` -> ``val2017/``). 2017 files are used when present, else 2014 ones (the two
years hold the same captions). Rows get no ``split`` (the pipeline hashes ``group_id``).

Karpathy ``dataset_coco.json``: ``{"dataset": "coco", "images": [{"filepath": "val2014", "filename":
"COCO_val2014_000000391895.jpg", "cocoid": 391895, "split": "train|val|test|restval", "sentences":
[{"raw": "...", "tokens": [...], "sentid": 770337, "imgid": 0}], ...}]}``. ``split`` becomes the split column
with ``restval`` -> ``train`` (option ``restval``). Its paths name the 2014 folders; when those are absent
and 2017 folders exist the image is looked up as ``train2017|val2017/<cocoid:012d>.jpg``.

``annotations="auto"`` (default) uses the Karpathy file when present, else the official files.
Nothing in these formats is marked failed, so nothing is skipped.

Output
------
``pair_id`` ``coco-<annotation id>`` (official) or ``coco-karpathy-<sentid>`` (Karpathy, which carries no
annotation id); ``group_id`` ``coco-image-<image id>``; ``text`` the raw caption, whitespace-trimmed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from common.bounded_json import RAW_DATA, read_bounded
from data_recipes.manifest import VALID_SPLITS, RecipeResult, check_manifest_columns, require_raw_dir
from data_recipes.registry import register_recipe

KARPATHY_CANDIDATES = (
    "dataset_coco.json",
    "caption_datasets/dataset_coco.json",
    "karpathy/dataset_coco.json",
)
ANNOTATION_CHOICES = ("auto", "karpathy", "official")
COLUMNS = ["pair_id", "image_path", "text", "group_id", "split", "source"]
_OFFICIAL_NAME = re.compile(r"^captions_(?P<folder>(?:train|val)(?P<year>\d{4}))\.json$")


def find_official_files(raw_dir: Path) -> list[Path]:
    """``annotations/captions_{train,val}<year>.json``, the newest year present only."""
    found = [
        p for p in sorted((raw_dir / "annotations").glob("captions_*.json")) if _OFFICIAL_NAME.match(p.name)
    ]
    if not found:
        return []
    newest = max(_OFFICIAL_NAME.match(p.name)["year"] for p in found)
    return [p for p in found if _OFFICIAL_NAME.match(p.name)["year"] == newest]


def official_rows(files: list[Path]) -> list[dict]:
    rows = []
    for path in files:
        folder = _OFFICIAL_NAME.match(path.name)["folder"]
        data = read_bounded(path, RAW_DATA)
        file_names = {image["id"]: image["file_name"] for image in data["images"]}
        for annotation in sorted(data["annotations"], key=lambda a: a["id"]):
            image_id = annotation["image_id"]
            rows.append(
                {
                    "pair_id": f"coco-{annotation['id']}",
                    "image_path": f"{folder}/{file_names[image_id]}",
                    "text": (annotation.get("caption") or "").strip(),
                    "group_id": f"coco-image-{image_id}",
                    "split": None,
                    "source": path.name,
                }
            )
    return rows


def _karpathy_image_path(raw_dir: Path, image: dict, folder_exists: dict[str, bool]) -> str:
    folder = image.get("filepath", "")
    if folder not in folder_exists:
        folder_exists[folder] = (raw_dir / folder).is_dir()
    if folder_exists[folder]:
        return f"{folder}/{image['filename']}"
    # Only the 2017 release is unpacked: 2017 names images by their zero-padded COCO id.
    name = f"{image['cocoid']:012d}.jpg"
    for folder_2017 in ("train2017", "val2017"):
        if (raw_dir / folder_2017 / name).is_file():
            return f"{folder_2017}/{name}"
    return f"{folder}/{image['filename']}"


def karpathy_rows(raw_dir: Path, path: Path, restval: str) -> list[dict]:
    data = read_bounded(path, RAW_DATA)
    folder_exists: dict[str, bool] = {}
    rows = []
    for image in data["images"]:
        split = restval if image["split"] == "restval" else image["split"]
        image_path = _karpathy_image_path(raw_dir, image, folder_exists)
        for sentence in image["sentences"]:
            rows.append(
                {
                    "pair_id": f"coco-karpathy-{sentence['sentid']}",
                    "image_path": image_path,
                    "text": (sentence.get("raw") or "").strip(),
                    "group_id": f"coco-image-{image['cocoid']}",
                    "split": split,
                    "source": path.name,
                }
            )
    return rows


@register_recipe("coco", caption_groups=True)
def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    annotations: str = "auto",
    karpathy_file: str | Path | None = None,
    restval: str = "train",
) -> RecipeResult:
    """Convert COCO caption annotations (official or Karpathy) into a manifest, one row per caption."""
    if annotations not in ANNOTATION_CHOICES:
        raise ValueError(f"coco annotations={annotations!r} is not one of {ANNOTATION_CHOICES}")
    if restval not in VALID_SPLITS:
        raise ValueError(f"coco restval={restval!r} must be one of {VALID_SPLITS}")
    raw_dir = require_raw_dir(raw_dir, "coco", "the folder with annotations/ and the image folders")

    if karpathy_file is not None:
        karpathy = Path(karpathy_file) if Path(karpathy_file).is_absolute() else raw_dir / karpathy_file
        if not karpathy.is_file():
            raise FileNotFoundError(f"Karpathy split file {karpathy} does not exist; check karpathy_file=")
    else:
        karpathy = next((raw_dir / c for c in KARPATHY_CANDIDATES if (raw_dir / c).is_file()), None)
    official = find_official_files(raw_dir)

    use_karpathy = annotations == "karpathy" or (annotations == "auto" and karpathy is not None)
    if use_karpathy:
        if karpathy is None:
            raise FileNotFoundError(
                f"annotations='karpathy' but no dataset_coco.json in {raw_dir} (looked for "
                f"{list(KARPATHY_CANDIDATES)}); download caption_datasets.zip (see data_recipes/coco.py)"
            )
        rows = karpathy_rows(raw_dir, karpathy, restval)
    else:
        if not official:
            raise FileNotFoundError(
                f"no COCO caption annotations in {raw_dir}/annotations (captions_train2017.json, ...) and no "
                "dataset_coco.json; download them as described in data_recipes/coco.py"
            )
        rows = official_rows(official)

    manifest = pd.DataFrame(rows, columns=COLUMNS)
    if not use_karpathy:
        manifest = manifest.drop(columns="split")
    notes = {
        "skipped": {},
        "annotations": "karpathy" if use_karpathy else "official",
        "files": [karpathy.name] if use_karpathy else [p.name for p in official],
        "n_images": int(manifest["group_id"].nunique()),
    }
    return RecipeResult(manifest=check_manifest_columns(manifest), image_root=raw_dir, notes=notes)
