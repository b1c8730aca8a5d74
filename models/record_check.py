"""What a model record (``model.json`` in a Train folder, the ``model`` of a bundle's ``bundle.json``) is checked for
besides its fields: its size and depth (bounded before parsing), its format, and its seal — the checksum over its
own content and the form of every SHA-256 it holds. Its fields' types, ranges and names, and how its parts agree,
are the declarations that build a model (:class:`models.trained.ModelRecord`, :mod:`models.record_parts`, the model
config of :mod:`models.config`): a record is read back through them (:func:`common.settings.read_declared`).

Why checks at all: the record is a file a person can open in an editor. Before them, an edited record either
crashed a later command (a ``size mismatch`` traceback, NaN pixels at evaluation, an empty text batch) or, worse,
was exported and served with other preprocessing than the model trained with. Every reader — the pipeline's
Evaluate, COCOS and search index, ``crossmodal export``, and every bundle load (``evaluate``, ``serve``,
``audit``) — reads a record through :meth:`models.trained.ModelRecord.from_json`; a record that fails is one line
naming the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from common.settings import Limit

#: a record is a few kilobytes; more is not a record
MAX_RECORD_BYTES = 1 << 20
#: the deepest a record nests (``trunk_training.starting_weights`` is 3 deep)
MAX_RECORD_DEPTH = 8
#: the record field holding the SHA-256 of everything else in it (format 2 on)
CHECKSUM_FIELD = "checksum"
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: a record field holding a file's SHA-256
SHA256 = Limit(lambda v: isinstance(v, str) and _SHA256.fullmatch(v) is not None, "a SHA-256 in hex")


class ModelRecordError(ValueError):
    """A construction record that is missing, damaged, edited, of another format, or does not fit its weights."""


def record_checksum(payload: Mapping[str, Any]) -> str:
    """The SHA-256 of the record's canonical JSON without its checksum field."""
    content = {key: value for key, value in payload.items() if key != CHECKSUM_FIELD}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def changed_fields(now: Any, then: Any, prefix: str = "") -> list[str]:
    """The dotted paths where ``now`` differs from ``then`` (two JSON values), in order."""
    if isinstance(now, dict) and isinstance(then, dict):
        keys = sorted(set(now) | set(then))
        return [path for key in keys for path in changed_fields(now.get(key), then.get(key), f"{prefix}{key}.")]
    return [] if now == then and type(now) is type(then) else [prefix.rstrip(".") or "(the whole record)"]


def check_format(payload: Any, formats: tuple[int, ...]) -> None:
    """A :class:`ModelRecordError` for a payload that is no JSON object, or of another format than ``formats``."""
    if not isinstance(payload, dict):
        raise ModelRecordError(f"the record is {type(payload).__name__}, not a JSON object")
    if payload.get("format") not in formats or isinstance(payload.get("format"), bool):
        raise ModelRecordError(
            f"format: {payload.get('format')!r}; this version reads formats {', '.join(map(str, formats))}: train "
            "the model again with this version"
        )


def check_seal(payload: Mapping[str, Any]) -> None:
    """A :class:`ModelRecordError` for a record whose content does not match its checksum, or a sealed format's
    record without one (its fields were checked first: an edit of a field is named by its own check)."""
    if CHECKSUM_FIELD in payload and payload[CHECKSUM_FIELD] != record_checksum(payload):
        raise ModelRecordError("checksum: the record's content does not match its checksum: it was edited after training")
    if payload["format"] >= 2 and CHECKSUM_FIELD not in payload:
        raise ModelRecordError(f"{CHECKSUM_FIELD}: missing (a format {payload['format']} record carries one)")
