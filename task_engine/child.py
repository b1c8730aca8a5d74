"""A network task's work in a process of its own, and how its answer travels back: the task is rebuilt from
its parameters (the run plan's id among them), produces into the work folder its Luigi worker prepared, and
hands back its summary (with the peak GPU memory it held), or the error it raised, as one line of JSON.

The process is forked from the server of :mod:`task_engine.fork_server`; the worker raises a child's error
again as the same class where it can (:func:`rebuilt_error`), so a full disk or a bad input stays one line.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from task_engine.outputs import json_default


class SpawnedTaskError(RuntimeError):
    """A failure in the child process that cannot be raised again as its own type; its traceback is the message."""


def gpu_memory_peak() -> int | None:
    """The most GPU memory this process's allocator held (bytes), None where it used no GPU: what decides how
    many such tasks share one GPU (docs/gpu.md, "Slots per GPU")."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.max_memory_reserved())


def reset_gpu_memory_peak() -> None:
    """Start :func:`gpu_memory_peak` anew (a process that runs several tasks in turn)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def produced(request: dict[str, Any]) -> tuple[str, int]:
    """Run the task ``request`` names here; its answer (one line of JSON) and this process's exit status."""
    try:
        import torch

        torch.set_num_threads(max(1, int(request["threads"])))
        task_class = getattr(importlib.import_module(request["module"]), request["family"])
        task = task_class.from_str_params(request["params"])
        summary = task.produce(Path(request["work_dir"]))
        answer = {"summary": summary, "gpu_memory_peak_bytes": gpu_memory_peak()}
        return json.dumps(answer, default=json_default), 0
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the worker, which raises it
        return json.dumps({"error": error_record(error)}, default=str), 1


def error_record(error: BaseException) -> dict[str, Any]:
    """What a child hands back of an exception: its class, arguments, file name and traceback."""
    args = list(error.args) if all(isinstance(a, (str, int, float, bool, type(None))) for a in error.args) else [str(error)]
    return {
        "class": f"{type(error).__module__}:{type(error).__qualname__}",
        "args": args,
        "filename": getattr(error, "filename", None),
        "traceback": "".join(traceback.format_exception(error)),
    }


def rebuilt_error(record: dict[str, Any]) -> BaseException:
    """The child's exception as the same class when it can be rebuilt from its arguments (so a full disk or a
    bad input is still one line), chained to its traceback; a :class:`SpawnedTaskError` otherwise."""
    cause = SpawnedTaskError(f"in the task's own process:\n{record['traceback']}")
    module, _, qualname = record["class"].partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        error = cls(*record["args"])
        if record.get("filename") is not None and isinstance(error, OSError):
            error.filename = record["filename"]
    except Exception:  # noqa: BLE001 - any class that cannot be rebuilt is reported by its traceback
        return cause
    error.__cause__ = cause
    return error
