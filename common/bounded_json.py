"""JSON read within bounds: a size and a nesting depth checked before parsing, so a file or body that is huge or
nested thousands of levels deep is refused in one line instead of exhausting memory or raising Python's
``RecursionError`` from its recursive parser.

Used for what the project reads back that a person may have edited or a client sent: model records
(``models/record_check.py``) and the API's JSON bodies (``serving/bodies.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


class BoundedJsonError(ValueError):
    """JSON that is too large, too deep or not JSON; the message is one line."""


def json_depth(body: bytes) -> int:
    """How deeply the arrays and objects of the JSON text ``body`` nest, counted without parsing (no
    recursion): brackets inside strings are left out. Only meaningful for text that then parses as JSON."""
    raw = np.frombuffer(body, dtype=np.uint8)
    quotes = raw == ord('"')
    if quotes.any():
        # a quote is escaped when an odd run of backslashes precedes it
        backslash = (raw == ord("\\")).astype(np.int64)
        run = np.zeros(len(raw) + 1, dtype=np.int64)
        # run[i + 1]: backslashes ending at i (cumulative sum reset at every non-backslash)
        total = np.cumsum(backslash)
        last_reset = np.maximum.accumulate(np.where(backslash == 0, total, 0))
        run[1:] = total - last_reset
        escaped = run[:-1] % 2 == 1
        quotes &= ~escaped
    inside = np.cumsum(quotes) % 2 == 1  # a quote itself counts as inside; brackets there are text
    steps = np.zeros(len(raw), dtype=np.int64)
    steps[np.isin(raw, (ord("["), ord("{")))] = 1
    steps[np.isin(raw, (ord("]"), ord("}")))] = -1
    steps[inside] = 0
    return int(np.cumsum(steps).max(initial=0))


def load_bounded_json(data: bytes, max_bytes: int, max_depth: int, what: str) -> Any:
    """``data`` parsed as JSON when it is at most ``max_bytes`` long and nests at most ``max_depth`` deep; a
    :class:`BoundedJsonError` naming ``what`` otherwise."""
    if len(data) > max_bytes:
        raise BoundedJsonError(f"{what} is {len(data):,} bytes; at most {max_bytes:,} are read")
    depth = json_depth(data)
    if depth > max_depth:
        raise BoundedJsonError(f"{what} nests arrays or objects {depth} deep; at most {max_depth}")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise BoundedJsonError(f"{what} is not JSON ({first})") from None


def read_bounded_json(path: Path, max_bytes: int, max_depth: int) -> Any:
    """The JSON file ``path`` within the bounds (read no further than ``max_bytes`` + 1 bytes)."""
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    return load_bounded_json(data, max_bytes, max_depth, str(path))
