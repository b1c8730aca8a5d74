"""The one JSON reader of the project: a size, a nesting depth and the digits of every integer checked, so a file,
a command-line value or a request body that is huge, nested thousands of levels deep or holds a number of
thousands of digits is refused in one line naming it, instead of exhausting memory, raising Python's
``RecursionError`` from its recursive parser (or from whatever walks the value later), or Python's
``ValueError: Exceeds the limit (4300 digits)``.

Every JSON the project parses goes through :func:`loads_bounded` (text in hand) or :func:`read_bounded` (a file),
with the :class:`JsonLimits` of its kind: what the project reads back (:data:`RECORD`: ``_meta.json``, metrics,
run plans, model records, bundles, indexes), a raw dataset's annotation files (:data:`RAW_DATA`), a value on
the command line (:data:`COMMAND_LINE`). tests/test_bounded_json.py fails on any other ``json.load(s)`` call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: no integer the project reads needs more than 20 digits (2**64); Python's own limit is 4300
MAX_INT_DIGITS = 100
#: bytes the depth scan looks at in one step (its arrays take about 30 bytes per byte)
_SCAN_CHUNK = 4 << 20


class BoundedJsonError(ValueError):
    """JSON that is too large, too deep, holds an integer with too many digits, or is not JSON; the message
    is one line naming what was read, ``detail`` what is wrong with it (``nests arrays or objects 5000 deep; at
    most 64``), for a reader that names the file its own way; ``bound`` the bound it passed (``bytes``,
    ``depth``, ``digits``), empty for text that is not JSON."""

    def __init__(self, what: str, detail: str, bound: str = "") -> None:
        super().__init__(f"{what} {detail}")
        self.detail, self.bound = detail, bound


class NotJsonError(BoundedJsonError):
    """Text within the bounds that does not parse as JSON (a command-line value may then be a plain string);
    ``cause`` the parser's first line."""

    def __init__(self, what: str, cause: str) -> None:
        super().__init__(what, f"is not JSON ({cause})")
        self.cause = cause


@dataclass(frozen=True)
class JsonLimits:
    """How much JSON of one kind may hold: bytes, nesting depth of arrays and objects, digits of an integer."""

    max_bytes: int
    max_depth: int
    max_int_digits: int = MAX_INT_DIGITS


#: what the project writes and reads back (``_meta.json``, metrics, run plans, records, bundles, indexes): a
#: few KB to a few MB, nested about ten deep
RECORD = JsonLimits(max_bytes=64 << 20, max_depth=64)
#: a raw dataset's annotation file (COCO's and GoodNews' are hundreds of MB), nested a few deep
RAW_DATA = JsonLimits(max_bytes=16 << 30, max_depth=64)
#: a value given on the command line or in luigi.cfg (``--set``, ``--seeds``, ``--dataset-options`` ...)
COMMAND_LINE = JsonLimits(max_bytes=1 << 20, max_depth=32)


#: +1 for a byte that opens an array or object, -1 for one that closes it
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1
#: a digit as "1", any other byte as "0"
_DIGIT_OR_NOT = bytes(ord("1") if chr(byte).isdigit() and byte < 128 else ord("0") for byte in range(256))
#: the bytes the depth count looks at: brackets, quotes, backslashes
_SPECIAL = (_BRACKET_STEP != 0) | np.isin(np.arange(256), [ord('"'), ord("\\")])


