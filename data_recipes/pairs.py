"""Any other image-text data: a table of pairs in CSV, JSON Lines or parquet.

Format
------
One row per pair with the columns

=============  ========  ===================================================================
column         required  meaning
=============  ========  ===================================================================
image_path     yes       image file, absolute or relative to the table's folder
text           yes       the paired text
pair_id        no        stable unique id; default ``<table name>-<row number>``
group_id       no        rows sharing an image or a caption set
split          no        ``train``/``val``/``test`` (``training``, ``validation``, ``dev`` accepted)
source         no        free text; default the table's file name
=============  ========  ===================================================================

Other column names can be mapped with ``image_column=`` / ``text_column=``. ``raw_dir`` is the table
itself, or a folder holding exactly one ``pairs.csv`` / ``pairs.jsonl`` / ``pairs.parquet`` (or pass
``file=``). Example::

    data/
        pairs.csv          image_path,text,split
                           photos/0001.jpg,"A dog on a beach.",train
        photos/0001.jpg

Nothing is skipped here; empty texts and unreadable images are counted later by validation.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.bounded_json import RAW_DATA, BoundedJsonError, loads_bounded_lines
from data_recipes.manifest import VALID_SPLITS, ManifestError, RecipeResult, check_manifest_columns
from data_recipes.registry import register_recipe

READERS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
DEFAULT_NAMES = tuple(f"pairs{suffix}" for suffix in READERS)
SPLIT_ALIASES = {"training": "train", "validation": "val", "valid": "val", "dev": "val", "testing": "test"}


def find_table(raw_dir: Path, file: str | Path | None) -> Path:
    """The pairs table: ``raw_dir`` itself, ``file=`` (relative to ``raw_dir``) or the one default name."""
    if raw_dir.is_file():
        return raw_dir
    if file is not None:
        path = Path(file) if Path(file).is_absolute() else raw_dir / file
        if not path.is_file():
            raise FileNotFoundError(f"pairs table {path} does not exist; check file=")
        return path
    found = [raw_dir / name for name in DEFAULT_NAMES if (raw_dir / name).is_file()]
    if len(found) != 1:
        raise FileNotFoundError(
            f"expected exactly one of {list(DEFAULT_NAMES)} in {raw_dir}, found {[p.name for p in found]}; "
            "pass file=<table> (csv, jsonl or parquet)"
        )
    return found[0]


def read_table(path: Path) -> pd.DataFrame:
    kind = READERS.get(path.suffix.lower())
    if kind is None:
        raise ManifestError(
            f"pairs table {path.name} must end in one of {list(READERS)} (save it as CSV, JSON Lines or parquet)"
        )
    if kind == "jsonl":
        return _read_jsonl(path)
    try:
        # Bytes that are not UTF-8 become lone surrogates instead of stopping the whole read: validation then
        # rejects exactly those rows as ``invalid_utf8`` and keeps the others.
        if kind == "csv":
            return pd.read_csv(path, dtype=object, keep_default_na=False, encoding_errors="surrogateescape")
        return pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise ManifestError(f"{path.name} cannot be read as {kind}: {str(error).splitlines()[0]}") from None


def _read_jsonl(path: Path) -> pd.DataFrame:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    try:
        records = [record for _, record in loads_bounded_lines(text, path.name, RAW_DATA)]
    except BoundedJsonError as error:
        raise ManifestError(f"{error}; fix or remove it") from None
    # object dtype keeps ids as written (an int group id with gaps would otherwise become 7.0)
    return pd.DataFrame(records, dtype=object)


def normalise_split(value: object) -> str | None:
    """``train``/``val``/``test`` (aliases accepted), ``None`` for an empty cell; else a ManifestError."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or str(value).strip() == "":
        return None
    name = str(value).strip().lower()
    name = SPLIT_ALIASES.get(name, name)
    if name not in VALID_SPLITS:
        raise ManifestError(
            f"split value {value!r} is not one of {VALID_SPLITS} (or an alias {list(SPLIT_ALIASES)})"
        )
    return name


def normalise_splits(values: pd.Series, table_name: str) -> list[str | None]:
    """Every row's split; an unknown value is a schema problem, so one error names every bad value, how
    many rows hold it and the first of them (a typo in a split would otherwise move pairs silently)."""
    normalised: list[str | None] = []
    bad: dict[str, list[int]] = {}
    for row, value in enumerate(values):
        try:
            normalised.append(normalise_split(value))
        except ManifestError:
            bad.setdefault(str(value), []).append(row)
    if bad:
        listed = "; ".join(
            f"{value!r} in {len(rows)} row(s), first at row index {rows[0]}"
            for value, rows in sorted(bad.items())
        )
        raise ManifestError(
            f"{table_name} split column holds unknown value(s): {listed}; allowed: {list(VALID_SPLITS)}, "
            f"an alias {list(SPLIT_ALIASES)} or empty"
        )
    return normalised


def _text_cell(value: object) -> object:
    """The text as read; text that was not UTF-8 goes on as its bytes, which validation rejects as
    ``invalid_utf8`` naming the byte (a string column cannot even hold the undecodable part)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    text = str(value)
    return text.encode("utf-8", "surrogateescape") if _has_surrogates(text) else text


def _cell(value: object) -> str:
    """An id or a path as text; bytes that were not UTF-8 are shown escaped (such a path names no file, so
    the pair is rejected as ``missing_image`` with the escaped path in its detail)."""
    text = str(value)
    if _has_surrogates(text):
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _blank_to_none(value: object) -> object:
    if value is None or (isinstance(value, float) and pd.isna(value)) or str(value).strip() == "":
        return None
    return _cell(value)


@register_recipe("pairs")
def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    file: str | Path | None = None,
    image_column: str = "image_path",
    text_column: str = "text",
) -> RecipeResult:
    """Read a CSV / JSONL / parquet table of pairs into a manifest; image paths resolve from its folder."""
    if raw_dir is None or not Path(raw_dir).exists():
        raise FileNotFoundError(
            f"pairs needs raw_dir, a pairs table or the folder holding one; got {raw_dir}"
        )
    path = find_table(Path(raw_dir), file)
    table = read_table(path)
    missing = [c for c in (image_column, text_column) if c not in table.columns]
    if missing:
        raise ManifestError(
            f"{path.name} lacks column(s) {missing} (has {list(table.columns)}); rename them or pass "
            "image_column= / text_column="
        )
    if len(table) == 0:
        raise ManifestError(f"{path.name} holds no rows (a header alone?); give it image–text pairs")

    manifest = pd.DataFrame(
        {
            "pair_id": (
                [_cell(v) for v in table["pair_id"]]
                if "pair_id" in table.columns
                else [f"{path.stem}-{row}" for row in range(len(table))]
            ),
            "image_path": [_cell(v) for v in table[image_column]],
            "text": [_text_cell(v) for v in table[text_column]],
            "source": [_blank_to_none(v) or path.name for v in table["source"]]
            if "source" in table.columns
            else path.name,
        }
    )
    if "group_id" in table.columns:
        manifest["group_id"] = [_blank_to_none(v) for v in table["group_id"]]
    if "split" in table.columns:
        manifest["split"] = normalise_splits(table["split"], path.name)
    notes = {"skipped": {}, "table": str(path), "rows": len(table)}
    return RecipeResult(manifest=check_manifest_columns(manifest), image_root=path.parent, notes=notes)
