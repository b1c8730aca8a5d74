"""Settings as JSON and back: ``run_plan.json`` holds the resolved settings (:class:`pipeline.config.run_settings.
RunSettings`) in the tree's own shape, and a task that reads the plan from its file (a spawned GPU process, a later
run) gets the same frozen objects its planner had.

Why by the type hints and not ``pickle``: the file stays readable and diffable, and a field that changed type
is refused at read instead of being carried silently.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from common.settings import SETTING


def switched_off_since_1_0(field: dataclasses.Field, value: Any) -> bool:
    """Whether ``field`` is a setting added after 1.0 whose default, null, switches a feature off, at that default.
    Such a field is left out of the JSON (and so of the plan's id and the report's identity): adding it moves no
    run's plan or report, as a task's hash leaves it out (``common.settings.significant``); reading the JSON back
    gives it its default. Only null defaults: the settings added after 1.0 before this rule (with other defaults)
    were in every plan's id from the start, and leaving them out now would move those plans."""
    info = field.metadata.get(SETTING)
    return info is not None and info.added_after_1_0 and value is None and field.default is None


def as_json(value: Any) -> Any:
    """A settings object (nested ones included) as plain JSON values: tuples become lists, mappings dicts; a
    setting added after 1.0 that is off is left out (:func:`switched_off_since_1_0`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: as_json(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not switched_off_since_1_0(f, getattr(value, f.name))
        }
    if isinstance(value, Mapping):
        return {str(key): as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    return value


def from_json(hint: Any, value: Any) -> Any:
    """``value`` (as :func:`as_json` wrote it) as the type ``hint`` names: settings objects rebuilt field by field
    (and so checked against their declared ranges), lists as tuples where the field is a tuple; other values as
    they are."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(hint) if option is not type(None)]
        return from_json(options[0], value) if len(options) == 1 else value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        known = {f.name for f in dataclasses.fields(hint)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"{hint.__name__} has no field(s) {unknown}: the file was written by other code")
        return hint(**{name: from_json(hints[name], item) for name, item in value.items()})
    if origin is tuple:
        item_hint = typing.get_args(hint)[0]
        return tuple(from_json(item_hint, item) for item in value)
    if origin in (dict, Mapping) or hint is dict:
        args = typing.get_args(hint)
        item_hint = args[1] if len(args) == 2 else Any
        return {key: from_json(item_hint, item) for key, item in value.items()}
    return value
