"""The engine's part of a run folder, declared once: what a hashed task's output folder holds and how its
``_meta.json`` is read. A project using the engine takes these names and readers from here and adds its own
files beside them (the project's run-folder module describes the whole layout; tests/test_run_folder.py checks
that no name is spelled twice).

    <run_root>/<Task>/<signature>/            a task's output, whole: its files and, written last,
        _meta.json                            what made it: task, config, declared outputs, params, the folders of
                                              its inputs (``upstream``), code record, build, summary
    <run_root>/<Task>/<signature>.partial/    the output while it is built (:func:`task_engine.files.partial_path`)
        _code.json                            a resumable task's code lineage of its partial output

Reads files only (no Luigi, no torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from task_engine.bounded_json import RECORD, BoundedJsonError, read_bounded

META_FILE = "_meta.json"
#: in a resumable task's work folder: the code lineage its partial output was made with
CODE_MARKER = "_code.json"


class RunFolderError(ValueError):
    """A run folder that cannot be read as it must be; one line naming the file and what to do."""


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


__all__ = ["CODE_MARKER", "META_FILE", "RunFolderError", "meta_or_none", "read_meta", "read_object"]
