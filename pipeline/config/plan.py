"""The run plan: every setting of a run resolved once, checked once, written before any task runs
(``<run_root>/RunPlan/<id>/run_plan.json``, :mod:`pipeline.config.plan_file`) and read by every task through its
``plan`` parameter.

Where a setting comes from, later layers winning:

1. the settings' declared defaults (:class:`pipeline.config.run_settings.RunSettings` and its groups);
2. the profile's differences from them (``--profile``, :mod:`pipeline.config.profiles`);
3. the run's changes: ``--set path=value``, then the command line's other flags, each expanded into the one
   change it stands for (``--dataset pairs`` is ``data.recipe="pairs"``, ``--seeds [0,1]`` is ``seeds=[0,1]``,
   ``--variant-overrides`` one ``variants.<name>...`` change per value; :func:`flag_changes`);
4. for a variant: its row of the variant table (:mod:`pipeline.config.variants`), the profile's loss defaults
   where the row leaves a parameter unset, then the run's ``variants.*`` and ``variants.<name>`` changes.

:func:`resolve_plan` is the one place that happens. A task adds only what identifies it — a tuning trial's
point on top of its variant (:meth:`RunPlan.variant`) — and never resolves a setting itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from common.hashing import stable_hash
from common.settings import SettingValueError, significant
from data_recipes import CAPTION_GROUP_RECIPES
from models.settings import TrainSettings
from pipeline.config.changes import (
    EVERY_VARIANT,
    VARIANT_KEYS,
    apply_change,
    apply_changes,
    canonical_change,
    read_value,
    split_change,
)
from pipeline.config.checks import (
    RunConfigurationError,
    check_backbone,
    check_gpu_fit,
    check_recipe_options,
    check_trunk,
    check_tuning,
)
from pipeline.config.profiles import PROFILES
from pipeline.config.run_settings import RunSettings, summary_tree
from pipeline.config.settings_json import as_json, from_json
from pipeline.config.variant_spec import Variant, VariantError, merge_overrides
from pipeline.config.variants import VARIANTS, paper_grid, unknown_variant


@dataclass(frozen=True)
class RunPlan:
    """A run's settings, resolved: the defaults with the profile's and the run's changes (``settings``), the
    variants it compares (``grid``) and every variant it builds (``variants``, resolved)."""

    profile: str
    #: every change, as ``path=value``: the ``--set`` ones, then the flags' (:func:`flag_changes`)
    changes: tuple[str, ...]
    settings: RunSettings
    grid: tuple[str, ...]
    variants: Mapping[str, Variant]

    # ------------------------------------------------------------------ identity
    def as_json(self) -> dict[str, Any]:
        """The plan as JSON: what ``run_plan.json`` holds (its id hashes it) and :meth:`from_json` reads back."""
        return {
            "profile": self.profile,
            "changes": list(self.changes),
            "settings": as_json(self.settings),
            "grid": list(self.grid),
            "variants": {name: spec.as_json() for name, spec in self.variants.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPlan:
        return cls(
            profile=data["profile"],
            changes=tuple(data["changes"]),
            settings=from_json(RunSettings, data["settings"]),
            grid=tuple(data["grid"]),
            variants={name: Variant.from_json(spec) for name, spec in data["variants"].items()},
        )

    @cached_property
    def id(self) -> str:
        return stable_hash(self.as_json())

    # ------------------------------------------------------------------ variants
    def variant(self, name: str, point: Mapping[str, Any] | None = None) -> Variant:
        """Variant ``name`` as this run trains it, with a task's ``point`` (a tuning trial's settings, in the
        ``{"train": {...}, "<loss>": {...}}`` shape) on top."""
        if name not in self.variants:
            raise RunConfigurationError(
                f"variant {name!r} is not in this run's plan (it holds {', '.join(self.variants)}); "
                "add it with --variants"
            )
        spec = self.variants[name]
        return spec.with_overrides(point) if point else spec

    def train_settings(self, name: str, point: Mapping[str, Any] | None = None) -> TrainSettings:
        return self.variant(name, point).train_settings(self.settings.train)

    def seeds_for(self, name: str) -> tuple[int, ...]:
        return self.settings.seeds_for(name)

    def protocols(self) -> tuple[str, ...]:
        chosen = self.settings.tuning.protocol
        return ("shared", "tuned") if chosen == "both" else (chosen,)

    def tuned_variants(self) -> list[str]:
        """The grid's variants with a search space, when the tuned protocol runs."""
        if "tuned" not in self.protocols():
            return []
        return [name for name in self.grid if self.variants[name].search_space is not None]

    def shared_variants(self) -> list[str]:
        """Every variant when the shared protocol runs, else the ones not tuned (they have one setting)."""
        if "shared" in self.protocols():
            return list(self.grid)
        return [name for name in self.grid if name not in self.tuned_variants()]

    def variant_protocols(self, name: str) -> list[str]:
        return (["shared"] if name in self.shared_variants() else []) + (["tuned"] if name in self.tuned_variants() else [])

    # ------------------------------------------------------------------ data
    @property
    def recipe(self) -> str:
        return self.settings.data.recipe

    @property
    def data_seed(self) -> int:
        return self.settings.data.seed

    def shard_dirs(self) -> list[str]:
        """Every raw folder of the dataset, first ``raw_dir`` then ``shards`` in arrival order."""
        return [self.settings.data.raw_dir, *self.settings.data.shards]

    def recipe_options(self) -> dict[str, Any]:
        """The recipe's options: the profile's for the generated dataset (the recipe it was sized for), then the
        run's ``data.options``; the generated dataset's seed is the data seed unless an option sets it."""
        from data_recipes import RECIPE_BUILDERS

        generated = RECIPE_BUILDERS.tags(self.recipe)["generated"]
        options = dict(self.settings.data.generated_options) if generated else {}
        options.update(self.settings.data.options)
        if generated:
            options.setdefault("seed", self.data_seed)
        return options

    def dataset_summary(self) -> dict[str, Any]:
        data = self.settings.data
        return {
            "name": data.recipe,
            "raw_dir": data.raw_dir,
            "shards": list(data.shards),
            "options": self.recipe_options(),
            "data_seed": data.seed,
            "reject_budget": data.reject_budget,
        }

    # ------------------------------------------------------------------ what a person reads
    def summary(self) -> dict[str, Any]:
        """What ``run_plan.json`` shows a reader beside what its id hashes: the dataset, the protocols, every setting
        as the ``--set`` tree, and each variant of the grid with its losses, training settings, seeds and
        search space."""
        variants = {}
        for name in self.grid:
            spec = self.variant(name)
            tuned = name in self.tuned_variants()
            variants[name] = {
                **spec.as_dict(),
                "train": significant(spec.train_settings(self.settings.train)),
                "seeds": list(self.seeds_for(name)),
                "protocols": self.variant_protocols(name),
                "search_space": {k: list(v) for k, v in spec.search_space.values.items()} if tuned else None,
            }
        return {
            "profile": self.profile,
            "changes": list(self.changes),
            "dataset": self.dataset_summary(),
            "protocols": list(self.protocols()),
            "settings": summary_tree(self.settings),
            "variants": variants,
        }


