"""Where a task that runs a network produces its output: in the worker, or in a fresh process of its own.

Why: Luigi runs each task of a multi-worker run (``[core] workers = 2``, ``--workers 8``) in a child *forked*
from the scheduling process. CUDA cannot be used in a forked child once anything in the parent has touched
it (torch raises ``Cannot re-initialize CUDA in forked subprocess``), and a forked copy of a process is a
fragile place to start a GPU context in any case. So on a GPU host a network task's ``produce`` runs in a new
interpreter (``python -m pipeline.engine.child``), as torchrun starts its processes: the forked worker only
launches it, waits, and writes the output's metadata from what the child hands back. The child rebuilds the
task from its parameters (the run plan's id among them: it reads the plan's file), takes a GPU slot
(:func:`pipeline.engine.gpus.gpu_slot`, through ``CUDA_VISIBLE_DEVICES``) and writes into the same work folder.

``[network_tasks] process`` in luigi.cfg (or ``--network-tasks-process``) chooses: ``auto`` (the default: a
process of its own on a GPU host when the task runs in a forked worker; in the worker otherwise, which is
every CPU run and a one-worker GPU run), ``spawn`` (always; the tests force it on CPU) or ``inline`` (never).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import luigi

from pipeline.engine.gpus import gpu_slot, host_gpu_count, scheduler_gpu_slots, visible_gpus

#: the child's answer in the work folder (removed once read): the summary, or the error it raised
RESULT_FILE = "_spawned_result.json"
MODES = ("auto", "spawn", "inline")


class network_tasks(luigi.Config):  # noqa: N801 - Luigi names a config section after its class
    process = luigi.ChoiceParameter(
        choices=MODES, default="auto", description="where a task that runs a network produces (docs/gpu.md)"
    )


class SpawnedTaskError(RuntimeError):
    """A failure in the child process that cannot be raised again as its own type; its traceback is the message."""


def in_forked_worker() -> bool:
    """Whether this process is a Luigi worker forked from the scheduling process (``workers`` > 1)."""
    return multiprocessing.parent_process() is not None


def runs_in_own_process(mode: str | None = None) -> bool:
    mode = mode or network_tasks().process
    if mode == "spawn":
        return True
    return mode == "auto" and in_forked_worker() and host_gpu_count() > 0

def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """A child process gets SIGTERM when the worker that started it dies, so a killed run never leaves a process
    writing into the work folder its rerun starts from (or resumes from: torchrun stops its workers too)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: nothing to arm


def child_command(task: luigi.Task, work_dir: Path, threads: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipeline.engine.child",
        "--module",
        type(task).__module__,
        "--family",
        task.get_task_family(),
        "--params",
        json.dumps(task.to_str_params(), sort_keys=True),
        "--work-dir",
        str(Path(work_dir).resolve()),
        "--threads",
        str(threads),
    ]


def produce_in_own_process(task: luigi.Task, work_dir: Path, threads: int) -> dict[str, Any]:
    """Run ``task.produce(work_dir)`` in a new interpreter (on a GPU slot when the host has GPUs); its summary,
    or its error raised here again."""
    result = Path(work_dir) / RESULT_FILE
    result.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    gpus = visible_gpus()
    if gpus:
        with gpu_slot(gpus, scheduler_gpu_slots()) as gpu:
            completed = subprocess.run(child_command(task, work_dir, threads), env={**env, "CUDA_VISIBLE_DEVICES": gpu}, preexec_fn=die_with_parent, check=False)
    else:
        completed = subprocess.run(child_command(task, work_dir, threads), env=env, preexec_fn=die_with_parent, check=False)
    if not result.exists():
        raise SpawnedTaskError(
            f"{task.task_id}: its process exited with status {completed.returncode} and left no result "
            f"(killed? out of memory?); the command was {child_command(task, work_dir, threads)[:7]}"
        )
    answer = json.loads(result.read_text())
    result.unlink()
    if "error" in answer:
        raise rebuilt_error(answer["error"])
    return answer["summary"]


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
        import importlib

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
