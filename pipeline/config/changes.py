"""Every setting of a run reachable by one path, changed by ``--set path=value`` (repeatable) and swept by
``--sweep path=v1,v2,...``: the profile's settings as one tree, the changes applied to it once, checked once.

The tree (``settings_tree``)::

    data.recipe  data.raw_dir  data.shards  data.seed      (--dataset, --raw-dir, --shards, --data-seed)
    data.image_cache_size  data.reject_budget  data.options.<recipe option>
    dedup.threshold  dedup.num_perm  dedup.shingle_size
    split.train  split.val  split.test
    doc2vec.<field>  word_vectors.<field>  neighbors.<field>  train.<field>  eval.<field>  tuning.<field>
    seeds                                  every variant's training seeds, e.g. seeds=[0,1,2]
    variants.<variant or *>.<loss>.<parameter>    e.g. variants.ours.within_modality.text_weight=0.5
    variants.<variant or *>.train.<field>         e.g. variants.*.train.learning_rate=3e-4
    variants.<variant or *>.neighbor_source | label | model_options.<option>

A value is read as JSON (``3e-4``, ``true``, ``null``, ``[0,1]``) or else as a plain string, then checked
against the setting's type. A change of ``split.val`` or ``split.test`` alone is balanced by ``split.train``.
The changed profile is part of the run plan (:mod:`pipeline.config.plan`), which every task reads; each task
hashes only the settings it uses, so a change moves the output paths of the tasks that use it and of their
downstream tasks, and no other.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from common.registry import close_match
from pipeline.config.checks import RunConfigurationError
from pipeline.config.profiles import Profile
from pipeline.config.variant_spec import merge_overrides

#: the profile's settings groups that are dataclasses, reached as ``<group>.<field>``
SECTIONS = ("doc2vec", "word_vectors", "neighbors", "train", "eval", "tuning")
#: groups of flat Profile fields: path -> Profile field
FLAT = {
    "data.recipe": "recipe",
    "data.raw_dir": "raw_dir",
    "data.shards": "shards",
    "data.seed": "data_seed",
    "data.image_cache_size": "image_cache_size",
    "data.reject_budget": "reject_budget",
    "dedup.threshold": "dedup_threshold",
    "dedup.num_perm": "dedup_num_perm",
    "dedup.shingle_size": "dedup_shingle_size",
}
TOP_LEVEL = ("data", "dedup", "split", *SECTIONS, "seeds", "variants")
#: what a variant change may reach besides its losses
VARIANT_KEYS = ("train", "model_options", "neighbor_source", "label")
EVERY_VARIANT = "*"


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    close = close_match(name, valid)
    return f" (did you mean {close!r}?)" if close else ""


def unknown(what: str, name: str, valid: Iterable[str]) -> RunConfigurationError:
    valid = sorted(valid)
    return RunConfigurationError(f"{what} has no setting {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")


def read_value(text: str) -> Any:
    """``text`` as JSON when it is JSON (numbers, true/false/null, lists, objects), else the string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class FlagChange(str):
    """A change a command-line flag stands for (``--seeds [0,1]`` is ``seeds=[0, 1]``): an error names the flag."""

    flag = ""


def flag_change(path: str, value: Any, flag: str) -> FlagChange:
    """``path=value`` (the value as JSON, so a string stays a string whatever it looks like), from ``flag``."""
    change = FlagChange(f"{path}={json.dumps(value, sort_keys=True)}")
    change.flag = flag
    return change


def split_change(change: str) -> tuple[str, str]:
    """``path=value`` -> (path, raw value); one line naming the expected shape otherwise."""
    path, equals, value = change.partition("=")
    if not equals or not path.strip():
        raise RunConfigurationError(f"--set {change!r}: expected path=value, e.g. --set neighbors.k=50")
    return path.strip(), value.strip()


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the type ``hint`` says (an int is a float too, a list a tuple); one line otherwise."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return coerce(value, option, where)
            except RunConfigurationError:
                continue
        raise RunConfigurationError(f"{where}: {value!r} is not {_type_name(hint)}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # JSON's NaN, Infinity and 1e400 parse; no setting takes them
                raise RunConfigurationError(f"{where}: {value!r} is not a finite number")
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            item = typing.get_args(hint)[0]
            return tuple(coerce(v, item, where) for v in value)
    elif origin is dict or hint is dict:
        if isinstance(value, dict):
            return value
    else:
        return value  # Any, Mapping[...]: checked by whoever reads it
    raise RunConfigurationError(f"{where}: {value!r} is not {_type_name(hint)}")


def _type_name(hint: Any) -> str:
    name = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}.get(hint)
    if name:
        return name
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(option) for option in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {_type_name(typing.get_args(hint)[0]).split(' ', 1)[-1]}s"
    return str(hint)


