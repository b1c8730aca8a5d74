"""GoodNews (Biten et al., CVPR 2019, "GoodNews Everyone! Context driven entity-aware captioning for news
images"): New York Times images with their captions and articles. The ECCV 2020 paper (§4.1) pairs each
image with its caption (``text="caption"``, the default); ``text="article"`` pairs it with the first
``n_sentences`` sentences of its article instead.

Download (https://github.com/furkanbiten/GoodNews, README "Get the data" -> "Images only")
--------------------------------------------------------------------------------------------
* ``article+caption.json`` (Google Drive link in the README, also distributed as
  ``captioning_dataset.json`` / ``article_caption.json``): put it in ``raw_dir``.
* the images: either the README's "Download all images" Drive archive, or ``img_urls.json`` +
  ``get_data/get_imgs_only/get_images.py``; either way the files are named ``<article id>_<index>.jpg``.
  Put them in ``raw_dir/images/`` (``resized/`` from the repository's ``resize.py`` is found too; another
  folder name can be passed as ``images_dir``).
* optional ``img_splits.json`` (Drive link under "Small Note" in the README): the authors' per-image
  train/val/test split. When present it fills the ``split`` column.

::

    raw_dir/
        captioning_dataset.json     (or article+caption.json / article_caption.json, or data/...)
        img_splits.json             optional
        images/<article id>_<index>.jpg

Format
------
``captioning_dataset.json`` is a dict keyed by article id (a hex string)::

    {"<article id>": {"images": {"<index>": "<caption>", ...}, "article": "<full text>",
                      "headline": {"main": "...", ...}, "article_url": "https://www.nytimes.com/..."}, ...}

The repository's ``combine_dataset.py`` already removed images that failed to download (corrupt files)
and articles without images, so nothing is marked failed and this recipe skips nothing.
``img_splits.json`` maps ``"<article id>_<index>"`` to ``"train"``, ``"val"`` or ``"test"``.

Output
------
``pair_id`` ``goodnews-<article id>_<index>``; ``image_path`` ``<images_dir>/<article id>_<index>.jpg``
relative to ``raw_dir``. With ``text="article"`` all images of an article share their text, so they
share ``group_id`` ``goodnews-<article id>`` (they are not wrong answers for each other).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.bounded_json import RAW_DATA, read_bounded
from data_recipes.manifest import VALID_SPLITS, RecipeResult, check_manifest_columns, require_raw_dir
from data_recipes.politics import first_sentences
from data_recipes.registry import register_recipe

ANNOTATION_CANDIDATES = (
    "captioning_dataset.json",
    "article+caption.json",
    "article_caption.json",
    "data/captioning_dataset.json",
)
IMAGE_DIR_CANDIDATES = ("images", "resized", "images_processed")
SPLITS_CANDIDATES = ("img_splits.json", "data/img_splits.json")
TEXT_CHOICES = ("caption", "article")


def _first_existing(raw_dir: Path, candidates: tuple[str, ...]) -> Path | None:
    return next((raw_dir / name for name in candidates if (raw_dir / name).exists()), None)


def _resolve(raw_dir: Path, given: str | Path) -> Path:
    return Path(given) if Path(given).is_absolute() else raw_dir / given


@register_recipe("goodnews")
def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    text: str = "caption",
    n_sentences: int = 2,
    annotations: str | Path | None = None,
    images_dir: str | None = None,
    splits_file: str | Path | None = None,
) -> RecipeResult:
    """Convert ``captioning_dataset.json`` (+ optional ``img_splits.json``) into a manifest."""
    if text not in TEXT_CHOICES:
        raise ValueError(f"goodnews text={text!r} is not one of {TEXT_CHOICES}")
    raw_dir = require_raw_dir(raw_dir, "goodnews", "the folder with captioning_dataset.json")
    annotation_path = (
        _resolve(raw_dir, annotations) if annotations else _first_existing(raw_dir, ANNOTATION_CANDIDATES)
    )
    if annotation_path is None or not annotation_path.is_file():
        raise FileNotFoundError(
            f"no GoodNews annotation file in {raw_dir} (looked for {list(ANNOTATION_CANDIDATES)}); download "
            "article+caption.json as described in data_recipes/goodnews.py or pass annotations=<file>"
        )
    if images_dir is None:
        found = _first_existing(raw_dir, IMAGE_DIR_CANDIDATES)
        images_dir = found.name if found else IMAGE_DIR_CANDIDATES[0]
    splits_path = (
        _resolve(raw_dir, splits_file) if splits_file else _first_existing(raw_dir, SPLITS_CANDIDATES)
    )
    if splits_file and not splits_path.is_file():
        raise FileNotFoundError(f"GoodNews split file {splits_path} does not exist; check splits_file=")

    articles = read_bounded(annotation_path, RAW_DATA)
    splits = read_bounded(splits_path, RAW_DATA) if splits_path else {}

    rows = []
    unknown_split = 0
    for article_id, article in articles.items():
        article_text = first_sentences(article.get("article"), n_sentences) if text == "article" else None
        for index in sorted(article.get("images", {}), key=int):
            image_key = f"{article_id}_{index}"
            split = splits.get(image_key)
            unknown_split += bool(splits) and split not in VALID_SPLITS
            rows.append(
                {
                    "pair_id": f"goodnews-{image_key}",
                    "image_path": f"{images_dir}/{image_key}.jpg",
                    "text": article_text if text == "article" else (article["images"][index] or "").strip(),
                    "group_id": f"goodnews-{article_id}" if text == "article" else None,
                    "split": split if split in VALID_SPLITS else None,
                    "source": annotation_path.name,
                }
            )

    manifest = pd.DataFrame(rows, columns=["pair_id", "image_path", "text", "group_id", "split", "source"])
    if text == "caption":
        manifest = manifest.drop(columns="group_id")
    if not splits:
        manifest = manifest.drop(columns="split")
    notes = {
        "skipped": {},
        "text": text,
        "n_articles": len(articles),
        "split_file": splits_path.name if splits_path else None,
        "images_without_split": int(unknown_split),
    }
    return RecipeResult(manifest=check_manifest_columns(manifest), image_root=raw_dir, notes=notes)
