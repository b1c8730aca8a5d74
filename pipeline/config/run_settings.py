"""Every setting of a run as one tree, shaped like the ``--set`` paths (``data.recipe``, ``dedup.threshold``,
``train.epochs``, ``variants.ours.within_modality.text_weight`` ...): :class:`RunSettings`, whose groups are the
settings classes of the steps that read them, each field declared once (:func:`common.settings.setting`: default,
range or choices, significant or operational, a one-line description). A profile states what differs from these
defaults (:mod:`pipeline.config.profiles`); ``--set`` changes them (:mod:`pipeline.config.changes`); the run plan
holds the result (:mod:`pipeline.config.plan`). What is listed (``python -m pipeline settings``, the table of
docs/usage.md) is read from the declarations here (:func:`setting_rows`).

Luigi's own settings (``luigi.cfg``: the scheduler, workers, ``[resources]``, ``[retcode]``) are not run settings:
they say how a run is executed, never what it computes, and no output's hash holds them
(``pipeline/run/luigi_defaults.cfg``; docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from common.settings import (
    Limit,
    SettingInfo,
    at_least,
    between,
    check_declared,
    default_of,
    info_of,
    named,
    section,
    setting,
    significance_text,
    type_name,
)
from data_recipes import RECIPE_BUILDERS
from models.settings import TrainSettings
from pipeline.steps.dedup_settings import DedupSettings
from pipeline.steps.doc2vec import Doc2VecSettings
from pipeline.steps.evaluation import EvalSettings
from pipeline.steps.neighbors import NeighborSettings
from pipeline.steps.splits import SplitSettings
from pipeline.steps.tuning import TuningSettings
from pipeline.steps.word_vectors import WordVectorSettings


def _variant_names() -> list[str]:
    from pipeline.config.variants import VARIANTS  # the variant table imports the losses: read when checked

    return VARIANTS.names()


def _table_variants() -> list[str]:
    """The variants of the table (not the one-loss ``loss_<name>`` variants every loss has)."""
    from pipeline.config.variants import VARIANTS

    return VARIANTS.names(single_loss=None)


def _unknown_variant(names: Any) -> str:
    from pipeline.config.variants import VARIANTS

    unknown = [name for name in names if name not in VARIANTS]
    return VARIANTS.unknown_message(str(unknown[0])) if unknown else ""


def _seeds_refusal(seeds: Any) -> str:
    return f"give distinct seeds >= 0, at least one, e.g. seeds=[0,1,2]; got {list(seeds)}"


SEEDS = Limit(
    lambda v: bool(v) and len(set(v)) == len(v) and min(v) >= 0, "distinct seeds >= 0, at least one", explain=_seeds_refusal
)
#: a list of variant names (empty: the paper's grid for the dataset)
GRID = Limit(
    lambda v: all(name in set(_variant_names()) for name in v), "loss_<loss> (a list)", _table_variants, _unknown_variant
)


@dataclass(frozen=True)
class DataSettings:
    """The dataset: its recipe, raw files, the seed of everything drawn from the data, and its checks."""

    recipe: str = setting(
        "embedded", "the dataset's recipe (data_recipes/; --dataset)", named(RECIPE_BUILDERS.names, RECIPE_BUILDERS.unknown_message)
    )
    raw_dir: str = setting("", "the recipe's raw folder or table (--raw-dir); a generated dataset reads none")
    shards: tuple[str, ...] = setting((), "raw folders added later, in arrival order, each read and cached once (--shards)")
    seed: int = setting(0, "seed of data generation, Doc2Vec, Annoy and the trunk's features (--data-seed)", at_least(0))
    image_cache_size: int = setting(224, "side of the square thumbnails images are decoded to, once", at_least(8))
    #: a gate, not part of any task's output: raising it decodes nothing again
    reject_budget: float = setting(
        0.05, "largest share of input pairs that may be rejected, in all or in any one shard (--reject-budget)",
        between(0, 1, low_open=False),
    )
    generated_options: dict[str, Any] = setting(
        {}, "the generated dataset's options (its size): a recipe that reads raw files gets only options", profile_only=True
    )
    options: dict[str, Any] = setting(
        {}, "the recipe's options, for any recipe, checked against the recipe's (--dataset-options)"
    )

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class RunSettings:
    """The settings of a run, resolved: defaults, the profile's differences, the run's changes."""

    data: DataSettings = section(DataSettings, "the dataset")
    dedup: DedupSettings = section(DedupSettings, "MinHash LSH near-duplicate removal")
    split: SplitSettings = section(SplitSettings, "the shares of the hashed split")
    doc2vec: Doc2VecSettings = section(Doc2VecSettings, "Doc2Vec, the semantic space Ω of the neighbors")
    word_vectors: WordVectorSettings = section(WordVectorSettings, "the GRU's initial word vectors")
    neighbors: NeighborSettings = section(NeighborSettings, "the k-NN tables the neighbor i' is drawn from")
    train: TrainSettings = section(TrainSettings, "training, for every variant (variants.<name>.train.<setting>: one)")
    eval: EvalSettings = section(EvalSettings, "the test split's evaluation")
    tuning: TuningSettings = section(TuningSettings, "the tuned protocol")
    seeds: tuple[int, ...] = setting(
        (0,), "training seeds of every variant (a change of seeds replaces seeds_by_variant too; --seeds)", SEEDS
    )
    #: the headline's baseline and the method it tests get more seeds: seed noise is most of a run's error
    seeds_by_variant: dict[str, tuple[int, ...]] = setting(
        {}, "more seeds for the variants the report's headline needs power for: variant -> seeds", profile_only=True
    )
    grid: tuple[str, ...] = setting(
        (), "the variants a run compares when --variants names none (empty: the paper's tables for the dataset)", GRID
    )
    loss_defaults: dict[str, dict[str, Any]] = setting(
        {}, "loss parameters for every variant using the loss, where its row leaves them unset: loss -> parameters",
        profile_only=True,
    )
    #: --variant-overrides is the same, as JSON; a variant's table row is pipeline/config/variants.py
    variants: dict[str, dict[str, Any]] = setting(
        {},
        "the run's changes to one variant or (*) every variant: <loss>.<parameter> (every variant with that loss), "
        "train.<setting>, model_options.<option>, neighbor_source (text, image or null), label (one variant's)",
    )

    def __post_init__(self) -> None:
        check_declared(self)

    def seeds_for(self, variant: str) -> tuple[int, ...]:
        return tuple(self.seeds_by_variant.get(variant, self.seeds))

    def section(self, name: str) -> dict[str, Any]:
        """One group as a plain dict (what a task hashes into its output path)."""
        return dataclasses.asdict(getattr(self, name))


#: what a variant change may reach besides its losses
VARIANT_KEYS = ("train", "model_options", "neighbor_source", "label")
#: the open mappings a path reaches into, by their field's path: the key's placeholder
OPEN_KEYS = {"data.options": "<name>", "data.generated_options": "<name>", "seeds_by_variant": "<variant>", "loss_defaults": "<loss>.<parameter>"}


@dataclass(frozen=True)
class SettingRow:
    """One line of ``python -m pipeline settings``: a path, its value, what it accepts, whether it changes what is
    computed, what it means, and whether ``--set`` reaches it (else only a profile)."""

    path: str
    value: Any
    accepts: str
    kind: str
    description: str
    settable: bool = True

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(path: str, value: Any, info: SettingInfo, hint: Any, settable: bool = True) -> SettingRow:
    """The row of a declared setting at ``path``."""
    return SettingRow(path, value, info.choices_text() or type_name(hint), significance_text(info), info.description, settable)


def _rows(node: Any, prefix: str) -> Iterator[SettingRow]:
    hints = typing.get_type_hints(type(node))
    for field in fields(node):
        info, value, path = info_of(field), getattr(node, field.name), f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            yield from _rows(value, f"{path}.")
        elif path == "variants":
            yield from _variant_rows(node)
        else:
            shown = f"{path}.{OPEN_KEYS[path]}" if path in OPEN_KEYS and not info.profile_only else path
            yield _row(shown, value, info, hints[field.name], not info.profile_only)


#: what ``variants.<variant or *>.`` reaches
VARIANT_PATH = "variants.<variant or *>"


def _variant_rows(settings: RunSettings) -> Iterator[SettingRow]:
    """The run's changes to variants: every loss's declared settings (``<loss>.<parameter>``, at the value a
    variant with that loss gets where its row leaves it unset: the declared default, the profile's loss default,
    the run's change to every variant), every model's declared options, and what else a variant change reaches."""
    from models.losses import LOSSES
    from models.registry import MODELS, options_class

    every = settings.variants.get("*", {})
    for loss in LOSSES.names():
        declared = LOSSES[loss].settings_class
        hints = typing.get_type_hints(declared)
        given = {**settings.loss_defaults.get(loss, {}), **every.get(loss, {})}
        for field in fields(declared):
            value = given.get(field.name, default_of(field))
            yield _row(f"{VARIANT_PATH}.{loss}.{field.name}", value, info_of(field), hints[field.name])
    for model in MODELS.names():
        declared = options_class(model)
        hints = typing.get_type_hints(declared)
        for field in fields(declared):
            info = info_of(field)
            value = every.get("model_options", {}).get(field.name, default_of(field))
            yield _row(f"{VARIANT_PATH}.model_options.{field.name}", value, replace(info, description=f"{model}: {info.description}"), hints[field.name])
    yield SettingRow(f"{VARIANT_PATH}.train.<setting>", every.get("train", {}), "as train.<setting>", "significant", "a training setting of these variants (train.<setting> for them alone)")
    yield SettingRow("variants.<variant>.neighbor_source", None, "text, image or null", "significant", "where the variant's semantic neighbors i' come from (its row's, unless changed)")
    yield SettingRow("variants.<variant>.label", None, "a string", "significant", "the variant's name in the report (its row's, unless changed)")


def setting_rows(settings: RunSettings) -> list[SettingRow]:
    """Every path of the tree, once, with ``settings``' value at it, in the tree's order."""
    return list(_rows(settings, ""))


def summary_tree(settings: RunSettings) -> dict[str, Any]:
    """The resolved settings as a reader reads them (``run_plan.json``'s summary; the report hashes it): every
    group, the dataset's options as the recipe gets them, the seeds with their per-variant exceptions."""
    from pipeline.config.settings_json import as_json

    tree = as_json(settings)
    data = tree["data"]
    data["options"] = {**data.pop("generated_options"), **data["options"]}
    tree["seeds"] = {"default": tree["seeds"], **tree.pop("seeds_by_variant")}
    del tree["grid"]  # the plan's grid is its own: the summary's variants
    return tree


def settable_names(node: Any) -> list[str]:
    """The fields of a group a ``--set`` path may name (not those only a profile sets)."""
    return [f.name for f in fields(node) if not info_of(f).profile_only]


__all__ = ["DataSettings", "RunSettings", "SettingRow", "setting_rows", "summary_tree"]
