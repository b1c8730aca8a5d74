"""The run folder's layout, declared once, and its checked readers: every module that writes or reads a run root
(the engine, the live display, the plan's file, ``crossmodal export``) takes the names and the readers from here,
so no file name is spelled twice (tests/test_run_folder.py checks it).

    <run_root>/<Task>/<signature>/            a task's output, whole: its files and, written last,
        _meta.json                            what made it: task, config, declared outputs, params (the plan's id),
                                              the folders of its inputs (``upstream``), code record, build, summary
        history.csv                           a Train's epochs (also in its ``.partial`` folder while it trains)
    <run_root>/<Task>/<signature>.partial/    the output while it is built (common.files.partial_path)
        _code.json                            a resumable task's code lineage of its partial output
    <run_root>/RunPlan/<id>/run_plan.json     the run plan, ``id`` 12 hex digits hashing its content

Everything here reads files only (no Luigi, no torch, nothing of the project above ``common``), so the display and
the serving side read a run root without importing the pipeline.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from common.bounded_json import RECORD, BoundedJsonError, NotJsonError, read_bounded
from common.files import PARTIAL_SUFFIX, partial_path
from common.hashing import stable_hash

META_FILE = "_meta.json"
#: in a resumable task's work folder: the code lineage its partial output was made with
CODE_MARKER = "_code.json"
HISTORY_FILE = "history.csv"
#: ``<run_root>/RunPlan/<id>/run_plan.json``: the plans of a run root, one folder per plan like a task's output
PLAN_FOLDER = "RunPlan"
PLAN_FILE = "run_plan.json"
#: the fields of ``run_plan.json`` its id hashes; ``summary`` is for a reader
PLAN_ID_FIELDS = ("profile", "changes", "settings", "grid", "variants")
#: a plan's id and a task output's signature: the first 12 hex digits of a hash (``common.hashing.stable_hash``)
HASH_NAME = re.compile(r"[0-9a-f]{12}")


class RunFolderError(ValueError):
    """A run folder that cannot be read as it must be; one line naming the file and what to do."""


# ---------------------------------------------------------------------------------------------- task outputs


def output_folder(run_root: str | Path, family: str, signature: str) -> Path:
    return Path(run_root) / family / signature


def run_root_of(folder: str | Path) -> Path:
    """The run root a task output folder lies in."""
    return Path(folder).parent.parent


def read_object(path: str | Path, remedy: str = "run its task again") -> dict[str, Any]:
    """A JSON object file of a run folder (``_meta.json``, an output's ``metrics.json``), read within bounds; one
    :class:`RunFolderError` line naming it and ``remedy`` when it is damaged (``FileNotFoundError`` as it is)."""
    try:
        value = read_bounded(path, RECORD)
    except BoundedJsonError as error:
        raise RunFolderError(f"{path} is damaged: it {error.detail}: {remedy}") from None
    except FileNotFoundError:
        raise
    except OSError as error:
        raise RunFolderError(f"{path} is unreadable ({type(error).__name__}: {error}): {remedy}") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path} is damaged (not a JSON object): {remedy}")
    return value


def read_meta(folder: str | Path) -> dict[str, Any]:
    """A task output's ``_meta.json`` (written last, so its presence means the output is whole), read within
    bounds; one :class:`RunFolderError` line when it is missing or damaged."""
    try:
        return read_object(Path(folder) / META_FILE)
    except FileNotFoundError:
        raise RunFolderError(f"{folder} is not a finished task output ({META_FILE} is missing): run its task again") from None


def meta_or_none(folder: str | Path) -> dict[str, Any] | None:
    """:func:`read_meta`, None when the output is not finished or its metadata is damaged."""
    try:
        return read_meta(folder)
    except RunFolderError:
        return None


def meta_field(folder: str | Path, *keys: str) -> Any:
    """A field of a task output's ``_meta.json`` (``"config", "headline", "method"``); one line when the metadata
    lacks it (edited, or written by something else)."""
    value: Any = read_meta(folder)
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise RunFolderError(f"{Path(folder) / META_FILE} is damaged (it has no {'.'.join(keys)}): run its task again")
        value = value[key]
    return value


def declared_output(folder: str | Path, name: str) -> Path:
    """The file of declared output ``name`` of the task output ``folder``, as its ``_meta.json`` names it."""
    outputs = read_meta(folder).get("outputs", {})
    if not isinstance(outputs, dict) or not isinstance(outputs.get(name), str):
        raise RunFolderError(f"{Path(folder) / META_FILE} names no output {name!r}: the folder was not written by this version")
    path = Path(folder) / outputs[name]
    if Path(outputs[name]).is_absolute() or ".." in Path(outputs[name]).parts:
        raise RunFolderError(f"{Path(folder) / META_FILE} names output {name!r} outside its folder: run its task again")
    if not path.exists():
        raise RunFolderError(f"{path} is missing from a finished output: the folder was changed since; run its task again")
    return path


def upstream_folder(folder: str | Path, family: str) -> Path:
    """The output of family ``family`` that ``folder`` was made from (its ``_meta.json``'s ``upstream``), in
    ``folder``'s own run root however the recorded run root was spelled (a run root copied or moved)."""
    recorded = meta_field(folder, "upstream", family)
    parts = Path(str(recorded)).parts
    if len(parts) < 2 or parts[-2] != family or not HASH_NAME.fullmatch(parts[-1]):
        raise RunFolderError(f"{Path(folder) / META_FILE} is damaged (its upstream {family} is {recorded!r}): run its task again")
    return output_folder(run_root_of(folder), family, parts[-1])


def finished_outputs(run_root: str | Path, family: str) -> list[Path]:
    """The finished outputs of task family ``family`` in ``run_root`` (a folder with its ``_meta.json``, not one
    still being built), by name."""
    found = (Path(run_root) / family).glob(f"*/{META_FILE}")
    return sorted(path.parent for path in found if not path.parent.name.endswith(PARTIAL_SUFFIX))


# ---------------------------------------------------------------------------------------------- history


def last_history_row(folder: str | Path, metric: str | None) -> tuple[int, float | None] | None:
    """The last complete row of a Train folder's ``history.csv`` (``folder`` may be its ``.partial`` one) as
    (epoch, the value of column ``metric``), (0, None) before the first epoch; None when it cannot be read now
    (a read racing a write, a damaged file)."""
    path = Path(folder) / HISTORY_FILE
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
        complete = [row for row in rows if None not in row and None not in row.values()]
        if not complete:
            return None if rows else (0, None)
        value = float(complete[-1][metric]) if metric and complete[-1].get(metric) else None
        return int(float(complete[-1]["epoch"])), value
    except FileNotFoundError:
        return 0, None
    except (OSError, UnicodeDecodeError, csv.Error, KeyError, ValueError, OverflowError):
        return None


# ---------------------------------------------------------------------------------------------- run plans


def check_plan_id(plan_id: str, where: str = "--plan") -> str:
    """``plan_id`` when it is a plan's id (12 hex digits, a folder of ``RunPlan/``); a :class:`RunFolderError`
    naming ``where`` otherwise (an empty id, a path)."""
    if not isinstance(plan_id, str) or not HASH_NAME.fullmatch(plan_id):
        shown = repr(plan_id)[:80]
        raise RunFolderError(
            f"{where} {shown}: expected a run plan's id, 12 hex digits (the name of a folder of <run_root>/{PLAN_FOLDER}/, "
            "as python -m pipeline plan prints it)"
        )
    return plan_id


def plan_path(run_root: str | Path, plan_id: str) -> Path:
    """``<run_root>/RunPlan/<id>/run_plan.json``; an id that is not one is refused (it never reaches a path)."""
    return Path(run_root) / PLAN_FOLDER / check_plan_id(plan_id, "run plan") / PLAN_FILE


def read_plan_record(run_root: str | Path, plan_id: str) -> tuple[dict[str, Any] | None, str]:
    """The content of plan ``plan_id``'s file in ``run_root`` when it is that plan's (its id fields hash to its
    name), else None and what is wrong with it (``missing``, ``edited: ...``)."""
    path = plan_path(run_root, plan_id)
    try:
        data = read_bounded(path, RECORD)
    except FileNotFoundError:
        return None, "missing"
    except OSError as error:
        return None, f"unreadable ({type(error).__name__}: {error})"
    except NotJsonError as error:
        return None, f"not JSON, or cut off ({error.cause})"
    except BoundedJsonError as error:
        return None, f"beyond what is read: it {error.detail}"
    if not isinstance(data, dict) or not all(field in data for field in PLAN_ID_FIELDS):
        return None, "not a run plan (its fields are missing)"
    if stable_hash({field: data[field] for field in PLAN_ID_FIELDS}) != plan_id:
        return None, "edited: its content is not the plan its name says"
    return data, ""


def plan_summary_of(folder: str | Path) -> dict[str, Any]:
    """The summary of the run plan a task output was made under; empty when the output names none or the file is
    missing, damaged or edited (it is derived: the next run of the plan writes it anew; what is read here only
    labels a bundle or a report)."""
    params = meta_or_none(folder) or {}
    plan_id = params.get("params", {}).get("plan") if isinstance(params.get("params"), dict) else None
    if not isinstance(plan_id, str) or not HASH_NAME.fullmatch(plan_id):
        return {}
    data, _ = read_plan_record(run_root_of(folder), plan_id)
    summary = data.get("summary") if data is not None else None
    return summary if isinstance(summary, dict) and isinstance(summary.get("dataset", {}), dict) else {}


__all__ = [
    "CODE_MARKER",
    "HISTORY_FILE",
    "META_FILE",
    "PLAN_FILE",
    "PLAN_FOLDER",
    "PLAN_ID_FIELDS",
    "RunFolderError",
    "check_plan_id",
    "declared_output",
    "finished_outputs",
    "last_history_row",
    "meta_field",
    "meta_or_none",
    "output_folder",
    "partial_path",
    "plan_path",
    "plan_summary_of",
    "read_meta",
    "read_object",
    "read_plan_record",
    "run_root_of",
    "upstream_folder",
]