class _DepthScan:
    """The nesting depth of JSON text fed in pieces, counted without parsing (no recursion): brackets inside
    strings are left out, a quote after an odd run of backslashes is inside its string. Only the positions of
    quotes, backslashes and brackets are looked at, so a piece costs a few passes of C over its bytes."""

    def __init__(self) -> None:
        self.depth = 0  # open brackets at the end of what was fed
        self.deepest = 0
        self._in_string = False
        self._backslashes = 0  # the run of backslashes the last piece ended with

    def feed(self, piece: bytes) -> None:
        raw = np.frombuffer(piece, dtype=np.uint8)
        if not len(raw):
            return
        # two passes over the bytes: where the few that matter are, and which they are; the rest is on those
        where = np.flatnonzero(_SPECIAL[raw])
        kind = raw[where]
        quotes, slashes = where[kind == ord('"')], where[kind == ord("\\")]
        runs = self._runs_before(slashes, np.append(quotes, len(raw)))
        quotes = quotes[runs[:-1] % 2 == 0]  # an escaped quote is text
        self._backslashes = int(runs[-1])
        is_bracket = _BRACKET_STEP[kind] != 0
        brackets = where[is_bracket]
        # a bracket after an odd count of quotes (this piece's and those before) is inside a string
        outside = (np.searchsorted(quotes, brackets) + self._in_string) % 2 == 0
        depth = np.cumsum(_BRACKET_STEP[kind[is_bracket]][outside], dtype=np.int64) + self.depth
        if len(depth):
            self.deepest = max(self.deepest, int(depth.max()))
            self.depth = int(depth[-1])
        self._in_string = (len(quotes) + self._in_string) % 2 == 1

    def _runs_before(self, slashes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """For each of ``positions``, the length of the run of backslashes (at ``slashes``) that ends just
        before it; a run from the piece's first byte goes on from the last piece's."""
        if not len(slashes):
            return np.where(positions == 0, self._backslashes, 0)
        new_run = np.flatnonzero(np.diff(slashes, prepend=-2) != 1)  # where each run starts, in ``slashes``
        run_start = np.repeat(slashes[new_run], np.diff(np.append(new_run, len(slashes))))
        last = np.searchsorted(slashes, positions) - 1  # the last backslash before each position
        found = (last >= 0) & (slashes[np.maximum(last, 0)] == positions - 1)
        ends = slashes[np.maximum(last, 0)]
        starts = run_start[np.maximum(last, 0)]
        length = np.where(found, ends - starts + 1 + np.where(starts == 0, self._backslashes, 0), 0)
        return np.where(positions == 0, self._backslashes, length)


def json_depth(body: bytes, stop_above: int | None = None) -> int:
    """How deeply the arrays and objects of the JSON text ``body`` nest, counted without parsing (no
    recursion), in pieces (a file of gigabytes takes no more memory than one piece); ``stop_above``: stop
    reading once the depth passes it. Only meaningful for text that then parses as JSON."""
    scan = _DepthScan()
    for start in range(0, len(body), _SCAN_CHUNK):
        scan.feed(body[start : start + _SCAN_CHUNK])
        if stop_above is not None and scan.deepest > stop_above:
            break
    return scan.deepest


class _TooManyDigits(Exception):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _integer_within(max_digits: int) -> Callable[[str], int]:
    """``json.loads``'s ``parse_int``: an integer literal of at most ``max_digits`` digits."""

    def parse(literal: str) -> int:
        digits = len(literal) - literal.startswith("-")
        if digits > max_digits:
            raise _TooManyDigits(digits)
        return int(literal)

    return parse


def _check_bounds(raw: bytes, what: str, limits: JsonLimits) -> bool:
    """The size and depth of ``raw`` within ``limits`` (else a :class:`BoundedJsonError`); whether it holds a run
    of digits longer than an integer may have (then each integer is counted as it is parsed)."""
    if len(raw) > limits.max_bytes:
        raise BoundedJsonError(what, f"is {len(raw):,} bytes; at most {limits.max_bytes:,} are read", "bytes")
    depth = json_depth(raw, stop_above=limits.max_depth)
    if depth > limits.max_depth:
        deep = f"{depth}" if len(raw) <= _SCAN_CHUNK else f"more than {limits.max_depth}"  # a long one: read in part
        raise BoundedJsonError(what, f"nests arrays or objects {deep} deep; at most {limits.max_depth}", "depth")
    # an integer that long needs that many digits in a row somewhere: every digit made "1" and every other byte
    # "0", a substring search in C (ten times a regular expression's speed on a 70 MB file)
    return b"1" * (limits.max_int_digits + 1) in raw.translate(_DIGIT_OR_NOT)


def _parse(text: bytes | str, what: str, limits: JsonLimits, count_digits: bool) -> Any:
    try:
        return json.loads(text, parse_int=_integer_within(limits.max_int_digits) if count_digits else None)
    except _TooManyDigits as error:
        detail = f"holds an integer of {error.digits:,} digits; at most {limits.max_int_digits}"
        raise BoundedJsonError(what, detail, "digits") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise NotJsonError(what, first) from None


def loads_bounded(data: bytes | str, what: str, limits: JsonLimits = RECORD) -> Any:
    """``data`` parsed as JSON when it is within ``limits``; a :class:`BoundedJsonError` naming ``what``
    otherwise (a :class:`NotJsonError` when it is within them but not JSON)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    return _parse(data, what, limits, _check_bounds(raw, what, limits))


def loads_bounded_lines(data: str, what: str, limits: JsonLimits = RAW_DATA) -> Iterator[tuple[int, Any]]:
    """JSON Lines: ``(line number, value)`` of each line that is not blank, the whole text checked against
    ``limits`` first (once: a line nesting deeper than the limit passes it somewhere); a line that is not JSON is
    a :class:`NotJsonError` naming ``what`` and its number. ``data`` may hold lone surrogates (bytes that were not
    UTF-8, decoded with ``surrogateescape``): they stay in the values, for the row checks to reject."""
    count_digits = _check_bounds(data.encode("utf-8", "surrogatepass"), what, limits)
    for number, line in enumerate(data.splitlines(), start=1):
        if line.strip():
            yield number, _parse(line, f"{what} line {number}", limits, count_digits)


def read_bounded(path: str | Path, limits: JsonLimits = RECORD, what: str | None = None) -> Any:
    """The JSON file ``path`` within ``limits`` (read no further than its byte limit + 1); a
    :class:`BoundedJsonError` naming the file (or ``what``) otherwise. ``OSError`` as ``open`` raises it."""
    with open(path, "rb") as handle:
        data = handle.read(limits.max_bytes + 1)
    return loads_bounded(data, what or str(path), limits)


def read_bounded_json(path: Path, max_bytes: int, max_depth: int) -> Any:
    """:func:`read_bounded` with a byte and a depth limit of the caller's (``models.trained.read_record``: the model
    records' own limits)."""
    return read_bounded(path, JsonLimits(max_bytes, max_depth))
