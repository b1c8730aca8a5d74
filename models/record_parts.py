"""The parts of a model record (``model.json``), declared (:mod:`common.settings`): the objects it holds — the
vocabulary's file, a weights file, a cached trunk, the trained trunk part — each field with its type and range,
the training settings' own declarations where a part records one (``trunk_training.batchnorm`` is
``train.trunk_batchnorm``); how the parts must agree (:func:`check_agreement`, run whenever a record is made, so
on every read); and how a record must agree with the settings its model was trained with
(:func:`settings_disagreement`, where those are at hand: a Train's ``_meta.json``, its run plan)."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.settings import (
    REQUIRED,
    Limit,
    SettingValueError,
    between,
    check_declared,
    or_null,
    redeclared,
    setting,
    typed,
)
from models.config import SETTINGS_FIELDS, trunk_refusal
from models.record_check import SHA256, changed_fields
from models.settings import TrainSettings

if TYPE_CHECKING:
    from models.trained import ModelRecord


def _is_file_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255 and not re.search(r"[/\\\x00]", value) and value not in (".", "..")


#: a file in the folder of the record (no path leading anywhere else)
FILE_NAME = Limit(_is_file_name, "a file name in the record's folder")
#: how a format 1 record named its vocabulary: the TrainWordVectors output of the Train's run root
FORMAT_1_VOCABULARY = re.compile(r"\.\./\.\./TrainWordVectors/[0-9a-f]{12}/vocab\.json")
VOCABULARY_PATH = Limit(
    lambda v: _is_file_name(v) or (isinstance(v, str) and FORMAT_1_VOCABULARY.fullmatch(v) is not None),
    "a file name in the record's folder (format 1: ../../TrainWordVectors/<signature>/vocab.json)",
)


@dataclass(frozen=True)
class WeightsFile:
    """A weights file by name and content: the best checkpoint a record is sealed with, a cached trunk's
    ImageNet weights."""

    file: str = setting(REQUIRED, "the file's name", FILE_NAME)
    sha256: str = setting(REQUIRED, "the SHA-256 of its bytes", SHA256)

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class VocabularyFile:
    """The vocabulary (token -> row of the word embedding) the model's word embedding was trained on."""

    file: str = setting(REQUIRED, "its file, beside the record", VOCABULARY_PATH)
    size: int = setting(REQUIRED, "its words, padding and unknown: the word embedding's rows", between(2, 1 << 24, low_open=False))
    sha256: str = redeclared(WeightsFile, "sha256")

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class CachedTrunk:
    """How a cached trunk's features were made (a frozen trunk, or the map under the trained top stages), so a
    bundle rebuilds the same trunk."""

    pretrained: bool = setting(REQUIRED, "ImageNet weights were asked for")
    seed: int | None = setting(REQUIRED, "the seed of a random init (the data seed)", Limit(lambda v: v is None or 0 <= v < 1 << 63, ">= 0 or null"))
    weights_loaded: bool | None = setting(REQUIRED, "whether the ImageNet weights were there")
    weights: dict[str, Any] | None = setting(None, "the file they came from, when known", shape=WeightsFile, optional=True)

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class StartingWeights:
    """Where a trained trunk part's first weights came from."""

    imagenet: bool = setting(REQUIRED, "ImageNet's (false: a random init)")
    file: str | None = setting(None, "the weights file, when known", or_null(FILE_NAME), optional=True)
    sha256: str | None = setting(None, "its SHA-256, when known", or_null(SHA256), optional=True)

    def __post_init__(self) -> None:
        check_declared(self)


def _stages_limit(value: Any) -> bool:
    return value == "all" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64)


@dataclass(frozen=True)
class TrunkTraining:
    """What of the trunk trained: which of its stages, from what weights, and how (the training settings')."""

    trained_stages: int | str = setting(REQUIRED, "its top stages that trained, or all", Limit(_stages_limit, '"all" or in [1, 64]'))
    stages: int | None = setting(REQUIRED, "how many stages the backbone is cut into (null: not cut)", Limit(lambda v: v is None or 1 <= v <= 64, "in [1, 64] or null"))
    batchnorm: str = redeclared(TrainSettings, "trunk_batchnorm", REQUIRED)
    learning_rate_scale: float = redeclared(TrainSettings, "trunk_learning_rate_scale", REQUIRED)
    horizontal_flip: bool = redeclared(TrainSettings, "horizontal_flip", REQUIRED)
    starting_weights: dict[str, Any] | None = setting(None, "where its first weights came from", shape=StartingWeights, optional=True)

    def __post_init__(self) -> None:
        check_declared(self)


