"""The model record (``model.json``), declared once (:mod:`common.settings`): :class:`ModelRecord`, the record a
trained model is written as and read back through — every field's type and range from its declaration (the model
config's and the training settings' where it holds one of theirs), its parts (:mod:`models.record_parts`) agreeing
with each other and with the code that builds the model (:func:`check_agreement`, run whenever a record is made,
so on every read), its format and seal checked by :mod:`models.record_check`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from common.hashing import file_sha256
from common.registry import Registry
from common.settings import (
    REQUIRED,
    WHOLE_OBJECT,
    Limit,
    SettingValueError,
    check_declared,
    named,
    one_of,
    or_null,
    read_declared,
    redeclared,
    setting,
)
from common.tokenizer import TOKENIZERS
from models.backbones import normalisation, stage_count
from models.config import ModelConfig, trunk_refusal
from models.record_check import (
    CHECKSUM_FIELD,
    SHA256,
    ModelRecordError,
    check_format,
    check_seal,
    record_checksum,
)
from models.record_parts import CachedTrunk, TrunkTraining, VocabularyFile, WeightsFile, is_file_name
from models.registry import MODELS, model_options, needs_spatial_features
from models.settings import TrainSettings

#: 2: the record seals itself (``checksum``) and its best checkpoint (``weights``), its vocabulary beside it in
#: the Train folder; 1 (before 1.1): read for one more minor release, without the seal, its vocabulary the run
#: root's TrainWordVectors output (``../../TrainWordVectors/<signature>/vocab.json``) — the one conversion
READABLE_FORMATS = (1, 2)
RECORD_FORMAT = READABLE_FORMATS[-1]


def _registry_choice(registry: Registry) -> Limit:
    return named(registry.names, registry.unknown_message)


def _pixel_statistic(low: float, low_open: bool) -> Limit:
    def test(values: Any) -> bool:
        return len(values) == 3 and all((v > low if low_open else v >= low) and v <= 1e3 for v in values)

    return Limit(test, f"three numbers (one per colour) in {'(' if low_open else '['}{low}, 1000]")


@dataclass(frozen=True)
class ModelRecord:
    """Everything a trained model's network is built from (its weights come from a checkpoint), declared once
    (:mod:`common.settings`): the record a model is written as and read back through (:meth:`from_json`), its
    parts agreeing with each other and with the code that builds the model (:func:`models.record_parts.
    check_agreement`) whenever one is made."""

    model: str = setting(REQUIRED, "the registered model (models.registry)", _registry_choice(MODELS))
    model_options: dict[str, Any] = setting(REQUIRED, "the model's declared options (models.registry.model_options)")
    encoder: ModelConfig = setting(REQUIRED, "the model config: trunk, sizes, how much of the trunk trains")
    image_size: int = redeclared(TrainSettings, "image_size", REQUIRED)
    features: str = setting(REQUIRED, "what the image tower takes of the trunk: a vector per image, or its map (PVSE)", one_of("pooled", "spatial"))
    mean: tuple[float, ...] = setting(REQUIRED, "the pixel mean the trunk normalises by", _pixel_statistic(-1e3, False))
    std: tuple[float, ...] = setting(REQUIRED, "the pixel standard deviation the trunk normalises by", _pixel_statistic(0, True))
    max_text_tokens: int = redeclared(TrainSettings, "max_text_tokens", REQUIRED)
    tokenizer_version: int = setting(REQUIRED, "the tokenizer's version (common.tokenizer)", Limit(lambda v: str(v) in TOKENIZERS, "a tokenizer version", explain=lambda v: TOKENIZERS.unknown_message(str(v))))
    vocabulary: dict[str, Any] = setting(REQUIRED, "the vocabulary (token -> row of the word embedding)", shape=VocabularyFile)
    #: a cached trunk's features (frozen, or the map under its trained top stages)
    frozen_trunk: dict[str, Any] | None = setting(None, "how a cached trunk's features were made", shape=CachedTrunk, optional=True)
    format: int = setting(RECORD_FORMAT, "the record's format", one_of(*READABLE_FORMATS))
    extra: dict[str, Any] = setting({}, "notes a later version may read", optional=True)
    #: a trunk that trains: its top stages or all of it, absent for a frozen trunk
    trunk_training: dict[str, Any] | None = setting(None, "what of the trunk trained, and how", shape=TrunkTraining, optional=True)
    #: the best checkpoint the record was sealed with (format 2)
    weights: dict[str, str] | None = setting(None, "the best checkpoint the record is sealed with", shape=WeightsFile, optional=True)
    #: the SHA-256 of every other field (format 2): an edited record is refused
    checksum: str | None = setting(None, "the SHA-256 of the record's other fields", or_null(SHA256), optional=True)

    def __post_init__(self) -> None:
        check_declared(self)
        check_agreement(self)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["encoder"] = asdict(self.encoder)
        out["mean"], out["std"] = list(self.mean), list(self.std)
        for optional in ("trunk_training", "weights", CHECKSUM_FIELD):
            if out[optional] is None:
                del out[optional]  # a record without them reads as it did before they existed
        return out

    @classmethod
    def from_json(cls, payload: Any) -> ModelRecord:
        """The record of ``payload``, read through its declarations: of a readable format, every field of its type
        and range, its parts agreeing, its seal intact (:mod:`models.record_check`); one
        :class:`ModelRecordError` naming the field otherwise."""
        check_format(payload, READABLE_FORMATS)
        try:
            record = read_declared(cls, payload)
        except SettingValueError as error:
            named = "" if error.name == WHOLE_OBJECT else f"{error.name}: "
            raise ModelRecordError(f"{named}{error.refusal}") from None
        check_seal(payload)
        return record

    def sealed(self, checkpoint: Path) -> ModelRecord:
        """This record at format 2, with the SHA-256 of ``checkpoint`` (the weights it describes) and of itself."""
        unsealed = replace(self, format=RECORD_FORMAT, checksum=None, weights={"file": Path(checkpoint).name, "sha256": file_sha256(checkpoint)})
        return replace(unsealed, checksum=record_checksum(unsealed.to_json()))


def check_agreement(record: ModelRecord) -> None:
    """A :class:`SettingValueError` naming the first part of ``record`` that contradicts another or the code that
    builds its model: options its model does not declare, features its model does not take, a vocabulary of
    another size than the word embedding, a trunk mode and what the record says of the trunk disagreeing (a
    cached trunk's record, the stages that trained and how many the backbone has), a normalisation other than
    the backbone's."""
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
    if record.format >= 2 and not is_file_name(record.vocabulary["file"]):
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
        if said.get("views") is not None and not mode.cached_features:
            raise SettingValueError("trunk_training.views", f"given for trunk {trunk!r}, which trains on pixels, not on cached views")
        if said["stages"] != stage_count(record.encoder.backbone):
            raise SettingValueError(
                "trunk_training.stages", f"{said['stages']!r}, but backbone {record.encoder.backbone!r} has {stage_count(record.encoder.backbone)!r}"
            )
    for name, said, expected in (("mean", record.mean, mean), ("std", record.std, std)):
        if tuple(said) != tuple(expected):
            raise SettingValueError(name, f"{list(said)}, but backbone {record.encoder.backbone!r} normalises by {list(expected)}")