def _each(test: Any) -> Any:
    """A test of every item of a list setting (and that there is one)."""
    return lambda values: bool(values) and all(test(v) for v in values)


#: the range of the settings whose type alone lets nonsense through: path -> (test, what it must be)
LIMITS: dict[str, tuple[Any, str]] = {
    "train.lr_patience": (lambda v: v >= 0, ">= 0"),
    "train.lr_factor": (lambda v: 0 < v < 1, "in (0, 1)"),
    "train.early_stopping_patience": (lambda v: v is None or v >= 1, ">= 1 or null"),
    "train.selection_max_pairs": (lambda v: v >= 2, ">= 2"),
    "train.selection_n_way": (lambda v: v >= 2, ">= 2"),
    **{f"train.{name}": (lambda v: v >= 1, ">= 1") for name in ("nproc_per_node", "nnodes", "prefetch_batches", "log_every_steps")},
    "train.num_workers": (lambda v: v is None or v >= 0, ">= 0 or null"),
    "word_vectors.max_vocab": (lambda v: v >= 1, ">= 1"),
    **{f"doc2vec.{name}": (lambda v: v in (0, 1), "0 or 1") for name in ("dm", "hs")},
    "doc2vec.negative": (lambda v: v >= 0, ">= 0"),
    "neighbors.search_k": (lambda v: v == -1 or v >= 1, "-1 (Annoy's default) or >= 1"),
    "neighbors.recall_queries": (lambda v: v >= 0, ">= 0"),
    "eval.preservation_ks": (_each(lambda v: v >= 1), "a list of k >= 1"),
    "eval.paper_preservation_ratio": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "tuning.trial_seeds": (_each(lambda v: v >= 0), "a list of seeds >= 0"),
    "tuning.draw_seed": (lambda v: v >= 0, ">= 0"),
    "tuning.extended_epochs": (lambda v: v is None or v >= 1, ">= 1 or null"),
    "tuning.bootstrap_resamples": (lambda v: v >= 1, ">= 1"),
    "data.seed": (lambda v: v >= 0, ">= 0"),
    **{f"train.{name}": (lambda v: v >= 1, ">= 1") for name in ("epochs", "batch_size", "embed_dim", "gru_hidden", "max_text_tokens", "image_size")},
    "train.learning_rate": (lambda v: v > 0, "> 0"),
    "train.weight_decay": (lambda v: v >= 0, ">= 0"),
    **{f"{group}.{name}": (lambda v: v >= 1, ">= 1") for group in ("doc2vec", "word_vectors") for name in ("vector_size", "window", "min_count", "epochs")},
    "doc2vec.infer_epochs": (lambda v: v >= 1, ">= 1"),
    **{f"neighbors.{name}": (lambda v: v is None or v >= 1, ">= 1") for name in ("k", "sample_k", "n_trees")},
    "eval.n_way": (lambda v: v >= 2, ">= 2"),
    **{f"eval.{name}": (lambda v: v >= 1, ">= 1") for name in ("redraws", "preservation_k", "topic_k", "bootstrap_resamples")},
    "dedup.threshold": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "dedup.num_perm": (lambda v: v >= 2, ">= 2"),
    "dedup.shingle_size": (lambda v: v >= 1, ">= 1"),
    "data.reject_budget": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "data.image_cache_size": (lambda v: v >= 8, ">= 8"),
}


def check_limit(path: str, value: Any, where: str) -> None:
    """One line when ``value`` is out of the range :data:`LIMITS` gives ``path``."""
    test, must = LIMITS.get(path, (None, ""))
    if test is not None and not test(value):
        raise RunConfigurationError(f"{where}: must be {must}, got {value!r}")


def _set_field(obj: Any, name: str, value: Any, where: str, what: str) -> Any:
    """``replace(obj, name=value)`` for a dataclass, the value checked against the field's type."""
    hints = typing.get_type_hints(type(obj))
    if name not in {f.name for f in fields(obj)}:
        raise unknown(what, name, [f.name for f in fields(obj)])
    value = coerce(value, hints[name], where)
    check_limit(f"{what}.{name}", value, where)
    try:
        return replace(obj, **{name: value})
    except ValueError as error:  # the settings' own checks (__post_init__)
        if isinstance(error, RunConfigurationError):
            raise
        raise RunConfigurationError(f"{where}: {error}") from None