def check_agreement(record: ModelRecord) -> None:
    """A :class:`SettingValueError` naming the first part of ``record`` that contradicts another or the code that
    builds its model: options its model does not declare, features its model does not take, a vocabulary of
    another size than the word embedding, a trunk mode and what the record says of the trunk disagreeing (a
    cached trunk's record, the stages that trained and how many the backbone has), a normalisation other than
    the backbone's."""
    from models.backbones import normalisation, stage_count
    from models.registry import model_options, needs_spatial_features

    try:
        model_options(record.model, record.model_options, "model_options")
        mean, std = normalisation(record.encoder.backbone)
    except KeyError as error:  # an unknown backbone (its spec says what exists)
        raise SettingValueError("encoder.backbone", str(error)) from None
    features = "spatial" if needs_spatial_features(record.model) else "pooled"
    mode, trunk = record.encoder.trunk_mode, record.encoder.trunk
    if record.features != features:
        raise SettingValueError("features", f"{record.features!r}, but model {record.model!r} takes {features!r} features")
    if record.vocabulary["size"] != record.encoder.vocab_size:
        raise SettingValueError("vocabulary.size", f"{record.vocabulary['size']} words, but encoder.vocab_size is {record.encoder.vocab_size}")
    if record.format >= 2 and not _is_file_name(record.vocabulary["file"]):
        raise SettingValueError("vocabulary.file", f"{record.vocabulary['file']!r}: a format {record.format} record's vocabulary is a file in its folder")
    if (record.frozen_trunk is not None) != mode.cached_features:
        raise SettingValueError(
            "frozen_trunk", f"{'missing for' if mode.cached_features else 'given for'} a trunk {trunk!r}, which "
            f"{'caches' if mode.cached_features else 'does not cache'} its features"
        )
    refusal = trunk_refusal(record.encoder.backbone, mode)
    if refusal:
        raise SettingValueError("encoder.trunk", f"{trunk!r}: {refusal}")
    if record.trunk_training is None and mode.trains_trunk and record.format >= 2:
        raise SettingValueError("trunk_training", f"missing for trunk {trunk!r}, which trains (a format {record.format} record says what of it)")
    if record.trunk_training is not None:
        said = record.trunk_training
        if not mode.trains_trunk:
            raise SettingValueError("trunk_training", f"given for trunk {trunk!r}, which trains none of it")
        if said["trained_stages"] != mode.recorded_stages or isinstance(said["trained_stages"], bool):
            raise SettingValueError("trunk_training.trained_stages", f"{said['trained_stages']!r}, but trunk {trunk!r} trains {mode.recorded_stages!r}")
        if said["stages"] != stage_count(record.encoder.backbone):
            raise SettingValueError(
                "trunk_training.stages", f"{said['stages']!r}, but backbone {record.encoder.backbone!r} has {stage_count(record.encoder.backbone)!r}"
            )
    for name, said, expected in (("mean", record.mean, mean), ("std", record.std, std)):
        if tuple(said) != tuple(expected):
            raise SettingValueError(name, f"{list(said)}, but backbone {record.encoder.backbone!r} normalises by {list(expected)}")


def settings_of(train: Mapping[str, Any]) -> TrainSettings:
    """The training settings a task hashed (``_meta.json``'s ``config.train``: the significant ones), each of its
    declared type and range, the others at their defaults; a :class:`SettingValueError` naming the first that is
    not. A setting this version no longer has is left out (it decides nothing a record says)."""
    hints = typing.get_type_hints(TrainSettings)
    return TrainSettings(**{name: typed(value, hints[name], f"train.{name}") for name, value in train.items() if name in hints})


def decided_by_settings(settings: TrainSettings) -> dict[str, Any]:
    """What the record of a model trained with ``settings`` says that the settings decide, as ``model.json``
    holds it (``models.trained.record_for`` writes these from the same settings)."""
    from models.backbones import normalisation
    from models.trained import trunk_training_record

    mean, std = normalisation(settings.backbone)
    decided: dict[str, Any] = {
        "encoder": {name: getattr(settings, name) for name in SETTINGS_FIELDS},
        "image_size": settings.image_size,
        "max_text_tokens": settings.max_text_tokens,
        "mean": list(mean),
        "std": list(std),
    }
    trunk_training = trunk_training_record(settings)
    if trunk_training is not None:
        decided["trunk_training"] = trunk_training
    return decided


def settings_disagreement(record: ModelRecord, settings: TrainSettings) -> str | None:
    """The first field where ``record`` says other than a model trained with ``settings`` would ("image_size: 64
    in the record, 32 in the settings"); None when it agrees."""
    decided = decided_by_settings(settings)
    said = record.to_json()
    kept = {key: said.get(key) for key in decided}
    kept["encoder"] = {name: said["encoder"][name] for name in decided["encoder"]}
    if isinstance(kept.get("trunk_training"), dict):
        kept["trunk_training"] = {key: kept["trunk_training"].get(key) for key in decided["trunk_training"]}
    for path in changed_fields(kept, decided):
        now, then = _at(kept, path), _at(decided, path)
        return f"{path}: {now!r} in the record, {then!r} in the settings"
    return None


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value
