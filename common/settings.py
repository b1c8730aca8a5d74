"""Settings declared once: each field of a settings class carries its default, its range or choices, whether it
changes what is computed (significant) or only how fast (operational), whether it came after 1.0, and a
one-line description (:func:`setting`). Everything else reads the declaration: a settings object refuses a value
out of range when it is made (:func:`check_declared`, called by each class's ``__post_init__``), the hash keeps
the significant fields (:func:`significant`), and the run's settings tree lists, checks and documents its paths
from it (:mod:`pipeline.config.run_settings`).

Only the standard library: every package declares its settings with it (``common`` is the bottom layer).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: a field's metadata key holding its :class:`SettingInfo`
SETTING = "setting"
#: the default of a field that has none: every object is made with it, and a file must hold it (a record's model)
REQUIRED: Any = dataclasses.MISSING
#: how a refusal names an object read from a file as a whole (an unknown field of it, or not an object at all)
WHOLE_OBJECT = "(the whole object)"


@dataclass(frozen=True)
class Limit:
    """The values a setting accepts beyond its type: a test, and how to say it (``in (0, 1]``, ``>= 1 or null``).
    ``names``: the choices of an open set (a registry's entries, read when asked: a project may add its own);
    ``explain``: the one line refusing a value, where it can say more (``did you mean ...?``)."""

    test: Callable[[Any], bool]
    text: str
    names: Callable[[], Iterable[str]] | None = None
    explain: Callable[[Any], str] | None = None

    def accepts(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError, KeyError):
            return False

    def describe(self) -> str:
        """The range or choices as a reader reads them."""
        if self.names is None:
            return self.text
        listed = ", ".join(sorted(self.names()))
        return f"one of {listed}{' or ' + self.text if self.text else ''}"

    def refusal(self, value: Any) -> str:
        """Why ``value`` is refused, in one line."""
        if self.explain is not None:
            return self.explain(value)
        return f"must be {self.describe()}, got {value!r}"


def at_least(bound: float, *, or_null: bool = False) -> Limit:
    return Limit(lambda v: (or_null and v is None) or v >= bound, f">= {bound}" + (" or null" if or_null else ""))


def above(bound: float) -> Limit:
    return Limit(lambda v: v > bound, f"> {bound}")


def between(low: float, high: float, *, low_open: bool = True, high_open: bool = False) -> Limit:
    """``low < v <= high`` by default (``in (low, high]``)."""

    def test(v: Any) -> bool:
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    return Limit(test, f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")


def or_null(limit: Limit) -> Limit:
    """What ``limit`` accepts, or null (a field a file may leave out)."""
    return Limit(lambda v: v is None or limit.accepts(v), f"{limit.describe()} or null")


def one_of(*values: Any) -> Limit:
    """One of a fixed few values (names an entry of a registry: :func:`named`)."""
    shown = [str(v) for v in values]
    return Limit(lambda v: v in values, " or ".join(shown) if len(shown) == 2 else "one of " + ", ".join(shown))


def named(
    names: Callable[[], Iterable[str]],
    explain: Callable[[Any], str] | None = None,
    *,
    also: str = "",
    also_test: Callable[[Any], bool] | None = None,
) -> Limit:
    """A name of an open set (``names``, read when checked), or what ``also`` says (tested by ``also_test``)."""

    def test(v: Any) -> bool:
        return v in set(names()) or (also_test is not None and also_test(v))

    return Limit(test, also, names, explain)


def each(limit: Limit, text: str, *, distinct: bool = False) -> Limit:
    """A list setting: at least one item, each accepted by ``limit`` (and, with ``distinct``, no repeat)."""

    def test(values: Any) -> bool:
        items = list(values)
        return bool(items) and all(limit.accepts(v) for v in items) and (not distinct or len(set(items)) == len(items))

    return Limit(test, text)


def increasing(limit: Limit, text: str) -> Limit:
    """A list setting (maybe empty) of strictly increasing items, each accepted by ``limit``."""
    return Limit(lambda values: list(values) == sorted(set(values)) and all(limit.accepts(v) for v in values), text)


@dataclass(frozen=True)
class SettingInfo:
    """What a settings field is, besides its name, type and default."""

    description: str
    limit: Limit | None = None
    #: changes how fast, never what is computed: left out of every output's hash
    operational: bool = False
    #: added after 1.0: hashed only when it differs from its default (what every earlier run did), so adding it
    #: moved no output
    added_after_1_0: bool = False
    #: set by a profile only, not by ``--set`` (e.g. the profile's loss defaults)
    profile_only: bool = False
    #: when the setting acts, given the whole settings object (None: always); where it does not act it changes
    #: nothing, so no output's hash holds it (a trunk's learning-rate scale under a frozen trunk)
    acts: Callable[[Any], bool] | None = None
    #: ``acts`` as a reader reads it (``the trunk trains``)
    acts_text: str = ""
    #: a JSON object field: the declared class whose fields it holds (checked as that class, kept as a dict)
    shape: type | None = None
    #: a file may leave it out (it reads as its default): a field added after files without it were written
    optional: bool = False

    def choices_text(self) -> str:
        """The range or choices as a reader reads them (empty: the type says it all)."""
        return "" if self.limit is None else self.limit.describe()


def setting(
    default: Any,
    description: str,
    limit: Limit | None = None,
    *,
    operational: bool = False,
    added_after_1_0: bool = False,
    profile_only: bool = False,
    acts: Callable[[Any], bool] | None = None,
    acts_text: str = "",
    shape: type | None = None,
    optional: bool = False,
) -> Any:
    """A settings field: its default (a dict or list default is copied for each object; :data:`REQUIRED`: none),
    range or choices, significance and one-line description. ``acts``: when the field acts, given the settings
    object it is part of (``acts_text`` says it in words); where it does not act, the field is left out of the
    hash. ``shape`` and ``optional``: how a file holds it."""
    if (acts is None) != (not acts_text):
        raise TypeError("a setting's acts and acts_text are given together")
    info = SettingInfo(description, limit, operational, added_after_1_0, profile_only, acts, acts_text, shape, optional)
    if default is REQUIRED:
        return dataclasses.field(metadata={SETTING: info})
    if isinstance(default, (dict, list)):
        factory = (lambda value: lambda: type(value)(value))(default)
        return dataclasses.field(default_factory=factory, metadata={SETTING: info})
    return dataclasses.field(default=default, metadata={SETTING: info})


#: ``redeclared``'s default: the declaring class's own default
_SAME_DEFAULT: Any = object()


def redeclared(cls: type, name: str, default: Any = _SAME_DEFAULT) -> Any:
    """Field ``name`` of class ``cls`` as another class holds it (a subclass, or a class sharing the setting: the
    training settings hold the model config's sizes): its description, range and kind are the ones ``cls``
    declares; its default too, unless ``default`` gives another (:data:`REQUIRED`: none)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if default is _SAME_DEFAULT:
        if field.default_factory is not dataclasses.MISSING:
            return dataclasses.field(default_factory=field.default_factory, metadata=field.metadata)
        default = field.default
    if default is REQUIRED:
        return dataclasses.field(metadata=field.metadata)
    return dataclasses.field(default=default, metadata=field.metadata)


def section(cls: type, description: str) -> Any:
    """A field holding a settings class (a group of the tree, reached as ``<name>.<field>``)."""
    return dataclasses.field(default_factory=cls, metadata={SETTING: SettingInfo(description)})


def info_of(field: dataclasses.Field) -> SettingInfo:
    info = field.metadata.get(SETTING)
    if info is None:
        raise TypeError(f"settings field {field.name!r} is not declared with setting(...)")
    return info


def default_of(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


class SettingValueError(ValueError):
    """A settings value its declared range refuses: ``name`` (a field, or a path) and the one line saying why
    (``refusal``: ``must be >= 1, got 0``)."""

    def __init__(self, name: str, refusal: str) -> None:
        self.name, self.refusal = name, refusal
        super().__init__(f"{name}: {refusal}")


def check_declared(settings: Any) -> None:
    """Raise a :class:`SettingValueError` for the first field of ``settings`` its range refuses, or whose object
    does not fit its declared shape (a settings class's ``__post_init__`` calls it, so no settings object holds a
    value out of its range: a nested group was checked when it was made)."""
    for field in dataclasses.fields(settings):
        info = info_of(field)
        value = getattr(settings, field.name)
        if info.shape is not None and value is not None:
            read_declared(info.shape, value, field.name)
        if info.limit is not None and not info.limit.accepts(value):
            raise SettingValueError(field.name, info.limit.refusal(value))


# ----------------------------------------------------------------------------------- values read from files
def shown(value: Any, most: int = 80) -> str:
    """``repr(value)``, cut to ``most`` characters (a value read from outside may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def type_name(hint: Any) -> str:
    """A type as a reader reads it: ``an integer``, ``a list of strings``, ``an integer or null``."""
    name = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}.get(hint)
    if name:
        return name
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(option) for option in typing.get_args(hint))
    if origin is tuple:
        return f"a list of {type_name(typing.get_args(hint)[0]).split(' ', 1)[-1]}s"
    if origin is dict or hint is dict or (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
        return "an object"
    return str(hint)


def typed(value: Any, hint: Any, where: str = "") -> Any:
    """``value`` (read from JSON or a command line) as the type ``hint`` says — an int is a float too, a list a
    tuple, an object of a declared class that class (:func:`read_declared`) — or a :class:`SettingValueError`
    naming ``where`` and what the value is not."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return typed(value, option, where)
            except SettingValueError:
                continue
        raise SettingValueError(where, f"{shown(value)} is not {type_name(hint)}")
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return read_declared(hint, value, where)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):  # JSON's NaN, Infinity and 1e400 parse; no setting takes them
            raise SettingValueError(where, f"{shown(value)} is not a finite number")
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if (hint is type(None) and value is None) or (hint in (bool, str) and isinstance(value, hint)):
        return value
    if origin is tuple and isinstance(value, (list, tuple)):
        item = typing.get_args(hint)[0]
        return tuple(typed(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if (origin is dict or hint is dict) and isinstance(value, Mapping):
        args = typing.get_args(hint)
        return {str(k): typed(v, args[1], f"{where}.{k}") for k, v in value.items()} if len(args) == 2 else dict(value)
    raise SettingValueError(where, f"{shown(value)} is not {type_name(hint)}")


def read_declared(cls: type, payload: Any, where: str = "", *, partial: bool = False) -> Any:
    """An object of declared class ``cls`` from a JSON object: no field it does not declare, every field but the
    optional ones present (``partial``: any may be left out, taking its default), each of its declared type, then
    made (so in its declared range, in its declared shape and agreeing with the others: the class's own check).
    Any problem is one :class:`SettingValueError` naming the field's dotted path below ``where``."""
    if not isinstance(payload, Mapping):
        raise SettingValueError(where or WHOLE_OBJECT, f"{shown(payload)} is not a JSON object")
    declared = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(payload) - set(declared))
    if unknown:
        holds = ", ".join(sorted(declared)) or "none"
        raise SettingValueError(where or WHOLE_OBJECT, f"unknown field(s) {unknown}; it holds {holds}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, field in declared.items():
        path = f"{where}.{name}" if where else name
        if name in payload:
            values[name] = typed(payload[name], hints[name], path)
        elif not (partial or info_of(field).optional):
            raise SettingValueError(path, "missing")
    try:
        return cls(**values)
    except SettingValueError as error:
        raise SettingValueError(f"{where}.{error.name}" if where else error.name, error.refusal) from None
    except ValueError as error:  # the class's own check of several fields
        raise SettingValueError(where or WHOLE_OBJECT, str(error)) from None


def significant(settings: Any) -> dict[str, Any]:
    """The fields an output depends on (what a task hashes): all but the operational ones, those that do not act
    under the other fields' values (a setting that changes nothing changes no hash), and one added after 1.0 only
    when it differs from its default."""
    values = dataclasses.asdict(settings)
    kept = {}
    for field in dataclasses.fields(settings):
        info = info_of(field)
        if info.operational or (info.added_after_1_0 and values[field.name] == default_of(field)):
            continue
        if info.acts is not None and not info.acts(settings):
            continue
        kept[field.name] = values[field.name]
    return kept


def significance_text(info: SettingInfo) -> str:
    """How a setting counts in the hash, as the settings listing says it."""
    if info.operational:
        return "operational"
    conditions = [f"when {info.acts_text}"] if info.acts is not None else []
    if info.added_after_1_0:
        conditions.append("when not the default")
    return " ".join(["significant", " and ".join(conditions)]).strip()


def operational_names(cls: type) -> frozenset[str]:
    """The names of ``cls``'s operational fields (speed only)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if info_of(f).operational)
