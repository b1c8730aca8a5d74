"""Politics (Thomas & Kovashka, NeurIPS 2019, "Predicting the politics of an image using webly
supervised data"): news images paired with the articles they illustrate, scraped from left- and
right-leaning media. The ECCV 2020 paper (§4.1) pairs each image with the first two sentences of its
article; boilerplate duplicates are removed later by the pipeline's MinHash dedup, not here.

Download
--------
Project page: http://people.cs.pitt.edu/~chris/politics/ -> "Download dataset" (about 123 GB). Unpack it
so that ``raw_dir`` holds the image tree and the metadata pickle::

    raw_dir/
        imgs/<LEFT|RIGHT>/<ISSUE>/<MEDIA SOURCE>/...   the images
        <metadata>.pkl                                  the article metadata (any name; see ``metadata``)

Format of the metadata pickle
-----------------------------
``{side: {issue: [item, ...]}}`` with ``side`` in ``left`` / ``right`` (any case) and ``issue`` a topic
name (e.g. ``immigration``). Each ``item`` is a dict with at least

* ``local_path``: where the crawler saved the image. It may be absolute on the authors' machine; when it
  has an ``imgs`` component it is re-rooted at ``raw_dir/imgs/...``, otherwise a relative path is taken
  from ``raw_dir`` and an absolute one is kept.
* ``content_text``: the article text.

An item without ``local_path`` has no saved image (the crawler's own mark of a failed download); it is
skipped and counted in ``notes["skipped"]["no_image"]``. Pickles written by Python 2 are read with
byte strings decoded as UTF-8. Only load a pickle you downloaded from the project page: unpickling runs
code.

Output
------
``pair_id`` ``politics-<side>-<issue>-<position in the issue's list>``; ``text`` the first
``n_sentences`` sentences (:func:`first_sentences`); ``source`` ``<side>/<issue>``. The side, issue and
media source go to ``RecipeResult.ground_truth`` (topics for evaluation), never to the manifest.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from data_recipes.manifest import RecipeResult, check_manifest_columns, require_raw_dir
from data_recipes.registry import register_recipe

IMAGE_TREE = "imgs"

# Words whose trailing period never ends a sentence: titles and other abbreviations of a following word.
_NEVER_FINAL = frozenset(
    "mr mrs ms messrs dr prof sen rep gov gen lt col capt cmdr adm maj sgt cpl pvt rev hon pres atty supt "
    "st mt ft vs v cf e.g i.e approx dept est fig".split()
)
# Words whose period does not end a sentence when a number follows: "No. 5", "Jan. 20".
_BEFORE_NUMBER = frozenset("no nos jan feb mar apr jun jul aug sep sept oct nov dec".split())
# Words whose period ends a sentence only when the next word is a usual sentence opener:
# company suffixes, "Jr.", dotted acronyms (U.S.), initials (John F. Kennedy), a.m. / p.m.
_AMBIGUOUS = frozenset("inc corp co ltd llc jr sr etc al bros".split())
_SENTENCE_OPENERS = frozenset(
    "a an the he she it they we i you this that these those there here his her its their our my your "
    "but and or so yet if when while after before since because although though as in on at by for from "
    "with without to of not no all both each every many most some several one two three more other such "
    "what who whom why how where which however meanwhile still also then now today yesterday last "
    "according mr mrs ms dr president officials police".split()
)
_CANDIDATE_END = re.compile(r"([.!?]+)([\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_FIRST_WORD = re.compile(r"[\"'\u201c\u2018(\[]?([A-Za-z]+)")
_DOTTED_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Decide whether the candidate boundary ``match`` (punctuation + space + capital) ends a sentence."""
    if match.group(1) != ".":
        return True  # "!", "?", "..." and the like
    end = match.start()
    word_start = max(text.rfind(space, 0, end) for space in (" ", "\n", "\t")) + 1
    word = text[word_start:end].lstrip("\"'\u201c\u2018([")
    lowered = word.lower()
    if lowered in _NEVER_FINAL:
        return False
    if lowered in _BEFORE_NUMBER:
        return not text[match.end() : match.end() + 1].isdigit()
    if lowered in _AMBIGUOUS or _DOTTED_ACRONYM.match(word) or (len(word) == 1 and word.isupper()):
        following = _FIRST_WORD.match(text, match.end())
        return bool(following) and following.group(1).lower() in _SENTENCE_OPENERS
    return True


def iter_sentences(text: str | None) -> Iterator[str]:
    """Yield the sentences of English news text, lazily (an article's first two are cheap).

    A sentence ends at ``.``/``!``/``?`` (and any closing quotes) followed by a space and a capital or
    digit, or at a blank line. A period after a title ("Mr.", "Sen.", "Jan.") never ends a sentence; one
    after a dotted acronym ("U.S."), an initial or a company suffix ("Inc.") ends it only when a usual
    sentence opener follows ("... in the U.S. The ..."). Whitespace inside a sentence is collapsed.
    """
    if not text:
        return
    for paragraph in _PARAGRAPH_BREAK.split(str(text)):
        start = 0
        for match in _CANDIDATE_END.finditer(paragraph):
            if _ends_sentence(paragraph, match):
                end = match.start() + len(match.group(1)) + len(match.group(2))
                if paragraph[start:end].strip():
                    yield " ".join(paragraph[start:end].split())
                start = match.end()
        if paragraph[start:].strip():
            yield " ".join(paragraph[start:].split())