def resolve_variant(settings: RunSettings, name: str) -> Variant:
    """Variant ``name`` as a run of ``settings`` trains it: the table's row, the profile's loss defaults where
    it leaves a parameter unset, then the run's changes to every variant (``*``) and to this one."""
    if name not in VARIANTS:
        raise unknown_variant(name)
    return VARIANTS[name].with_loss_defaults(settings.loss_defaults).with_overrides(variant_changes_for(settings, name))


def variant_changes_for(settings: RunSettings, name: str) -> dict[str, Any]:
    """The run's changes to variant ``name``: those for every variant (``*``) under those naming it. A ``*``
    change of a loss applies to the variants that have that loss."""
    losses = set(VARIANTS[name].loss_names())
    every = {
        key: value
        for key, value in settings.variants.get(EVERY_VARIANT, {}).items()
        if key in VARIANT_KEYS or key in losses
    }
    return merge_overrides(every, settings.variants.get(name, {}))


def resolve_plan(
    profile: str, changes: Sequence[str] = (), grid: Sequence[str] = (), extra: Sequence[str] = ()
) -> RunPlan:
    """The plan of a run of ``profile`` with ``changes``, comparing ``grid`` (default: the paper's tables for the
    dataset) and building the ``extra`` variants too (a task started alone); checked as a whole
    (:func:`check_plan`). A wrong value is one :class:`RunConfigurationError`."""
    if profile not in PROFILES:
        raise RunConfigurationError(PROFILES.unknown_message(profile))
    changes = tuple(canonical_change(change) for change in changes)
    settings = apply_changes(PROFILES.get(profile).settings(), changes)
    for name in [*grid, *extra]:
        if name not in VARIANTS:
            raise RunConfigurationError(str(unknown_variant(name)))
    grid = tuple(dict.fromkeys(grid)) or settings.grid or paper_grid(settings.data.recipe in CAPTION_GROUP_RECIPES)
    # every variant the run builds, and every variant a change names (checked to build, not kept)
    names = dict.fromkeys([*grid, *extra])
    changed = [n for n in settings.variants if n != EVERY_VARIANT]
    checked = set(changed) | (set(VARIANTS) if EVERY_VARIANT in settings.variants else set())
    resolved = {name: _resolved(settings, name) for name in names}
    plan = RunPlan(profile, tuple(changes), settings, grid, resolved)
    check_plan(plan, {name: _resolved(settings, name) for name in sorted(checked - set(names))})
    return plan