def check_train_change(train: Any, name: str, value: Any, where: str) -> None:
    """A change of training setting ``name`` is what ``--set train.<name>`` accepts (its type, its range); an
    error names ``where``."""
    try:
        _set_field(train, name, value, where, "train")
    except RunConfigurationError as error:
        raise RunConfigurationError(str(error) if str(error).startswith(where) else f"{where}: {error}") from None


def apply_change(profile: Profile, path: str, value: Any, where: str = "") -> Profile:
    """``profile`` with the setting at ``path`` set to ``value`` (already read from text); an error names
    ``where`` (default: ``--set <path>``)."""
    where = where or f"--set {path}"
    parts = path.split(".")
    head = parts[0]
    if head not in TOP_LEVEL:
        raise unknown("the run", head, TOP_LEVEL)
    if head in SECTIONS:
        if len(parts) != 2:
            raise RunConfigurationError(f"{where}: expected {head}.<setting>, e.g. {head}.{fields(getattr(profile, head))[0].name}")
        return replace(profile, **{head: _set_field(getattr(profile, head), parts[1], value, where, head)})
    if head in ("data", "dedup") and path in FLAT:
        check_limit(path, value, where)
        return _set_field(profile, FLAT[path], value, where, head)
    if head == "data" and len(parts) == 3 and parts[1] == "options":
        # checked against the recipe's options when the dataset is known (FullRun.check)
        return replace(profile, recipe_option_changes={**profile.recipe_option_changes, parts[2]: value})
    if head in ("data", "dedup"):
        valid = [p.split(".", 1)[1] for p in FLAT if p.startswith(head + ".")] + (["options.<name>"] if head == "data" else [])
        raise unknown(head, ".".join(parts[1:]), valid)
    if head == "split":
        return replace(profile, split_fractions=_split_change(profile.split_fractions, parts, value, where))
    if head == "seeds":
        seeds = coerce(value, tuple[int, ...], where)
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise RunConfigurationError(f"{where}: give distinct seeds >= 0, at least one, e.g. seeds=[0,1,2]; got {list(seeds)}")
        return replace(profile, seeds=seeds, seeds_by_variant={})
    return _variant_change(profile, parts, value, where)


def _split_change(fractions: Mapping[str, float], parts: list[str], value: Any, where: str) -> dict[str, float]:
    if len(parts) != 2 or parts[1] not in fractions:
        raise unknown("split", ".".join(parts[1:]), fractions)
    share = coerce(value, float, where)
    if not 0 < share < 1:
        raise RunConfigurationError(f"{where}: a split's share must be between 0 and 1, got {share}")
    return {**fractions, parts[1]: share}


def _variant_change(profile: Profile, parts: list[str], value: Any, where: str) -> Profile:
    from pipeline.config.variants import VARIANTS

    if len(parts) < 3:
        raise RunConfigurationError(
            f"{where}: expected variants.<variant or *>.<loss or {'|'.join(VARIANT_KEYS)}>[.<name>], "
            "e.g. variants.*.train.learning_rate=3e-4"
        )
    name, target, rest = parts[1], parts[2], parts[3:]
    if name != EVERY_VARIANT and name not in VARIANTS:
        raise RunConfigurationError(f"{where}: unknown variant {name!r}{did_you_mean(name, VARIANTS)}; valid: {', '.join(sorted(VARIANTS))}, or * for every variant")
    if target in ("neighbor_source", "label"):
        if rest:
            raise RunConfigurationError(f"{where}: {target} takes a value, not a sub-setting")
        if target == "label" and name == EVERY_VARIANT:
            raise RunConfigurationError(f"{where}: one label for every variant would make the report's rows alike")
        change: dict[str, Any] = {target: value}
    else:
        if len(rest) != 1:
            raise RunConfigurationError(f"{where}: expected variants.{name}.{target}.<name>")
        setting = rest[0]
        if target == "train":
            # the name, the type and the range checked as for train.<setting>; the value as it was coerced
            value = getattr(_set_field(profile.train, setting, value, where, "train"), setting)
        elif target != "model_options":
            setting, value = _loss_parameter(target, setting, value, where)
        change = {target: {setting: value}}
    merged = {key: dict(changes) for key, changes in profile.variant_overrides.items()}
    merged[name] = merge_overrides(merged.get(name, {}), change)
    return replace(profile, variant_overrides=merged)


def _loss_parameter(loss: str, name: str, value: Any, where: str) -> tuple[str, Any]:
    """A loss parameter and its value checked against the constructor's type (its name is checked when the
    variant is built, naming what is valid)."""
    from models.losses import LOSSES

    if loss not in LOSSES:
        return name, value  # not a loss: refused, naming what is valid, when the variant is built
    hints = typing.get_type_hints(LOSSES[loss].__init__)
    return name, coerce(value, hints[name], where) if name in hints else value


