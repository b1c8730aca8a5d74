"""What a method variant is, as typed data checked when it is built: its losses (registry names and
parameters), model, where its semantic neighbors come from, its training-setting changes and the search
space a fair tuning explores. A typo in any name stops the run at once with the bad key and the valid ones,
instead of deep inside training.

The table of variants is :mod:`pipeline.config.variants`; the run plan (:func:`pipeline.config.plan.resolve_variant`)
applies a profile's loss defaults and the run's changes to one of them, and a task's point on top.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from common.settings import SettingValueError, default_of
from models.losses import LOSSES, Loss, build_loss
from models.losses.settings import parameter_names
from models.registry import model_options, option_names
from models.settings import TrainSettings

NEIGHBOR_SOURCES = ("text", "image", None)
TRAIN_SETTINGS = frozenset(f.name for f in fields(TrainSettings))


class VariantError(ValueError):
    """A variant, override or search space names something that does not exist; the message says what does."""


def check_names(what: str, given: Mapping[str, Any] | set[str], valid: list[str] | frozenset[str]) -> None:
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise VariantError(f"unknown {what} {unknown}; valid: {sorted(valid)}")


@dataclass(frozen=True)
class LossSpec:
    """A registered loss by name, with the parameters its constructor takes."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise VariantError(LOSSES.unknown_message(self.name))
        # a deprecated loss name is its new name (one output hash, one plan)
        object.__setattr__(self, "name", LOSSES.resolve(self.name))
        check_names(f"parameter(s) of loss {self.name!r}", self.params, parameter_names(LOSSES[self.name].settings_class))

    def build(self) -> Loss:
        return build_loss(self.name, **self.params)

    def changed(self, **params: Any) -> LossSpec:
        """This loss with ``params`` changed (an ablation of one term)."""
        return LossSpec(self.name, {**self.params, **params})

    def resolved_params(self) -> dict[str, Any]:
        """Every parameter of the loss with its value: the given ones, the declared defaults for the rest (so a
        loss spelled with or without a default value is one loss, with one output hash)."""
        defaults = {field.name: default_of(field) for field in fields(LOSSES[self.name].settings_class)}
        return {**defaults, **self.params}

    def as_dict(self) -> dict[str, Any]:
        """What a task hashes and records: every parameter, each under the name the loss's output identity
        spells it with (``Loss.identity_names``: Eq. 8's weights are hashed as the paper's α, β)."""
        spelled = getattr(LOSSES[self.name], "identity_names", {})
        return {"name": self.name, "params": {spelled.get(k, k): v for k, v in self.resolved_params().items()}}


