"""Every setting of a run reachable by one path, changed by ``--set path=value`` (repeatable) and swept by
``--sweep path=v1,v2,...``: the paths are the tree of :class:`pipeline.config.run_settings.RunSettings`
(``python -m pipeline settings`` lists them), and a profile's differences are applied the same way.

    data.recipe  data.raw_dir  data.shards  data.seed      (--dataset, --raw-dir, --shards, --data-seed)
    data.image_cache_size  data.reject_budget  data.options.<recipe option>
    dedup.<setting>  split.train|val|test  doc2vec.<setting>  word_vectors.<setting>  neighbors.<setting>
    train.<setting>  eval.<setting>  tuning.<setting>
    seeds  grid                            every variant's training seeds, e.g. seeds=[0,1,2]; the variants compared
    variants.<variant or *>.<loss>.<parameter>    e.g. variants.ours.within_modality.text_weight=0.5
    variants.<variant or *>.train.<setting>       e.g. variants.*.train.learning_rate=3e-4
    variants.<variant or *>.neighbor_source | label | model_options.<option>

A value is read as JSON (``3e-4``, ``true``, ``null``, ``[0,1]``) or else as a plain string, then checked
against the setting's type and its declared range (:mod:`common.settings`). A change of ``split.val`` or
``split.test`` alone is balanced by ``split.train``. The changed settings are part of the run plan
(:mod:`pipeline.config.plan`), which every task reads; each task hashes only the settings it uses, so a change
moves the output paths of the tasks that use it and of their downstream tasks, and no other.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from common.bounded_json import COMMAND_LINE, BoundedJsonError, NotJsonError, loads_bounded
from common.registry import close_match
from common.settings import SettingValueError, info_of, typed
from pipeline.config.checks import RunConfigurationError, check_trunk
from pipeline.config.run_settings import VARIANT_KEYS, RunSettings, settable_names
from pipeline.config.variant_spec import merge_overrides

EVERY_VARIANT = "*"
#: where a mistyped path sends the reader
LISTED_BY = "python -m pipeline settings lists every path"


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    close = close_match(name, valid)
    return f" (did you mean {close!r}?)" if close else ""


def unknown(what: str, name: str, valid: Iterable[str]) -> RunConfigurationError:
    valid = sorted(valid)
    return RunConfigurationError(
        f"{what} has no setting {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)} ({LISTED_BY})"
    )


def read_value(text: str, where: str = "the value") -> Any:
    """``text`` as JSON when it is JSON (numbers, true/false/null, lists, objects), else the string itself; JSON
    beyond the bounds of a command-line value (nested too deep, an integer of too many digits, too long) is one
    line naming ``where``."""
    try:
        return loads_bounded(text, where, COMMAND_LINE)
    except NotJsonError:
        return text
    except BoundedJsonError as error:
        raise RunConfigurationError(str(error)) from None


class FlagChange(str):
    """A change a command-line flag stands for (``--seeds [0,1]`` is ``seeds=[0, 1]``): an error names the flag."""

    flag = ""


def flag_change(path: str, value: Any, flag: str) -> FlagChange:
    """``path=value`` (the value as JSON, so a string stays a string whatever it looks like), from ``flag``."""
    change = FlagChange(f"{path}={json.dumps(value, sort_keys=True)}")
    change.flag = flag
    return change


def canonical_change(change: str) -> str:
    """``path=value`` as a plan records it (its id hashes it): the path and the value's text without the
    whitespace around them, a string value without its own (as :func:`coerce` stores it) and unquoted where the
    plain text reads back as it, so ``train.trunk= top1``, ``train.trunk=" top1"`` and ``train.trunk=top1`` are one
    plan. A flag's change keeps its flag."""
    path, raw = split_change(change)
    value = read_value(raw, getattr(change, "flag", "") or f"--set {path}")
    if isinstance(value, str):
        plain = value.strip()
        raw = plain if plain and read_value(plain) == plain else json.dumps(plain)
    text = f"{path}={raw}"
    if isinstance(change, FlagChange):
        text = FlagChange(text)
        text.flag = change.flag
    return text


