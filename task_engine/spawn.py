"""Where a task that runs a network produces its output: in the worker, or in a fresh process of its own.

Why: Luigi runs each task of a multi-worker run (``[core] workers = 2``, ``--workers 8``) in a child *forked*
from the scheduling process. CUDA cannot be used in a forked child once anything in the parent has touched
it (torch raises ``Cannot re-initialize CUDA in forked subprocess``), and a forked copy of a process is a
fragile place to start a GPU context in any case. So on a GPU host a network task's ``produce`` runs in a new
interpreter (``python -m task_engine.child``), as torchrun starts its processes: the forked worker only
launches it, waits, and writes the output's metadata from what the child hands back. The child rebuilds the
task from its parameters (the run plan's id among them: it reads the plan's file), takes a GPU slot
(:func:`task_engine.gpus.gpu_slot`, through ``CUDA_VISIBLE_DEVICES``) and writes into the same work folder.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import luigi

from task_engine.gpus import gpu_slot, host_gpu_count, scheduler_gpu_slots, visible_gpus

MODES = ("auto", "spawn", "inline")
#: the folder that holds this package: the repository in a clone, site-packages when installed
PACKAGES_ROOT = Path(__file__).resolve().parents[1]


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a ``python -m`` child process of the engine (the child of a network task, torchrun's): with
    ``PYTHONSAFEPATH=1`` unless it starts in the folder that holds the packages (a clone's), so that a module
    of the working folder cannot stand in for one of the packages (Python 3.11+)."""
    if Path.cwd().resolve() == PACKAGES_ROOT:
        return dict(env)
    return {**env, "PYTHONSAFEPATH": "1"}


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


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None  # not Linux: nothing to arm


#: loaded here, not between fork and exec, where only async-signal-safe work belongs
_LIBC = _libc()


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """A child process gets SIGTERM when the worker that started it dies, so a killed run never leaves a process
    writing into the work folder its rerun starts from (or resumes from: torchrun stops its workers too)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_command(task: luigi.Task, work_dir: Path, threads: int, answer_fd: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "task_engine.child",
        "--module",
        type(task).__module__,
        "--family",
        task.get_task_family(),
        "--params",
        json.dumps(task.process_params(), sort_keys=True),
        "--work-dir",
        str(Path(work_dir).resolve()),
        "--threads",
        str(threads),
        "--answer-fd",
        str(answer_fd),
    ]


def produce_in_own_process(task: luigi.Task, work_dir: Path, threads: int) -> dict[str, Any]:
    """Run ``task.produce(work_dir)`` in a new interpreter (on a GPU slot when the host has GPUs); its summary,
    or its error raised here again. The answer comes back through a pipe, not a file: a child that failed on a
    full disk could not write one."""
    env = child_environment({**os.environ, "OMP_NUM_THREADS": str(threads)})
    gpus = visible_gpus()
    if not gpus:
        return _run_child(task, work_dir, threads, env)
    with gpu_slot(gpus, scheduler_gpu_slots()) as gpu:
        return _run_child(task, work_dir, threads, {**env, "CUDA_VISIBLE_DEVICES": gpu})


def _run_child(task: luigi.Task, work_dir: Path, threads: int, env: dict[str, str]) -> dict[str, Any]:
    read_end, write_end = os.pipe()
    command = child_command(task, work_dir, threads, write_end)
    try:
        child = subprocess.Popen(command, env=env, pass_fds=(write_end,), preexec_fn=die_with_parent)
    finally:
        os.close(write_end)  # the child holds its own copy; this end must close for the read below to end
    with os.fdopen(read_end, "rb") as answers:
        answer = answers.read()  # until the child exits (its end closes), however long its answer
    status = child.wait()
    if not answer:
        raise SpawnedTaskError(
            f"{task.task_id}: its process exited with status {status} and gave no answer (killed? out of "
            f"memory?); the command was {' '.join(command[:7])}"
        )
    result = json.loads(answer)
    if "error" in result:
        raise rebuilt_error(result["error"])
    return result["summary"]


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
