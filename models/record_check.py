"""The one check of a model record before anything is built from it (``model.json`` in a Train folder, the
``model`` of a bundle's ``bundle.json``): bounded size and depth, the fields and their types, known names, finite
values in range, the parts that must agree with each other, and the record's checksum over its own content.

Why a check of its own: the record is a file a person can open in an editor. Before it, an edited record either
crashed a later command (a ``size mismatch`` traceback, NaN pixels at evaluation, an empty text batch) or, worse,
was exported and served with other preprocessing than the model trained with. Every reader — the pipeline's
Evaluate, COCOS and search index, ``crossmodal export``, and every bundle load (``evaluate``, ``serve``,
``audit``) — goes through :func:`check_record_payload`; a record that fails is one line naming the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

#: a record is a few kilobytes; more is not a record
MAX_RECORD_BYTES = 1 << 20
#: the deepest a record nests (``trunk_training.starting_weights`` is 3 deep)
MAX_RECORD_DEPTH = 8
#: the record field holding the SHA-256 of everything else in it (format 2 on)
CHECKSUM_FIELD = "checksum"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_LARGEST = 1 << 24  # no width, side or count of a real model comes near it


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


# ------------------------------------------------------------------------------------------- the values
def _integer(low: int, high: int = _LARGEST) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{value!r} is not an integer"
        return None if low <= value <= high else f"{value} is not in [{low}, {high}]"

    return check


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{value!r} is not true or false"


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and 0 < len(value) <= 4096 else f"{value!r} is not a short string"


def _sha256(value: Any) -> str | None:
    return None if isinstance(value, str) and _SHA256.fullmatch(value) else f"{value!r} is not a SHA-256 in hex"


def _pixels_stat(positive: bool) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, list) or len(value) != 3:
            return f"{value!r} is not three numbers (one per colour)"
        for item in value:
            if not isinstance(item, (int, float)) or isinstance(item, bool) or not math.isfinite(item):
                return f"{item!r} is not a finite number"
            if positive and not 0 < item <= 1e3 or not positive and abs(item) > 1e3:
                return f"{item!r} is out of range"
        return None

    return check


def _relative_file(value: Any) -> str | None:
    if _text(value) or value.startswith("/") or "\\" in value:
        return f"{value!r} is not a file name relative to the record's folder"
    return None


def _known(kind: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{value!r} is not a name"
        try:
            _KNOWN[kind](value)
        except (KeyError, ValueError) as error:
            return str(error).strip("'\"")
        return None

    return check


def _backbone(name: str) -> None:
    from models.backbones import backbone_spec

    backbone_spec(name)


def _model(name: str) -> None:
    from models.registry import model_class

    model_class(name)


def _trunk(name: str) -> None:
    from models.settings import trunk_mode

    trunk_mode(name)


def _tokenizer(version: str) -> None:
    from common.tokenizer import TOKENIZERS

    TOKENIZERS.get(version)


def _batchnorm(name: str) -> None:
    from models.settings import BATCHNORM_MODES

    BATCHNORM_MODES.get(name)


_KNOWN: dict[str, Callable[[str], None]] = {
    "backbone": _backbone,
    "model": _model,
    "trunk": _trunk,
    "tokenizer": _tokenizer,
    "batchnorm": _batchnorm,
}

#: each field of a record: its check, and whether it must be there
ENCODER = {
    "backbone": (_known("backbone"), True),
    "pretrained": (_boolean, True),
    "embed_dim": (_integer(1, 1 << 16), True),
    "word_dim": (_integer(1, 1 << 16), True),
    "gru_hidden": (_integer(1, 1 << 16), True),
    "vocab_size": (_integer(2), True),
    "trunk": (_known("trunk"), True),
    "feature_dim": (lambda v: None if v is None else _integer(1, 1 << 20)(v), True),
}
VOCABULARY = {"file": (_relative_file, True), "size": (_integer(2), True), "sha256": (_sha256, True)}
WEIGHTS_FILE = {"file": (_text, True), "sha256": (_sha256, True)}
FROZEN_TRUNK = {
    "pretrained": (_boolean, True),
    "seed": (lambda v: None if v is None else _integer(0, (1 << 63) - 1)(v), True),
    "weights_loaded": (lambda v: None if v is None else _boolean(v), True),
    "weights": (lambda v: None, False),  # checked as WEIGHTS_FILE below
}
STARTING_WEIGHTS = {"imagenet": (_boolean, True), "file": (_text, False), "sha256": (_sha256, False)}
TRUNK_TRAINING = {
    "trained_stages": (lambda v: None if v == "all" else _integer(1, 64)(v), True),
    "stages": (lambda v: None if v is None else _integer(1, 64)(v), True),
    "batchnorm": (_known("batchnorm"), True),
    "learning_rate_scale": (lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else f"{v!r} is not a number > 0", True),
    "horizontal_flip": (_boolean, True),
    "random_resized_crop": (lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 else f"{v!r} is not a share in (0, 1]", False),
    "starting_weights": (lambda v: None, False),  # checked as STARTING_WEIGHTS below
    "views": (lambda v: None, False),  # checked as CACHED_VIEWS below
    "warm_start": (lambda v: None, False),  # checked as WARM_START below
}
_SHARE = (lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 else f"{v!r} is not in (0, 1]", True)
CACHED_VIEWS = {"count": (_integer(1, 16), True), "crop_scale": _SHARE, "crop_ratio": (lambda v: None if isinstance(v, list) and len(v) == 2 else f"{v!r} is not [low, high]", True), "flip": _SHARE}
WARM_START = {"parent": (_text, True), "checkpoint_sha256": (_sha256, True), "epoch": (_integer(0, 1 << 20), True)}
RECORD = {
    "format": (lambda v: None, True),
    "model": (_known("model"), True),
    "model_options": (lambda v: None if isinstance(v, dict) else f"{v!r} is not an object", True),
    "encoder": (lambda v: None, True),
    "image_size": (_integer(8, 8192), True),
    "features": (lambda v: None if v in ("pooled", "spatial") else f"{v!r} is not 'pooled' or 'spatial'", True),
    "mean": (_pixels_stat(False), True),
    "std": (_pixels_stat(True), True),
    "max_text_tokens": (_integer(1, 1 << 16), True),
    "tokenizer_version": (lambda v: _integer(1, 1000)(v) or _known("tokenizer")(str(v)), True),
    "vocabulary": (lambda v: None, True),
    "frozen_trunk": (lambda v: None, False),
    "trunk_training": (lambda v: None, False),
    "extra": (lambda v: None if isinstance(v, dict) else f"{v!r} is not an object", False),
    "weights": (lambda v: None, False),
    CHECKSUM_FIELD: (_sha256, False),
}


def _fields(payload: Any, spec: Mapping[str, tuple[Callable[[Any], str | None], bool]], where: str) -> None:
    if not isinstance(payload, dict):
        raise ModelRecordError(f"{where}: {str(payload)[:80]!r} is not a JSON object")
    unknown = sorted(set(payload) - set(spec))
    if unknown:
        raise ModelRecordError(f"{where}: unknown field(s) {unknown}; a record holds {sorted(spec)}")
    for name, (check, required) in spec.items():
        if name not in payload:
            if required:
                raise ModelRecordError(f"{where}.{name}: missing" if where else f"{name}: missing")
            continue
        problem = check(payload[name])
        if problem:
            raise ModelRecordError(f"{where + '.' if where else ''}{name}: {problem}")


def check_record_payload(payload: Any, formats: tuple[int, ...]) -> None:
    """Refuse, in one :class:`ModelRecordError` naming the field, a record that is not one a model can be built
    from: of another format than ``formats``, a missing or unknown field, a value of the wrong type, out of range
    or not finite, an unknown name, parts that contradict each other, or (from format 2) content that does not
    match its checksum."""
    if not isinstance(payload, dict):
        raise ModelRecordError(f"the record is {type(payload).__name__}, not a JSON object")
    if payload.get("format") not in formats:
        raise ModelRecordError(
            f"format: {payload.get('format')!r}; this version reads formats {', '.join(map(str, formats))}: train "
            "the model again with this version"
        )
    _fields(payload, RECORD, "")
    _fields(payload["encoder"], ENCODER, "encoder")
    _fields(payload["vocabulary"], VOCABULARY, "vocabulary")
    if payload.get("weights") is not None:
        _fields(payload["weights"], WEIGHTS_FILE, "weights")
    from models.settings import trunk_mode

    mode = trunk_mode(payload["encoder"]["trunk"])
    if (payload.get("frozen_trunk") is not None) != mode.cached_features:
        raise ModelRecordError(
            f"frozen_trunk: {'missing for' if mode.cached_features else 'given for'} a trunk "
            f"{payload['encoder']['trunk']!r}, which {'caches' if mode.cached_features else 'does not cache'} its features"
        )
    if payload.get("frozen_trunk") is not None:
        _fields(payload["frozen_trunk"], FROZEN_TRUNK, "frozen_trunk")
        if payload["frozen_trunk"].get("weights") is not None:
            _fields(payload["frozen_trunk"]["weights"], WEIGHTS_FILE, "frozen_trunk.weights")
    if mode.cached_features and not mode.trains_trunk and payload["encoder"]["feature_dim"] is None:
        raise ModelRecordError("encoder.feature_dim: a frozen trunk's cached features need their width")
    if (payload.get("trunk_training") is not None) and not mode.trains_trunk:
        raise ModelRecordError(f"trunk_training: given for trunk {payload['encoder']['trunk']!r}, which trains none of it")
    if payload.get("trunk_training") is not None:
        _fields(payload["trunk_training"], TRUNK_TRAINING, "trunk_training")
        for part, spec in (("starting_weights", STARTING_WEIGHTS), ("views", CACHED_VIEWS), ("warm_start", WARM_START)):
            if payload["trunk_training"].get(part) is not None:
                _fields(payload["trunk_training"][part], spec, f"trunk_training.{part}")
    if payload["vocabulary"]["size"] != payload["encoder"]["vocab_size"]:
        raise ModelRecordError(
            f"vocabulary.size: {payload['vocabulary']['size']} words, but encoder.vocab_size is {payload['encoder']['vocab_size']}"
        )
    from models.registry import needs_spatial_features

    spatial = "spatial" if needs_spatial_features(payload["model"]) else "pooled"
    if payload["features"] != spatial:
        raise ModelRecordError(f"features: {payload['features']!r}, but model {payload['model']!r} takes {spatial!r} features")
    if CHECKSUM_FIELD in payload and payload[CHECKSUM_FIELD] != record_checksum(payload):
        raise ModelRecordError("checksum: the record's content does not match its checksum: it was edited after training")
    if payload["format"] >= 2 and CHECKSUM_FIELD not in payload:
        raise ModelRecordError(f"{CHECKSUM_FIELD}: missing (a format {payload['format']} record carries one)")