def split_change(change: str) -> tuple[str, str]:
    """``path=value`` -> (path, raw value); one line naming the expected shape otherwise."""
    path, equals, value = change.partition("=")
    if not equals or not path.strip():
        raise RunConfigurationError(f"--set {change!r}: expected path=value, e.g. --set neighbors.k=50")
    return path.strip(), value.strip()


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the type ``hint`` says (:func:`common.settings.typed`), its strings without the whitespace
    around them (a name or a path: whitespace there is a typing slip; :func:`canonical_change` records the change
    so); one line naming ``where`` otherwise."""
    try:
        return typed(_stripped(value), hint)
    except SettingValueError as error:
        raise RunConfigurationError(f"{where}: {error.refusal}") from None


def _stripped(value: Any) -> Any:
    """``value`` with every string in it stripped (its depth is bounded: a command line's JSON, or a profile's)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return type(value)(_stripped(item) for item in value)
    if isinstance(value, Mapping):
        return {key: _stripped(item) for key, item in value.items()}
    return value


def _replaced(node: Any, name: str, value: Any, where: str) -> Any:
    """``replace(node, name=value)``, a value its declaration refuses being one line naming ``where``."""
    try:
        return replace(node, **{name: value})
    except SettingValueError as error:
        raise RunConfigurationError(f"{where}: {error.refusal}") from None
    except ValueError as error:  # a settings class's own check of several fields
        if isinstance(error, RunConfigurationError):
            raise
        raise RunConfigurationError(f"{where}: {error}") from None


def _set(node: Any, parts: list[str], value: Any, where: str, prefix: str, from_profile: bool) -> Any:
    """``node`` (a settings object) with the setting at ``parts`` set to ``value``; ``prefix``: ``node``'s path."""
    head, rest = parts[0], parts[1:]
    names = [f.name for f in fields(node)] if from_profile else settable_names(node)
    if head not in names:
        raise unknown(prefix.rstrip(".") or "the run", head, names)
    field = next(f for f in fields(node) if f.name == head)
    current = getattr(node, head)
    if is_dataclass(current):
        if rest:
            return _replaced(node, head, _set(current, rest, value, where, f"{prefix}{head}.", from_profile), where)
        if from_profile and isinstance(value, Mapping):  # a profile sets several settings of a group at once
            for name, item in value.items():
                current = _set(current, [name], item, f"{where}.{name}", f"{prefix}{head}.", from_profile)
            return _replaced(node, head, current, where)
        example = settable_names(current)[0]
        raise RunConfigurationError(f"{where}: expected {prefix}{head}.<setting>, e.g. {prefix}{head}.{example}")
    hint = typing.get_type_hints(type(node))[head]
    if rest and isinstance(current, Mapping) and len(rest) <= 2:
        # an open mapping: data.options.<name>, loss_defaults.<loss>.<parameter> (by a profile)
        key = rest[0]
        item = value if len(rest) == 1 else {**current.get(key, {}), rest[1]: value}
        value = {**current, key: item}
    elif rest:
        raise RunConfigurationError(f"{where}: {prefix}{head} takes a value, not a sub-setting")
    value = coerce(value, hint, where)
    limit = info_of(field).limit
    if limit is not None and not limit.accepts(value):
        raise RunConfigurationError(f"{where}: {limit.refusal(value)}")
    return _replaced(node, head, value, where)


def apply_change(settings: RunSettings, path: str, value: Any, where: str = "", *, from_profile: bool = False) -> RunSettings:
    """``settings`` with the setting at ``path`` set to ``value`` (already read from text); an error names
    ``where`` (default: ``--set <path>``). ``from_profile``: a profile's difference, which may also set what
    only a profile sets (its loss defaults, its per-variant seeds, the generated dataset's options)."""
    where = where or f"--set {path}"
    parts = path.split(".")
    if parts[0] == "variants":
        return _variant_change(settings, parts, value, where)
    changed = _set(settings, parts, value, where, "", from_profile)
    if path == "seeds" and not from_profile:
        changed = replace(changed, seeds_by_variant={})  # every variant gets these seeds
    return changed


