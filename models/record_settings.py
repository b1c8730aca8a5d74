"""What a model record says that the training settings decide — the encoder's sizes and trunk, the image side, the
text's tokens, the normalisation, what of the trunk trained and how — written from them (:func:`trunk_training_record`,
``models.trained.record_for``), and checked against them where they are at hand (:func:`settings_disagreement`: a
Train's ``_meta.json`` config, its run plan), so a record forged consistently with its own seal is still refused
when it contradicts what its model was trained with."""

from __future__ import annotations

import typing
from collections.abc import Collection, Mapping
from typing import Any

from common.settings import significant, typed
from models.backbones import normalisation, stage_count
from models.cached_views import CachedViews
from models.config import SETTINGS_FIELDS
from models.record import ModelRecord
from models.settings import TrainSettings


def trunk_training_record(settings: TrainSettings, warm_start: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What ``trunk_training`` records of a run with ``settings`` before its model is built (None for a frozen
    trunk): the stages that train, BatchNorm, learning-rate scale, augmentation (flips of pixels, or the cached
    views of a map) and, for a warm start, its parent (``warm_start``: its signature, the SHA-256 of the checkpoint
    it starts from, that checkpoint's epoch); :func:`with_starting_weights` adds where the trained stages' first
    weights came from."""
    mode = settings.trunk_mode
    if not mode.trains_trunk:
        return None
    if settings.warm_started != (warm_start is not None):
        raise ValueError("a warm-started run's record names its parent, and only such a run's")
    record = {
        "trained_stages": mode.recorded_stages,
        "stages": stage_count(settings.backbone),
        "batchnorm": settings.trunk_batchnorm,
        "learning_rate_scale": settings.trunk_learning_rate_scale,
        "horizontal_flip": settings.horizontal_flip,
    }
    if mode.cached_features:
        record["views"] = CachedViews(settings.trunk_views, settings.trunk_crop_scale).record()
    if warm_start is not None:
        record["warm_start"] = dict(warm_start)
    return record


def settings_of(train: Mapping[str, Any]) -> TrainSettings:
    """The training settings a task hashed (``_meta.json``'s ``config.train``: the significant ones), each of its
    declared type and range, the others at their defaults; a :class:`SettingValueError` naming the first that is
    not. A setting this version no longer has is left out (it decides nothing a record says)."""
    hints = typing.get_type_hints(TrainSettings)
    return TrainSettings(**{name: typed(value, hints[name], f"train.{name}") for name, value in train.items() if name in hints})


#: what a record says that the training settings decide, each path with the settings that decide it; a path is
#: compared only where the settings given state those (a Train made before a setting existed states nothing of it,
#: and one whose setting does not act leaves it out of its hash)
DECIDED_BY: dict[str, tuple[str, ...]] = {
    **{f"encoder.{name}": (name,) for name in SETTINGS_FIELDS},
    "image_size": ("image_size",),
    "max_text_tokens": ("max_text_tokens",),
    "mean": ("backbone",),
    "std": ("backbone",),
    "trunk_training.trained_stages": ("trunk",),
    "trunk_training.stages": ("trunk", "backbone"),
    "trunk_training.batchnorm": ("trunk_batchnorm",),
    "trunk_training.learning_rate_scale": ("trunk_learning_rate_scale",),
    "trunk_training.horizontal_flip": ("horizontal_flip",),
    "trunk_training.views.count": ("trunk_views",),
    "trunk_training.views.crop_scale": ("trunk_crop_scale",),
    #: whether there is one: its parent is the run's, not the settings'
    "trunk_training.warm_start": ("trunk_warm_start",),
}


def decided_by_settings(settings: TrainSettings) -> dict[str, Any]:
    """What the record of a model trained with ``settings`` says that the settings decide, as ``model.json``
    holds it (``models.trained.record_for`` and ``trunk_training_record`` write these from the same settings;
    a warm start as ``True``)."""
    mean, std = normalisation(settings.backbone)
    decided: dict[str, Any] = {
        "encoder": {name: getattr(settings, name) for name in SETTINGS_FIELDS},
        "image_size": settings.image_size,
        "max_text_tokens": settings.max_text_tokens,
        "mean": list(mean),
        "std": list(std),
    }
    trunk_training = trunk_training_record(settings, {} if settings.warm_started else None)
    if trunk_training is not None:
        decided["trunk_training"] = {**trunk_training, "warm_start": settings.warm_started}
    return decided


def settings_disagreement(record: ModelRecord, settings: TrainSettings, stated: Collection[str] | None = None) -> str | None:
    """The first field where ``record`` says other than a model trained with ``settings`` would ("image_size: 64
    in the record, 32 in the settings"); None when it agrees. ``stated``: the settings known (default: the
    significant ones, what a Train hashes); a field they do not decide, or a part the record does not hold (a
    record written before it existed), is not compared."""
    stated = set(significant(settings) if stated is None else stated)
    decided, said = decided_by_settings(settings), record.to_json()
    if isinstance(said.get("trunk_training"), dict):
        said["trunk_training"] = {**said["trunk_training"], "warm_start": said["trunk_training"].get("warm_start") is not None}
    for path, deciders in DECIDED_BY.items():
        parent = path.rsplit(".", 1)[0] if path.count(".") == 2 else None  # views.count: compared where both have views
        missing = [part for part in ("trunk_training", parent) if part and path.startswith(part) and (_at(said, part) is None or _at(decided, part) is None)]
        if not set(deciders) <= stated or missing:
            continue
        now, then = _at(said, path), _at(decided, path)
        if now != then or type(now) is not type(then):
            return f"{path}: {now!r} in the record, {then!r} in the settings"
    return None


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value