#: joins the paths of one knob that sets several parameters to the same value (e.g. one angle for both the
#: cross-modal and the within-modality angular terms of Ours)
TIED = "+"


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values per knob. A knob is a path ``--variant-overrides`` reaches a setting by
    (``train.<setting>`` or ``<loss name>.<parameter>``), or several joined by ``+`` that take the same value
    (``angular.alpha_degrees+within_modality.alpha_degrees``). Its points are the grid of every combination,
    in knob order."""

    values: Mapping[str, tuple[Any, ...]]

    def __post_init__(self) -> None:
        bad = [
            knob
            for knob, candidates in self.values.items()
            if not candidates or any(path.count(".") != 1 for path in knob.split(TIED))
        ]
        if bad:
            raise VariantError(
                f"search space knobs must be '<train or loss>.<name>' (several joined by '{TIED}') with "
                f"candidates, got {bad}"
            )

    def paths(self) -> list[str]:
        """Every setting path the space changes."""
        return [path for knob in self.values for path in knob.split(TIED)]

    def grid(self) -> list[dict[str, Any]]:
        """Every combination as a flat ``{knob: value}`` (what a report shows)."""
        knobs = sorted(self.values)
        return [dict(zip(knobs, combination, strict=True)) for combination in itertools.product(*(self.values[k] for k in knobs))]

    @staticmethod
    def overrides(point: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """A flat ``{knob: value}`` as ``--variant-overrides`` changes (``{"train": {"learning_rate": 0.001}}``)."""
        changes: dict[str, dict[str, Any]] = {}
        for knob, value in point.items():
            for path in knob.split(TIED):
                target, name = path.split(".")
                changes.setdefault(target, {})[name] = value
        return changes

    def points(self) -> list[dict[str, dict[str, Any]]]:
        """Every combination as ``--variant-overrides`` changes."""
        return [self.overrides(point) for point in self.grid()]

    def trials(self, budget: int, seed: int) -> list[dict[str, Any]]:
        """``budget`` flat points, in grid order: all of them when the grid has exactly that many, else a
        *balanced* sample drawn with ``seed`` — every value of every knob tried as evenly as the budget allows
        (counts differing by at most one), so a sample never leaves out a whole learning rate or angle, as a
        plain random draw can (6 of a 3 x 3 grid drawn at random can be two learning rates, three margins
        each). A larger space is sampled, never given more trials; a budget above the grid's size is
        refused, so every variant of a comparison gets exactly ``budget`` trials."""
        grid = self.grid()
        if budget > len(grid):
            raise VariantError(
                f"a tuning budget of {budget} trials exceeds this search space's {len(grid)} points "
                f"({dict(self.values)}): lower the budget for every variant, or widen this space"
            )
        if budget == len(grid):
            return grid
        return [grid[i] for i in sorted(balanced_sample(grid, budget, np.random.default_rng(seed)))]


def balanced_sample(grid: list[dict[str, Any]], budget: int, rng: np.random.Generator) -> list[int]:
    """Indices of ``budget`` distinct points of a full grid in which every knob's values occur as evenly as
    possible (each ``budget // n`` times, ``budget % n`` of them, drawn at random, once more): the values each
    knob gets are drawn first, then assigned to distinct points by a randomised depth-first search. Above half
    the grid the points *left out* are drawn that way instead (in a full grid the rest is then balanced too)."""
    if 2 * budget > len(grid):
        left_out = set(balanced_sample(grid, len(grid) - budget, rng))
        return [i for i in range(len(grid)) if i not in left_out]
    knobs = list(grid[0])
    levels = [list(dict.fromkeys(point[knob] for point in grid)) for knob in knobs]
    index_of = {tuple(point[knob] for knob in knobs): i for i, point in enumerate(grid)}
    for _ in range(1000):  # a draw no distinct assignment fits quickly is drawn again
        quota = []
        for values in levels:
            extra = set(rng.choice(len(values), size=budget % len(values), replace=False).tolist())
            quota.append([budget // len(values) + (i in extra) for i in range(len(values))])
        rows: list[tuple[int, ...]] = []
        if _assign(quota, rows, budget, rng, steps=[200]):
            return [index_of[tuple(levels[k][i] for k, i in enumerate(row))] for row in rows]
    raise VariantError(f"no balanced sample of {budget} points found in this grid")  # pragma: no cover


def _assign(
    quota: list[list[int]], rows: list[tuple[int, ...]], budget: int, rng: np.random.Generator, steps: list[int]
) -> bool:
    """Extend ``rows`` (level indices per knob) to ``budget`` distinct rows within each level's ``quota``,
    giving up after ``steps[0]`` tries (the caller then draws again)."""
    if len(rows) == budget:
        return True
    options = [
        combo
        for combo in itertools.product(*(range(len(q)) for q in quota))
        if combo not in rows and all(quota[k][i] > 0 for k, i in enumerate(combo))
    ]
    for pick in rng.permutation(len(options)):
        steps[0] -= 1
        if steps[0] < 0:
            return False
        combo = options[pick]
        rows.append(combo)
        for k, i in enumerate(combo):
            quota[k][i] -= 1
        if _assign(quota, rows, budget, rng, steps):
            return True
        rows.pop()
        for k, i in enumerate(combo):
            quota[k][i] += 1
    return False


@dataclass(frozen=True)
class Variant:
    """One method of the comparison grid."""

    name: str
    label: str
    losses: tuple[LossSpec, ...]
    model: str = "vse"
    #: "text" (Doc2Vec neighbors, the paper's method), "image" (CNN-feature neighbors) or None
    neighbor_source: str | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)
    #: training settings this variant changes (``TrainSettings`` fields)
    train: Mapping[str, Any] = field(default_factory=dict)
    #: what a tuned comparison explores for this variant (None: it is not tuned)
    search_space: SearchSpace | None = None

    def __post_init__(self) -> None:
        if not self.losses:
            raise VariantError(f"variant {self.name!r} has no loss")
        try:
            options = option_names(self.model)
        except KeyError as error:
            raise VariantError(error.args[0]) from None
        check_names(f"model option(s) of {self.model!r}", self.model_options, options)
        try:
            model_options(self.model, self.model_options, "model_options")  # each option's type and range
        except SettingValueError as error:
            raise VariantError(f"{error.name}: {error.refusal}") from None
        if self.neighbor_source not in NEIGHBOR_SOURCES:
            raise VariantError(f"neighbor_source {self.neighbor_source!r} is unknown; valid: {NEIGHBOR_SOURCES}")
        check_names("training setting(s)", self.train, TRAIN_SETTINGS)
        if self.search_space is not None:
            if "train.epochs" in self.search_space.paths():
                raise VariantError(
                    "train.epochs is no tuning knob: the tuned protocol sets how long trials train (its rungs "
                    "and the extended cap); search the settings of the method instead"
                )
            unsearched = replace(self, search_space=None)
            for path in self.search_space.paths():
                target, name = path.split(".")
                unsearched.with_overrides({target: {name: None}})  # the same checks as an override of it

    def loss_names(self) -> list[str]:
        return [loss.name for loss in self.losses]

    def with_overrides(self, overrides: Mapping[str, Any]) -> Variant:
        """This variant with ``--variant-overrides``-shaped changes: a loss name -> parameters to change,
        ``train`` -> training settings (merged), ``model_options`` (merged), ``neighbor_source``, ``label``."""
        changes: dict[str, Any] = {}
        losses = list(self.losses)
        for key, value in overrides.items():
            if key in ("neighbor_source", "label"):
                changes[key] = value
            elif key in ("model_options", "train"):
                changes[key] = {**changes.get(key, getattr(self, key)), **dict(value)}
            elif key in self.loss_names():
                losses = [replace(loss, params={**loss.params, **dict(value)}) if loss.name == key else loss for loss in losses]
            else:
                raise VariantError(
                    f"override {key!r} does not match variant {self.name!r}: its losses are {self.loss_names()}; "
                    "other keys: train, model_options, neighbor_source, label"
                )
        return replace(self, losses=tuple(losses), **changes)

    def with_loss_defaults(self, defaults: Mapping[str, Mapping[str, Any]]) -> Variant:
        """Parameters a profile sets for every variant using a loss, where this variant leaves them unset."""
        losses = tuple(replace(loss, params={**defaults.get(loss.name, {}), **loss.params}) for loss in self.losses)
        return replace(self, losses=losses)

    def train_settings(self, base: TrainSettings) -> TrainSettings:
        """A profile's training settings with this variant's changes."""
        return replace(base, **self.train)

    def build_losses(self) -> list[Loss]:
        return [loss.build() for loss in self.losses]

    def as_json(self) -> dict[str, Any]:
        """Everything this variant is, as JSON (:meth:`from_json` builds it back): what a run plan holds."""
        return {
            **self._described(),
            "losses": [{"name": loss.name, "params": dict(loss.params)} for loss in self.losses],
            "train": dict(self.train),
            "search_space": None if self.search_space is None else {k: list(v) for k, v in self.search_space.values.items()},
        }

    def _described(self) -> dict[str, Any]:
        """What the JSON and the hashed form both say of the variant besides its losses."""
        return {
            "name": self.name,
            "label": self.label,
            "model": self.model,
            "model_options": dict(self.model_options),
            "neighbor_source": self.neighbor_source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Variant:
        space = data["search_space"]
        return cls(
            name=data["name"],
            label=data["label"],
            losses=tuple(LossSpec(loss["name"], loss["params"]) for loss in data["losses"]),
            model=data["model"],
            neighbor_source=data["neighbor_source"],
            model_options=data["model_options"],
            train=data["train"],
            search_space=None if space is None else SearchSpace({k: tuple(v) for k, v in space.items()}),
        )

    def as_dict(self) -> dict[str, Any]:
        """What a task hashes and a bundle records (``train`` and ``search_space`` apart: Train hashes the
        resolved training settings, a Tune its trials)."""
        return {**self._described(), "losses": [loss.as_dict() for loss in self.losses]}


def merge_overrides(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """``--variant-overrides``-shaped changes, later layers winning per key inside each target."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = dict(value) if isinstance(value, Mapping) else value
    return merged
