"""Ingestion validation: every bad input row is counted with a reason, none is silently dropped.

Two stages share one reject vocabulary (:data:`REJECT_REASONS`) and one reject table format
(columns ``pair_id, reason, detail``):

* :func:`validate_records` runs cheap per-row checks on the manifest (ids and text);
* :func:`load_image_rgb` decodes one image fully and raises :class:`ImageRejected` with a reason
  (the image cache, ``data_recipes.image_cache``, turns those into reject rows).

:func:`enforce_reject_budget` stops a build when too large a share of the input was rejected, since
that usually means a broken download or a wrong path rather than a few bad rows.
"""

from __future__ import annotations

import math
import struct
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from common.tokenizer import tokenize
from data_recipes.manifest import REQUIRED_COLUMNS, ManifestError

# The fixed vocabulary; a reject row never carries another reason.
REJECT_REASONS: tuple[str, ...] = (
    # row checks (validate_records)
    "missing_pair_id",
    "duplicate_pair_id",
    "empty_text",
    "whitespace_text",
    "invalid_utf8",
    "nul_bytes",
    "oversized_text",
    "no_tokens",
    # image checks (load_image_rgb / the image cache)
    "missing_image",
    "empty_file",
    "not_an_image",
    "truncated_image",
    "decompression_bomb",
    "unreadable_image",
    "placeholder_image",
)
REJECT_COLUMNS: tuple[str, ...] = ("pair_id", "reason", "detail")
DEFAULT_MAX_PIXELS = 40_000_000
#: longer texts are rejected as ``oversized_text``: ten times a long news article (GoodNews' longest are
#: ~60k characters) is a scraped page or a concatenation, and gensim would silently read only its first
#: 10,000 words anyway
DEFAULT_MAX_TEXT_CHARS = 200_000

# Modes whose alpha channel is flattened onto white (how a viewer shows a transparent image on a page).
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_BACKGROUND_RGB = (255, 255, 255)