def check_train_change(train: Any, name: str, value: Any, where: str) -> None:
    """A change of training setting ``name`` is what ``--set train.<name>`` accepts (its type, its range); an
    error names ``where``."""
    try:
        _set(train, [name], value, where, "train.", False)
    except RunConfigurationError as error:
        raise RunConfigurationError(str(error) if str(error).startswith(where) else f"{where}: {error}") from None


def _variant_change(settings: RunSettings, parts: list[str], value: Any, where: str) -> RunSettings:
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
            value = getattr(_set(settings.train, [setting], value, where, "train.", False), setting)
        elif target != "model_options":
            setting, value = _loss_parameter(target, setting, value, where)
        change = {target: {setting: value}}
    merged = {key: dict(changes) for key, changes in settings.variants.items()}
    merged[name] = merge_overrides(merged.get(name, {}), change)
    return replace(settings, variants=merged)


def _loss_parameter(loss: str, name: str, value: Any, where: str) -> tuple[str, Any]:
    """A loss parameter and its value checked against its declared type (its name and range are checked when the
    variant is built, naming what is valid)."""
    from models.losses import LOSSES

    if loss not in LOSSES:
        return name, value  # not a loss: refused, naming what is valid, when the variant is built
    hints = typing.get_type_hints(LOSSES[loss].settings_class)
    return name, coerce(value, hints[name], where) if name in hints else value


def normalise_split(settings: RunSettings, changed: set[str], where: str = "--set split.*") -> RunSettings:
    """After ``split.*`` changes: when ``split.train`` was not set, it takes what the others leave; the
    shares must then sum to 1."""
    fractions = settings.split.fractions()
    if changed and "train" not in changed:
        fractions["train"] = round(1.0 - sum(v for k, v in fractions.items() if k != "train"), 10)
    if abs(sum(fractions.values()) - 1.0) > 1e-9 or min(fractions.values()) <= 0:
        raise RunConfigurationError(f"{where}: the shares {fractions} must be positive and sum to 1")
    return replace(settings, split=_replaced(settings.split, "train", fractions["train"], where))


def apply_changes(settings: RunSettings, changes: Sequence[str] | Mapping[str, Any], profile: str = "") -> RunSettings:
    """``settings`` with every change applied in order, then checked as a whole: ``path=value`` strings (the
    run's), or, with ``profile``, that profile's differences (path -> value)."""
    split_changed: set[str] = set()
    items = changes.items() if isinstance(changes, Mapping) else [(change, None) for change in changes]
    for change, given in items:
        if profile:
            path, value, where = change, given, f"profile {profile!r}: {change}"
        else:
            path, raw = split_change(change)
            where = getattr(change, "flag", "") or f"--set {path}"
            value = read_value(raw, where)
        settings = apply_change(settings, path, value, where, from_profile=bool(profile))
        if path.startswith("split"):
            split_changed.update(value if path == "split" else [path.split(".", 1)[1]])
    if split_changed:
        settings = normalise_split(settings, split_changed, f"profile {profile!r}: split" if profile else "--set split.*")
    neighbors = settings.neighbors
    if neighbors.sample_k is not None and neighbors.sample_k > neighbors.k:
        raise RunConfigurationError(f"neighbors.sample_k ({neighbors.sample_k}) cannot exceed neighbors.k ({neighbors.k})")
    check_trunk(settings.train)  # after every change: train.backbone may come after train.trunk
    check_every_variant_change(settings)
    return settings


def check_every_variant_change(settings: RunSettings) -> None:
    """A ``variants.*`` change names something some variant has (each variant's changes are built with it)."""
    from pipeline.config.variants import VARIANTS

    for key in settings.variants.get(EVERY_VARIANT, {}):
        if key not in VARIANT_KEYS and not any(key in v.loss_names() for v in VARIANTS.values()):
            raise RunConfigurationError(
                f"--set variants.*.{key}: no variant has a loss {key!r}; valid: {', '.join(VARIANT_KEYS)} or a loss name"
            )


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