def first_sentences(text: str | None, n_sentences: int = 2) -> str:
    """The first ``n_sentences`` sentences of ``text`` joined by one space (ECCV 2020 §4.1 keeps two)."""
    if n_sentences < 1:
        raise ValueError(f"n_sentences must be at least 1, got {n_sentences}")
    return " ".join(islice(iter_sentences(text), n_sentences))


def _decode_bytes(value: Any) -> Any:
    """Turn the byte strings of a Python 2 pickle (read with ``encoding="bytes"``) into str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {_decode_bytes(k): _decode_bytes(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decode_bytes(v) for v in value]
    return value


def load_metadata(path: Path) -> dict:
    """Read the metadata pickle (Python 3, or Python 2 with UTF-8 byte strings)."""
    with open(path, "rb") as handle:
        try:
            return pickle.load(handle)
        except UnicodeDecodeError:
            handle.seek(0)
            return _decode_bytes(pickle.load(handle, encoding="bytes"))


def find_metadata(raw_dir: Path, metadata: str | Path | None) -> Path:
    """The metadata pickle: ``metadata`` (absolute or relative to ``raw_dir``) or the only pickle there."""
    if metadata is not None:
        path = Path(metadata) if Path(metadata).is_absolute() else raw_dir / metadata
        if not path.is_file():
            raise FileNotFoundError(f"politics metadata pickle {path} does not exist; check metadata=")
        return path
    found = sorted(p for pattern in ("*.pkl", "*.pickle") for p in raw_dir.glob(pattern))
    if len(found) != 1:
        raise FileNotFoundError(
            f"expected exactly one metadata pickle (*.pkl) in {raw_dir}, found {[p.name for p in found]}; "
            "download the Politics dataset (see data_recipes/politics.py) or pass metadata=<file>"
        )
    return found[0]


def image_path_in_layout(local_path: str) -> str:
    """Re-root a crawler path at the unpacked layout: ``.../imgs/LEFT/x.jpg`` -> ``imgs/LEFT/x.jpg``."""
    parts = PurePosixPath(str(local_path).replace("\\", "/")).parts
    if IMAGE_TREE in parts:
        last = len(parts) - 1 - parts[::-1].index(IMAGE_TREE)
        return "/".join(parts[last:])
    return str(PurePosixPath(*parts)) if parts else ""


def _media_source(image_path: str) -> str | None:
    parts = PurePosixPath(image_path).parts
    # imgs/<side>/<issue>/<media source>/<file>
    if len(parts) >= 5 and parts[0] == IMAGE_TREE:
        return parts[3]
    return None


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_") or "none"


@register_recipe("politics")
def build(
    raw_dir: Path | None, work_dir: Path, *, metadata: str | Path | None = None, n_sentences: int = 2
) -> RecipeResult:
    """Convert the Politics metadata pickle into a manifest (one row per article image)."""
    raw_dir = require_raw_dir(raw_dir, "politics", "the unpacked dataset folder (imgs/ + metadata pickle)")
    data = load_metadata(find_metadata(raw_dir, metadata))
    if not isinstance(data, dict):
        raise ValueError(f"politics metadata must be a dict {{side: {{issue: [items]}}}}, got {type(data)}")

    rows, truth = [], []
    no_image = 0
    for side_key, issues in data.items():
        side = str(side_key).lower()
        for issue, items in issues.items():
            for position, item in enumerate(items):
                if not isinstance(item, dict):
                    raise ValueError(
                        f"politics item {side}/{issue}[{position}] is a {type(item).__name__}; expected a dict "
                        "with 'local_path' and 'content_text' (is this the dataset's metadata pickle?)"
                    )
                local_path = item.get("local_path")
                if not local_path:
                    no_image += 1
                    continue
                pair_id = f"politics-{side}-{_slug(issue)}-{position}"
                image_path = image_path_in_layout(local_path)
                text = item.get("content_text") or ""
                rows.append(
                    {
                        "pair_id": pair_id,
                        "image_path": image_path,
                        "text": first_sentences(text, n_sentences),
                        "source": f"{side}/{issue}",
                    }
                )
                truth.append(
                    {
                        "pair_id": pair_id,
                        "side": side,
                        "issue": str(issue),
                        "media_source": _media_source(image_path),
                    }
                )

    manifest = pd.DataFrame(rows, columns=["pair_id", "image_path", "text", "source"])
    ground_truth = pd.DataFrame(truth, columns=["pair_id", "side", "issue", "media_source"]).set_index(
        "pair_id"
    )
    return RecipeResult(
        manifest=check_manifest_columns(manifest),
        image_root=raw_dir,
        ground_truth=ground_truth,
        notes={"skipped": {"no_image": no_image}, "n_sentences": n_sentences},
    )
