"""Where a task that runs a network produces its output: in the worker, or in a child process of its own.

Why: Luigi runs each task of a multi-worker run (``[core] workers = 2``, ``--workers 8``) in a child *forked*
from the scheduling process. CUDA cannot be used in a forked child once anything in the parent has touched
it (torch raises ``Cannot re-initialize CUDA in forked subprocess``), and a forked copy of a process with
threads (Luigi's, the progress display's) is a fragile place to start a GPU context in any case. So on a GPU
host a network task's ``produce`` runs in a child forked from a clean server (:mod:`task_engine.fork_server`:
a fresh interpreter that imported torch and the tasks' modules once and never touched CUDA), which starts in
milliseconds: the forked worker only asks for it, waits, and writes the output's metadata from what the child
hands back. The child rebuilds the task from its parameters (the run plan's id among them: it reads the
plan's file), sees only the GPU of the slot its worker holds (:func:`task_engine.gpus.gpu_slot`, through
``CUDA_VISIBLE_DEVICES``) and writes into the same work folder.

``[network_tasks] process`` in luigi.cfg (or ``--network-tasks-process``) chooses: ``auto`` (the default: a
child on a GPU host when the task runs in a forked worker; in the worker otherwise, which is every CPU run and
a one-worker GPU run), ``spawn`` (always a child; the tests force it on CPU) or ``inline`` (never).
"""

from __future__ import annotations

import multiprocessing
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import luigi

from task_engine.child import SpawnedTaskError, rebuilt_error
from task_engine.fork_server import run_in_child
from task_engine.gpus import gpu_slot, host_gpu_count, scheduler_gpu_slots, visible_gpus
from task_engine.network_tasks import network_tasks

#: what the server imports before a task's module: what every child's first lines use
PRELOAD = ["torch"]


def in_forked_worker() -> bool:
    """Whether this process is a Luigi worker forked from the scheduling process (``workers`` > 1)."""
    return multiprocessing.parent_process() is not None


def runs_in_own_process(mode: str | None = None) -> bool:
    mode = mode or network_tasks().process
    if mode == "spawn":
        return True
    return mode == "auto" and in_forked_worker() and host_gpu_count() > 0


def child_request(task: luigi.Task, work_dir: Path, threads: int, gpu: str | None) -> dict[str, Any]:
    """What the child is told: the task (its module, class and parameters), where it writes, its threads, and
    the worker's working folder and environment (with its GPU slot's ``CUDA_VISIBLE_DEVICES``)."""
    environ = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if gpu is not None:
        environ["CUDA_VISIBLE_DEVICES"] = gpu
    return {
        "module": type(task).__module__,
        "family": task.get_task_family(),
        "params": task.process_params(),
        "work_dir": str(Path(work_dir).resolve()),
        "threads": threads,
        "cwd": os.getcwd(),
        "environ": environ,
    }


def produce_in_own_process(task: luigi.Task, work_dir: Path, threads: int) -> tuple[dict[str, Any], int | None]:
    """Run ``task.produce(work_dir)`` in a child process (on a GPU slot when the host has GPUs); its summary and
    the peak GPU memory it held (None without a GPU), or its error raised here again. The answer comes back
    through a socket, not a file: a child that failed on a full disk could not write one."""
    gpus = visible_gpus()
    with gpu_slot(gpus, scheduler_gpu_slots()) if gpus else nullcontext(None) as gpu:
        request = child_request(task, work_dir, threads, gpu)
        try:
            answer = run_in_child(request, [*PRELOAD, request["module"]])
        except SpawnedTaskError as error:
            raise SpawnedTaskError(f"{task.task_id}: {error}") from None
    if "error" in answer:
        raise rebuilt_error(answer["error"])
    return answer["summary"], answer.get("gpu_memory_peak_bytes")
