"""The parts of a model record (``model.json``), declared (:mod:`common.settings`): the objects it holds — the
vocabulary's file, a weights file, a cached trunk, the trained trunk part, its cached views and warm start — each
field with its type and range, the training settings' own declarations where a part records one
(``trunk_training.batchnorm`` is ``train.trunk_batchnorm``). The record itself is :class:`models.record.ModelRecord`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from common.settings import REQUIRED, Limit, between, check_declared, or_null, redeclared, setting
from models.record_check import SHA256
from models.settings import TrainSettings


def is_file_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255 and not re.search(r"[/\\\x00]", value) and value not in (".", "..")


#: a file in the folder of the record (no path leading anywhere else)
FILE_NAME = Limit(is_file_name, "a file name in the record's folder")
#: how a format 1 record named its vocabulary: the TrainWordVectors output of the Train's run root
FORMAT_1_VOCABULARY = re.compile(r"\.\./\.\./TrainWordVectors/[0-9a-f]{12}/vocab\.json")
VOCABULARY_PATH = Limit(
    lambda v: is_file_name(v) or (isinstance(v, str) and FORMAT_1_VOCABULARY.fullmatch(v) is not None),
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


@dataclass(frozen=True)
class ViewsRecord:
    """The cached views a top-stages trunk trained on (``models.cached_views.CachedViews``)."""

    count: int = redeclared(TrainSettings, "trunk_views", REQUIRED)
    crop_scale: float = redeclared(TrainSettings, "trunk_crop_scale", REQUIRED)
    crop_ratio: tuple[float, ...] = setting(
        REQUIRED, "the crops' aspect ratios, lowest and highest", Limit(lambda v: len(v) == 2 and 0 < v[0] <= v[1], "[low, high], 0 < low <= high")
    )
    flip: float = setting(REQUIRED, "the probability a view is flipped", between(0, 1, low_open=False))

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class WarmStart:
    """The frozen-trunk run a warm-started trunk's run started from (its parent)."""

    parent: str = setting(REQUIRED, "the parent run's output (its signature)", Limit(lambda v: 0 < len(v) <= 4096, "a short string"))
    checkpoint_sha256: str = redeclared(WeightsFile, "sha256")
    epoch: int = setting(REQUIRED, "the epoch of the parent's checkpoint it started from", between(0, 1 << 20, low_open=False))

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
    views: dict[str, Any] | None = setting(None, "the cached views a top-stages trunk trained on", shape=ViewsRecord, optional=True)
    warm_start: dict[str, Any] | None = setting(None, "the frozen-trunk run it started from", shape=WarmStart, optional=True)

    def __post_init__(self) -> None:
        check_declared(self)