class ImageRejected(Exception):
    """An image cannot be used; ``reason`` is one of :data:`REJECT_REASONS`, ``detail`` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REJECT_REASONS:
            raise ValueError(f"unknown reject reason {reason!r}; use one of {REJECT_REASONS}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RejectBudgetExceeded(RuntimeError):
    """More of the input was rejected than the ``reject_budget`` parameter allows."""


def make_rejects(rows: Iterable[tuple[str, str, str]]) -> pd.DataFrame:
    """Build a reject table from ``(pair_id, reason, detail)`` tuples, checking every reason."""
    rows = list(rows)
    unknown = sorted({reason for _, reason, _ in rows} - set(REJECT_REASONS))
    if unknown:
        raise ValueError(f"unknown reject reason(s) {unknown}; use one of {REJECT_REASONS}")
    return pd.DataFrame(rows, columns=list(REJECT_COLUMNS), dtype=object).astype(str)


def reject_counts(rejects: pd.DataFrame) -> dict[str, int]:
    """Number of rejects per reason (reasons with none are left out), in vocabulary order."""
    if "reason" not in rejects.columns:
        raise ValueError(f"reject table lacks a 'reason' column; expected columns {REJECT_COLUMNS}")
    counts = Counter(rejects["reason"].tolist())
    unknown = sorted(set(counts) - set(REJECT_REASONS))
    if unknown:
        raise ValueError(f"reject table holds unknown reason(s) {unknown}; use one of {REJECT_REASONS}")
    return {reason: counts[reason] for reason in REJECT_REASONS if counts[reason]}


def enforce_reject_budget(n_input: int, rejects: pd.DataFrame, budget: float) -> None:
    """Raise :class:`RejectBudgetExceeded` when ``len(rejects) / n_input > budget``."""
    check_reject_budget(n_input, reject_counts(rejects), budget)


def check_reject_budget(n_input: int, counts: dict[str, int], budget: float) -> None:
    """:func:`enforce_reject_budget` from the rejects per reason (a dataset report's ``rejects_by_reason``),
    so a build can be checked again under another budget without its reject table."""
    if n_input < 0:
        raise ValueError(f"n_input must be >= 0, got {n_input}")
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"reject_budget must be a fraction in [0, 1], got {budget}")
    n_rejected = sum(counts.values())
    if n_rejected > n_input:
        raise ValueError(f"{n_rejected} rejects for only {n_input} input rows; pass the input row count")
    if n_rejected == 0:
        return
    share = n_rejected / n_input
    if share <= budget:
        return
    per_reason = ", ".join(f"{reason}={count}" for reason, count in counts.items())
    raise RejectBudgetExceeded(
        f"rejected {n_rejected} of {n_input} input pairs ({share:.1%}), more than the reject budget of "
        f"{budget:.1%}. Per reason: {per_reason}. Look at the rejects table to fix the input; if these "
        f"losses are expected, raise the budget: luigi --module pipeline FullRun ... "
        f"--reject-budget {min(1.0, share + 0.01):.2f}"
    )


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _check_text(value: object, max_chars: int) -> tuple[str | None, str, str]:
    """Return ``(normalised_text, reason, detail)``; ``reason`` is empty when the text is usable."""
    if _is_missing(value):
        return None, "empty_text", "text is missing"
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as error:
            return (
                None,
                "invalid_utf8",
                f"bytes do not decode as UTF-8 ({error.reason} at byte {error.start})",
            )
    if isinstance(value, int | float | np.number) and not isinstance(value, bool):
        value = str(value)  # a caption like "1984" that a CSV reader parsed as a number
    if not isinstance(value, str):
        return None, "invalid_utf8", f"text is a {type(value).__name__}, not a string"
    try:
        # Lone surrogates (from text decoded with errors='surrogateescape' or broken JSON) cannot be
        # written as UTF-8 later, so they are rejected here rather than failing a later step.
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return None, "invalid_utf8", f"text holds a lone surrogate at character {error.start}"
    if value == "":
        return None, "empty_text", "text is empty"
    if "\x00" in value:
        return None, "nul_bytes", f"text holds a NUL character at position {value.index(chr(0))}"
    normalised = " ".join(value.split())
    if normalised == "":
        return None, "whitespace_text", f"text is only whitespace ({len(value)} characters)"
    if len(normalised) > max_chars:
        return None, "oversized_text", f"text has {len(normalised)} characters > max_text_chars={max_chars}"
    if not tokenize(normalised):
        # it would train as one unknown word and get a Doc2Vec vector of nothing
        return (
            None,
            "no_tokens",
            f"no word the tokenizer reads, only punctuation, symbols or emoji: {normalised[:40]!r}",
        )
    return normalised, "", ""


def validate_records(
    manifest: pd.DataFrame, *, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Cheap per-row checks; returns ``(kept, rejects)``.

    Each rejected row gets exactly one reason (the first check it fails): ``missing_pair_id``;
    ``duplicate_pair_id`` (every row after the first with that id, in input order, whatever the first
    row's fate); then the text: ``empty_text``, ``invalid_utf8`` (undecodable bytes or lone
    surrogates), ``nul_bytes``, ``whitespace_text``, ``oversized_text`` (more than ``max_text_chars``
    characters once whitespace is normalised), ``no_tokens`` (``common.tokenizer`` finds no word in it). Kept text has every whitespace run (tabs, newlines, ...)
    replaced by one space and is stripped. ``kept`` keeps the input row order.
    """
    if max_text_chars < 1:
        raise ValueError(f"max_text_chars must be >= 1, got {max_text_chars}")
    missing = [column for column in REQUIRED_COLUMNS if column not in manifest.columns]
    if missing:
        raise ManifestError(f"manifest lacks required column(s) {missing}; it needs {list(REQUIRED_COLUMNS)}")
    seen_ids: set[str] = set()
    keep_positions: list[int] = []
    kept_texts: list[str] = []
    reject_rows: list[tuple[str, str, str]] = []
    pair_ids = manifest["pair_id"].tolist()
    texts = manifest["text"].tolist()
    for position, (raw_id, raw_text) in enumerate(zip(pair_ids, texts, strict=True)):
        if _is_missing(raw_id) or str(raw_id).strip() == "":
            reject_rows.append(("", "missing_pair_id", f"row {position} has no pair_id"))
            continue
        pair_id = str(raw_id)
        if pair_id in seen_ids:
            reject_rows.append((pair_id, "duplicate_pair_id", f"row {position} repeats an earlier pair_id"))
            continue
        seen_ids.add(pair_id)
        text, reason, detail = _check_text(raw_text, max_text_chars)
        if reason:
            reject_rows.append((pair_id, reason, detail))
            continue
        keep_positions.append(position)
        kept_texts.append(text)
    kept = manifest.iloc[keep_positions].reset_index(drop=True)
    kept["pair_id"] = [str(pair_ids[p]) for p in keep_positions]
    kept["text"] = kept_texts
    return kept, make_rejects(reject_rows)


def _sniff(path: Path) -> str:
    """What kind of non-image file ``path`` is (HTML error pages saved as .jpg are common), without quoting
    any of its bytes: a row may point at any file the process can read (``/etc/passwd``), and the reason
    goes into ``rejects.csv``, the index's listing and the reports."""
    with open(path, "rb") as handle:
        head = handle.read(64)
    lowered = head.lstrip().lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<head")):
        return "not an image file (HTML markup, e.g. an error page saved under an image's name)"
    if lowered.startswith((b"<?xml", b"<svg")):
        return "not an image file (XML or SVG markup, which is not decoded)"
    return "not an image file (unrecognised format)"


def _to_rgb(image: Image.Image) -> Image.Image:
    """Convert any decoded mode to 8-bit RGB: 16-bit scaled (not clipped), alpha flattened on white."""
    if image.mode == "RGB":
        return image
    if image.mode in _SIXTEEN_BIT_MODES:
        # 65535 / 257 == 255 exactly, so the full 16-bit range maps onto the full 8-bit range.
        values = np.asarray(image).astype(np.float64)
        eight_bit = np.clip(np.rint(values / 257.0), 0, 255).astype(np.uint8)
        return Image.fromarray(eight_bit).convert("RGB")
    if image.mode == "F":
        eight_bit = np.clip(np.rint(np.asarray(image, dtype=np.float64)), 0, 255).astype(np.uint8)
        return Image.fromarray(eight_bit).convert("RGB")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in _ALPHA_MODES:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*_BACKGROUND_RGB, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def load_image_rgb(
    path: str | Path, *, max_pixels: int = DEFAULT_MAX_PIXELS, draft_size: int | None = None
) -> Image.Image:
    """Fully decode the image at ``path`` as 8-bit RGB with its EXIF orientation applied.

    The pixel count is checked from the header before any decoding (``decompression_bomb``); the
    decode is forced with ``load()`` so truncated files are caught here rather than later
    (``truncated_image``). ``draft_size`` lets JPEG decode at a reduced scale that still covers
    ``draft_size`` x ``draft_size`` (much faster for thumbnails; other formats ignore it).
    Raises :class:`ImageRejected` with a reason from :data:`REJECT_REASONS`.
    """
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError(
            "PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True, which hides truncated images; "
            "remove the code that sets it before validating images"
        )
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    path = Path(path)
    if not path.is_file():
        raise ImageRejected("missing_image", f"no file at {path}")
    try:
        if path.stat().st_size == 0:
            raise ImageRejected("empty_file", f"{path} is 0 bytes")
        with warnings.catch_warnings():
            # Our own max_pixels check below replaces PIL's warning; PIL's hard error still applies.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                width, height = opened.size
                if width * height > max_pixels:
                    raise ImageRejected(
                        "decompression_bomb",
                        f"header claims {width}x{height} = {width * height} pixels > max_pixels={max_pixels}",
                    )
                if draft_size is not None and opened.format == "JPEG":
                    opened.draft(opened.mode, (draft_size, draft_size))
                opened.load()
                _apply_exif_orientation(opened)
                # The pixels are loaded, so the image stays usable after the file is closed.
                return _to_rgb(opened)
    except ImageRejected:
        raise
    except Image.DecompressionBombError as error:
        raise ImageRejected("decompression_bomb", str(error)) from error
    except UnidentifiedImageError as error:
        raise ImageRejected("not_an_image", _sniff(path)) from error
    except OSError as error:
        if "truncated" in str(error):
            raise ImageRejected("truncated_image", str(error)) from error
        raise ImageRejected("unreadable_image", f"{type(error).__name__}: {error}") from error
    except Exception as error:
        # PIL's plugins signal corrupt data with many exception types (ValueError, SyntaxError,
        # EOFError, struct.error, zlib.error, ...); one odd file must not stop a large build.
        raise ImageRejected("unreadable_image", f"{type(error).__name__}: {error}") from error


def _apply_exif_orientation(image: Image.Image) -> None:
    """Apply the EXIF orientation tag in place; a corrupt EXIF block leaves the pixels as stored.

    A broken EXIF block is common in scraped images and says nothing about the pixels, so it is
    not a reason to lose the pair.
    """
    try:
        ImageOps.exif_transpose(image, in_place=True)
    except (ValueError, SyntaxError, OSError, KeyError, TypeError, struct.error):
        pass
