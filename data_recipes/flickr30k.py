"""Flickr30k (Young et al., TACL 2014): 31,783 Flickr images, five captions each. The ECCV 2020 paper
(§4.3) uses it to check that the method does not hurt literal captioning data. Captions of one image share
``group_id``.

Download
--------
* images and captions: request them through the form at https://shannon.cs.illinois.edu/DenotationGraph/
  (``flickr30k-images.tar`` and ``flickr30k.tar.gz``); unpack both into ``raw_dir``, which gives
  ``raw_dir/flickr30k-images/<id>.jpg`` and ``raw_dir/results_20130124.token``;
* optional, for the Karpathy split: ``https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip``;
  put ``dataset_flickr30k.json`` in ``raw_dir`` (``raw_dir/caption_datasets/`` also works).

::

    raw_dir/
        flickr30k-images/1000092795.jpg ...   (or pass images_dir=)
        results_20130124.token
        dataset_flickr30k.json                optional (Karpathy split)

Formats
-------
``results_20130124.token``: one caption a line, ``<image>.jpg#<n><TAB><caption>`` with ``n`` in 0..4. A
line that does not have this form is counted in ``notes["skipped"]["malformed_line"]``.

Karpathy ``dataset_flickr30k.json``: ``{"dataset": "flickr30k", "images": [{"filename": "1000092795.jpg",
"split": "train|val|test", "sentences": [{"raw": "...", "tokens": [...], "sentid": 0, "imgid": 0}],
"sentids": [...], "imgid": 0}]}``; ``split`` becomes the split column.

``annotations="auto"`` (default) uses the Karpathy file when present, else the token file.

Output
------
``pair_id`` ``flickr30k-<image id>-<n>`` in both formats (``n``: the ``#n`` of the token file, the position
in ``sentences`` for Karpathy's file, which keeps the token file's order); ``group_id``
``flickr30k-<image id>``; ``image_path`` ``<images_dir>/<image>.jpg`` relative to ``raw_dir``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pandas as pd

from common.bounded_json import RAW_DATA, read_bounded
from data_recipes.manifest import RecipeResult, check_manifest_columns, require_raw_dir
from data_recipes.registry import register_recipe

TOKEN_CANDIDATES = ("results_20130124.token", "flickr30k/results_20130124.token")
KARPATHY_CANDIDATES = (
    "dataset_flickr30k.json",
    "caption_datasets/dataset_flickr30k.json",
    "karpathy/dataset_flickr30k.json",
)
IMAGE_DIR_CANDIDATES = ("flickr30k-images", "flickr30k_images")
ANNOTATION_CHOICES = ("auto", "karpathy", "token")
COLUMNS = ["pair_id", "image_path", "text", "group_id", "split", "source"]
_TOKEN_ID = re.compile(r"^(?P<image>[^#\t]+\.jpg)#(?P<n>\d+)$")


def _row(images_dir: str, filename: str, n: int, caption: str, split: str | None, source: str) -> dict:
    stem = PurePosixPath(filename).stem
    return {
        "pair_id": f"flickr30k-{stem}-{n}",
        "image_path": f"{images_dir}/{filename}",
        "text": caption.strip(),
        "group_id": f"flickr30k-{stem}",
        "split": split,
        "source": source,
    }


def token_rows(path: Path, images_dir: str) -> tuple[list[dict], int]:
    """Rows of the token file and the number of malformed lines."""
    rows, malformed = [], 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            caption_id, _, caption = line.partition("\t")
            match = _TOKEN_ID.match(caption_id.strip())
            if match is None or not caption.strip():
                malformed += 1
                continue
            rows.append(_row(images_dir, match["image"], int(match["n"]), caption, None, path.name))
    return rows, malformed


def karpathy_rows(path: Path, images_dir: str) -> list[dict]:
    data = read_bounded(path, RAW_DATA)
    return [
        _row(images_dir, image["filename"], n, sentence.get("raw") or "", image["split"], path.name)
        for image in data["images"]
        for n, sentence in enumerate(image["sentences"])
    ]


def _find(raw_dir: Path, given: str | Path | None, candidates: tuple[str, ...], option: str) -> Path | None:
    if given is not None:
        path = Path(given) if Path(given).is_absolute() else raw_dir / given
        if not path.is_file():
            raise FileNotFoundError(f"Flickr30k file {path} does not exist; check {option}=")
        return path
    return next((raw_dir / c for c in candidates if (raw_dir / c).is_file()), None)


@register_recipe("flickr30k", caption_groups=True)
def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    annotations: str = "auto",
    images_dir: str | None = None,
    token_file: str | Path | None = None,
    karpathy_file: str | Path | None = None,
) -> RecipeResult:
    """Convert the Flickr30k captions (token file or Karpathy json) into a manifest, one row per caption."""
    if annotations not in ANNOTATION_CHOICES:
        raise ValueError(f"flickr30k annotations={annotations!r} is not one of {ANNOTATION_CHOICES}")
    raw_dir = require_raw_dir(raw_dir, "flickr30k", "the folder with flickr30k-images/")
    if images_dir is None:
        images_dir = next(
            (c for c in IMAGE_DIR_CANDIDATES if (raw_dir / c).is_dir()), IMAGE_DIR_CANDIDATES[0]
        )
    karpathy = _find(raw_dir, karpathy_file, KARPATHY_CANDIDATES, "karpathy_file")
    token = _find(raw_dir, token_file, TOKEN_CANDIDATES, "token_file")

    use_karpathy = annotations == "karpathy" or (annotations == "auto" and karpathy is not None)
    malformed = 0
    if use_karpathy:
        if karpathy is None:
            raise FileNotFoundError(
                f"annotations='karpathy' but no dataset_flickr30k.json in {raw_dir}; download "
                "caption_datasets.zip (see data_recipes/flickr30k.py)"
            )
        rows = karpathy_rows(karpathy, images_dir)
    else:
        if token is None:
            raise FileNotFoundError(
                f"no results_20130124.token nor dataset_flickr30k.json in {raw_dir}; download the captions "
                "as described in data_recipes/flickr30k.py or pass token_file=<file>"
            )
        rows, malformed = token_rows(token, images_dir)

    manifest = pd.DataFrame(rows, columns=COLUMNS)
    if not use_karpathy:
        manifest = manifest.drop(columns="split")
    notes = {
        "skipped": {} if use_karpathy else {"malformed_line": malformed},
        "annotations": "karpathy" if use_karpathy else "token",
        "n_images": int(manifest["group_id"].nunique()),
    }
    return RecipeResult(manifest=check_manifest_columns(manifest), image_root=raw_dir, notes=notes)