def normalise_split(profile: Profile, changed: set[str]) -> Profile:
    """After ``split.*`` changes: when ``split.train`` was not set, it takes what the others leave; the
    shares must then sum to 1."""
    fractions = dict(profile.split_fractions)
    if changed and "train" not in changed and "train" in fractions:
        fractions["train"] = round(1.0 - sum(v for k, v in fractions.items() if k != "train"), 10)
    total = sum(fractions.values())
    if abs(total - 1.0) > 1e-9 or min(fractions.values()) <= 0:
        raise RunConfigurationError(f"--set split.*: the shares {fractions} must be positive and sum to 1")
    return replace(profile, split_fractions=fractions)


def apply_changes(profile: Profile, changes: Sequence[str]) -> Profile:
    """``profile`` with every ``path=value`` of ``changes`` applied in order, then checked as a whole."""
    split_changed: set[str] = set()
    for change in changes:
        path, raw = split_change(change)
        profile = apply_change(profile, path, read_value(raw), getattr(change, "flag", ""))
        if path.startswith("split."):
            split_changed.add(path.split(".", 1)[1])
    if split_changed:
        profile = normalise_split(profile, split_changed)
    if profile.neighbors.sample_k is not None and profile.neighbors.sample_k > profile.neighbors.k:
        raise RunConfigurationError(
            f"neighbors.sample_k ({profile.neighbors.sample_k}) cannot exceed neighbors.k ({profile.neighbors.k})"
        )
    check_every_variant_change(profile)
    return profile


def check_every_variant_change(profile: Profile) -> None:
    """A ``variants.*`` change names something some variant has (each variant's changes are built with it)."""
    from pipeline.config.variants import VARIANTS

    for key in profile.variant_overrides.get(EVERY_VARIANT, {}):
        if key not in VARIANT_KEYS and not any(key in v.loss_names() for v in VARIANTS.values()):
            raise RunConfigurationError(
                f"--set variants.*.{key}: no variant has a loss {key!r}; valid: {', '.join(VARIANT_KEYS)} or a loss name"
            )


def settings_tree(profile: Profile) -> dict[str, Any]:
    """The resolved settings as the tree ``--set`` paths reach (what ``run_plan.json`` shows)."""
    tree: dict[str, Any] = {
        "data": {
            "recipe": profile.recipe,
            "raw_dir": profile.raw_dir,
            "shards": list(profile.shards),
            "seed": profile.data_seed,
            "image_cache_size": profile.image_cache_size,
            "reject_budget": profile.reject_budget,
            "options": {**profile.dataset_options, **profile.recipe_option_changes},
        },
        "dedup": {p.split(".")[1]: getattr(profile, f) for p, f in FLAT.items() if p.startswith("dedup.")},
        "split": dict(profile.split_fractions),
    }
    for section in SECTIONS:
        value = getattr(profile, section)
        tree[section] = {f.name: getattr(value, f.name) for f in fields(value)} if is_dataclass(value) else value
    tree["seeds"] = {"default": list(profile.seeds), **{k: list(v) for k, v in profile.seeds_by_variant.items()}}
    tree["loss_defaults"] = {k: dict(v) for k, v in profile.loss_defaults.items()}
    tree["variants"] = {k: dict(v) for k, v in profile.variant_overrides.items()}
    return tree


def sweep_values(sweep: str) -> tuple[str, list[str]]:
    """``path=v1,v2,...`` -> (path, raw values); commas inside brackets belong to a value (``[0,1],[2]``)."""
    path, equals, raw = sweep.partition("=")
    path = path.strip()
    if not equals or not path:
        raise RunConfigurationError(f"--sweep {sweep!r}: expected path=v1,v2,..., e.g. --sweep neighbors.k=10,20,50")
    values, depth, current = [], 0, ""
    for char in raw:
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    empty = [str(i + 1) for i, value in enumerate(values) if not value]
    if empty and raw.strip():
        raise RunConfigurationError(
            f"--sweep {sweep!r}: value {', '.join(empty)} is empty (two commas, or one at an end); give each value, "
            "e.g. --sweep neighbors.k=10,20,50"
        )
    values = [v for v in values if v]
    if len(values) < 2 or len(set(values)) != len(values):
        raise RunConfigurationError(f"--sweep {sweep!r}: give two or more distinct values, e.g. --sweep neighbors.k=10,20,50")
    return path, values
