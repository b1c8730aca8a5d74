"""The model config, declared once (:mod:`common.settings`): the sizes and trunk a model's network is built from.
The run's training settings hold its settings fields (``train.backbone``, ``train.embed_dim``, ... share these
declarations: :class:`models.settings.TrainSettings`), the model builder takes it (``models.registry.build_model``)
and a model record holds it as its ``encoder`` (``models.trained``), read back through the same declarations
(:func:`common.settings.read_declared`) — one default and one range for each field, wherever it is read.

The trunk mode (``train.trunk``) is parsed here, once, into a :class:`TrunkMode`; whether a backbone has the
stages a ``top<k>`` mode trains is :func:`trunk_refusal`, the one check of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np

from common.registry import Registry
from common.settings import Limit, between, check_declared, named, setting


@dataclass(frozen=True)
class TrunkMode:
    """How much of the image trunk trains: none of it (``frozen``), its top ``k`` stages and head (``top<k>``)
    or all of it (``finetune``, the paper's §3.3)."""

    name: str
    #: the model trains on what the trunk computes below its trained part, cached once (``TrunkFeatures``), not
    #: on pixels: the whole trunk's features when frozen, the map under the top stages for ``top<k>``
    cached_features: bool
    #: the trunk's top stages the model holds and trains (0: none; None: every stage, from pixels)
    trained_stages: int | None

    @property
    def trains_trunk(self) -> bool:
        return self.trained_stages != 0

    @property
    def recorded_stages(self) -> int | str:
        """How a model record says which stages trained (``trunk_training.trained_stages``): ``"all"`` or k."""
        return "all" if self.trained_stages is None else self.trained_stages


#: "finetune": the trunk trains end to end on pixels (paper §3.3); "frozen": it is run once and its cached
#: features train the projection and the text tower (VSE++ / PVSE's precomputed-feature mode); "top<k>" (not
#: listed: any k >= 1): the trunk's map under its top k stages is cached once and those stages, its head and
#: the projection train on it (:func:`trunk_mode`)
TRUNK_MODES: Registry[TrunkMode] = Registry("trunk mode")
TRUNK_MODES.add("finetune", TrunkMode("finetune", cached_features=False, trained_stages=None))
TRUNK_MODES.add("frozen", TrunkMode("frozen", cached_features=True, trained_stages=0))
#: ``top1``, ``top2``, ...: ASCII digits only, no leading zero (``top²`` and ``top01`` are no modes)
TOP_STAGES = re.compile(r"top([1-9][0-9]{0,2})")


def trunk_mode(name: str) -> TrunkMode:
    """The trunk mode ``name``: a registered one, or ``top<k>`` for the top k >= 1 stages; a ValueError listing
    the valid ones otherwise."""
    if isinstance(name, str) and name in TRUNK_MODES:
        return TRUNK_MODES.get(name)
    top = TOP_STAGES.fullmatch(name) if isinstance(name, str) else None
    if top is None:
        raise ValueError(f"{TRUNK_MODES.unknown_message(str(name))}, or top<k> (the top k >= 1 stages train, e.g. top2)")
    return TrunkMode(name, cached_features=True, trained_stages=int(top.group(1)))


def _trunk_refusal(name: Any) -> str:
    try:
        trunk_mode(name)
    except ValueError as error:
        return str(error)
    return ""


def trunk_refusal(backbone: str, mode: TrunkMode) -> str | None:
    """Why ``backbone`` cannot be trained as ``mode`` says (it has fewer stages than ``top<k>`` trains, or is not
    cut into stages here); None when it can. Its stage count is declared by its spec (no trunk is built for a
    named backbone)."""
    if not mode.trained_stages:
        return None
    from models.backbones import stage_count, stages_refusal  # the trunks' code (torch), read when checked

    return stages_refusal(backbone, stage_count(backbone), mode.trained_stages)


def _backbone_names() -> list[str]:
    from models.backbones import BACKBONES  # the trunks' code (torch, torchvision), read only when listed

    return BACKBONES.names()


#: a named trunk is listed from the trunks' registry; whether a name exists is checked when a run is planned
#: (``pipeline.config.checks.check_backbone``, which builds its spec) and when a record is read
BACKBONE = Limit(lambda v: isinstance(v, str) and bool(v), "timm:<arch>", _backbone_names)
TRUNK = named(TRUNK_MODES.names, _trunk_refusal, also="top<k> (k >= 1)", also_test=lambda v: not _trunk_refusal(v))
#: a width or a count no real model comes near
WIDTH = between(1, 1 << 16, low_open=False)


@dataclass(frozen=True)
class ModelConfig:
    """What a model's network is built from besides its options: the image trunk and how much of it trains, the
    joint space's and the text tower's sizes, and the sizes read off the data (vocabulary, word vectors, cached
    trunk features). The first five are training settings (``train.<name>``)."""

    backbone: str = setting("resnet50", "the image trunk (models.backbones), or any timm:<arch>", BACKBONE)
    pretrained: bool = setting(True, "the trunk starts from ImageNet weights (false: a seeded random init)")
    embed_dim: int = setting(256, "dimension of the joint embedding space", WIDTH)
    word_dim: int = setting(200, "width of the word vectors the text tower starts from (read off them)", WIDTH)
    gru_hidden: int = setting(512, "hidden size of the text GRU", WIDTH)
    vocab_size: int = setting(
        2, "rows of the word embedding: the vocabulary, padding and unknown (read off the word vectors)",
        between(2, 1 << 24, low_open=False),
    )
    #: "frozen" is VSE++ / PVSE's precomputed-feature mode, "finetune" the paper's §3.3
    trunk: str = setting(
        "finetune",
        "how much of the trunk trains: all of it on pixels (finetune), none on its cached features (frozen), or "
        "its top k stages and head on the cached map under them (top<k>)",
        TRUNK,
    )
    #: the other modes read it off the trunk
    feature_dim: int | None = setting(
        None, "width of the cached trunk features a frozen trunk's model takes (read off the cache)",
        Limit(lambda v: v is None or 1 <= v <= 1 << 20, "in [1, 1048576] or null"),
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if not self.trunk_mode.trains_trunk and self.feature_dim is None:
            raise ValueError("feature_dim: a frozen trunk's model needs the width of its cached features")

    @cached_property
    def trunk_mode(self) -> TrunkMode:
        """``trunk`` parsed, once."""
        return trunk_mode(self.trunk)

    @classmethod
    def from_settings(cls, settings: Any, word_vectors: np.ndarray, feature_dim: int | None = None) -> ModelConfig:
        """The config of a model trained with ``settings`` (:data:`SETTINGS_FIELDS`), its vocabulary and word
        dimension read off the word vectors, ``feature_dim`` off the cached trunk features (frozen)."""
        vocab_size, word_dim = word_vectors.shape
        shared = {name: getattr(settings, name) for name in SETTINGS_FIELDS}
        return cls(**shared, vocab_size=vocab_size, word_dim=word_dim, feature_dim=feature_dim)


#: the model config's fields that are training settings: ``TrainSettings`` holds them with these declarations
SETTINGS_FIELDS = ("backbone", "pretrained", "embed_dim", "gru_hidden", "trunk")
#: the fields read off the data
DATA_FIELDS = tuple(f.name for f in fields(ModelConfig) if f.name not in SETTINGS_FIELDS)