def _resolved(settings: RunSettings, name: str) -> Variant:
    """:func:`resolve_variant`, a change it cannot apply being one line naming the variant."""
    try:
        return resolve_variant(settings, name)
    except VariantError as error:
        raise RunConfigurationError(f"--set variants.{name}: {error}") from None


def check_plan(plan: RunPlan, also: Mapping[str, Variant]) -> None:
    """Everything a resolved plan must satisfy before any work, one :class:`RunConfigurationError` naming the
    first value that does not and what it accepts: the dataset (its recipe, raw files and options), every
    variant's losses (``also``: variants a change names that the run does not build, checked to build all the
    same), trunk and selection settings, labels, the tuning budget and the GPUs the variants ask for. What
    depends on the data's counts (an n-way task against a split) is checked by Split, before any training."""
    from data_recipes import RECIPE_BUILDERS

    s = plan.settings
    generated = RECIPE_BUILDERS.tags(plan.recipe)["generated"]
    if s.data.shards and generated:
        raise RunConfigurationError(
            f"shards need a recipe that reads raw files; the {plan.recipe} dataset is generated (change its options "
            "with --set data.options.<name>=... instead)"
        )
    if not generated:
        for path in plan.shard_dirs():
            if not path or not Path(path).exists():
                raise RunConfigurationError(f"--raw-dir / --shards: {path or '(none given)'} does not exist; the {plan.recipe} recipe reads its raw files from there")
    check_recipe_options(plan.recipe, plan.recipe_options())
    if s.doc2vec.hs == 0 and s.doc2vec.negative == 0:
        raise RunConfigurationError("doc2vec: hs=0 and negative=0 leave Doc2Vec no output layer to train; set doc2vec.hs=1 or doc2vec.negative>0")
    for name, spec in [*plan.variants.items(), *also.items()]:
        try:
            spec.build_losses()  # a value a loss refuses (a negative weight) stops the run now
        except (VariantError, ValueError, TypeError) as error:
            raise RunConfigurationError(f"--set variants.{name}: {error}") from None
    for name in plan.variants:
        try:
            train = plan.train_settings(name)  # the profile's, the variant's row's and the run's, made one object
        except SettingValueError as error:
            raise RunConfigurationError(f"variant {name}: train.{error}") from None
        except ValueError as error:  # TrainSettings' own check of several fields
            raise RunConfigurationError(f"variant {name}: {error}") from None
        check_training(name, train)
    labels = [plan.variants[name].label for name in plan.grid]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise RunConfigurationError(
            f"variant labels {repeated} name several variants of the run: the report's rows and headline would "
            "read alike; give each its own with --set variants.<name>.label=..."
        )
    check_tuning(s, plan.tuned_variants(), plan.variants)
    check_gpu_fit({name: plan.train_settings(name).nproc_per_node for name in plan.grid})


def check_training(name: str, t: TrainSettings) -> None:
    """A variant's training settings that only a later task would refuse: its image trunk, and a selection
    sample too small for the n-way task that scores it."""
    check_backbone(t.backbone, f"variant {name}: train.backbone")
    check_trunk(t, f"variant {name}: ")
    if t.trunk_mode.cached_features and t.horizontal_flip:
        raise RunConfigurationError(
            f"variant {name}: train.horizontal_flip needs pixels, but train.trunk={t.trunk} trains on cached trunk "
            "features: set train.horizontal_flip=false"
        )
    if t.selection_metric.n_way and t.selection_max_pairs < t.selection_n_way:
        raise RunConfigurationError(
            f"variant {name}: train.selection_max_pairs ({t.selection_max_pairs}) is below the n-way task it "
            f"selects by (train.selection_n_way {t.selection_n_way}): raise it"
        )


def with_change(plan: RunPlan, extra: str, flag: str = "--sweep") -> RunPlan:
    """``plan`` resolved again with one more change (a sweep's value); an error in it names ``flag``."""
    path, raw = split_change(extra)
    apply_change(plan.settings, path, read_value(raw, f"{flag} {path}"), f"{flag} {path}")  # its own value's one line first
    return resolve_plan(plan.profile, (*plan.changes, extra), plan.grid, [n for n in plan.variants if n not in plan.grid])


def plan_summary(summary: Mapping[str, Any]) -> list[str]:
    """A few lines a person reads first of a plan's :meth:`RunPlan.summary`: the profile, the changes, the grid
    (``python -m pipeline plan`` and the report's run plan section)."""
    lines = [f"profile {summary['profile']}, dataset {summary['dataset']['name']}, protocols {', '.join(summary['protocols'])}"]
    lines.append("changes: " + (", ".join(summary["changes"]) if summary["changes"] else "none (the profile as it is)"))
    lines.append(
        "variants: "
        + ", ".join(f"{name} (seeds {v['seeds']}, {'+'.join(v['protocols'])})" for name, v in summary["variants"].items())
    )
    return lines


__all__ = [
    "RunPlan",
    "plan_summary",
    "resolve_plan",
    "resolve_variant",
    "with_change",
]
