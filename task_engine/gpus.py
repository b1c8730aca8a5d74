"""The host's GPUs as the scheduler sees them: how many there are, without initialising CUDA, and which one a
task that runs a network takes.

Why not ``torch.cuda.is_available()`` in the scheduling process: it initialises the CUDA driver, and a process
Luigi forks from one that did can never use CUDA again (``Cannot re-initialize CUDA in forked subprocess``).
``torch.cuda.device_count()`` asks NVML first and leaves CUDA alone. Tasks that run a network on a GPU host
run in a process of their own anyway (:mod:`task_engine.spawn`), so nothing depends on this staying
untouched, but the scheduler has no reason to hold a CUDA context either.

How many at once: ``[network_tasks] slots_per_gpu`` network tasks share one GPU (Luigi's ``[resources] gpu``,
the host's GPUs times that unless a luigi.cfg sets it, keeps at most that many running). Which GPU: Luigi says
nothing of it, so a task takes a *slot*: an exclusive lock on one of ``gpu`` lock files spread over the host's
GPUs (slot ``k`` on GPU ``k mod n``), held while it runs. With one slot per GPU each task has a GPU to itself;
with two, two tasks share each GPU.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger("luigi-interface")


@lru_cache(maxsize=1)
def host_gpu_count() -> int:
    """CUDA devices this process may use (``CUDA_VISIBLE_DEVICES`` applied), counted without creating a CUDA
    context (NVML; torch falls back to the driver only where NVML is missing)."""
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    return int(torch.cuda.device_count())


def visible_gpus() -> list[str]:
    """The ids a child process may be given in ``CUDA_VISIBLE_DEVICES``: the ones this process sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip()][: host_gpu_count()]
    return [str(index) for index in range(host_gpu_count())]


def slot_order(gpus: list[str], slots: int) -> list[tuple[str, int]]:
    """``(gpu, k)`` slots in the order they are tried: the first slot of every GPU, then the second ...; ``slots``
    in all (``[resources] gpu``), at least one per GPU."""
    per_gpu = max(1, math.ceil(slots / max(1, len(gpus))))
    return [(gpu, k) for k in range(per_gpu) for gpu in gpus]


def slots_folder() -> Path:
    """Host-wide (every run root on this host shares the GPUs), one per user."""
    return Path(tempfile.gettempdir()) / f"crossmodal-gpu-slots-{os.getuid()}"


def _try(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if isinstance(error, BlockingIOError) or error.errno == errno.EWOULDBLOCK:
            return None
        raise
    return fd


@contextmanager
def gpu_slots(gpus: list[str], slots: int, count: int = 1, folder: Path | None = None, poll_s: float = 0.5) -> Iterator[list[str]]:
    """Hold ``count`` free slots on as many different GPUs while the block runs (a data-parallel Train takes one
    per process); yields their GPU ids. Waits (saying so once) while too few are free, e.g. taken by another run
    on this host."""
    if count > len(gpus):
        raise ValueError(f"{count} GPUs asked for, this host shows {len(gpus)}")
    folder = folder or slots_folder()
    folder.mkdir(parents=True, exist_ok=True)
    said = False
    while True:
        held: dict[str, int] = {}
        for gpu, k in slot_order(gpus, slots):
            if gpu in held:
                continue
            fd = _try(folder / f"gpu{gpu}.{k}.lock")
            if fd is not None:
                held[gpu] = fd
            if len(held) == count:
                break
        if len(held) == count:
            try:
                yield list(held)
            finally:
                for fd in held.values():
                    os.close(fd)  # releases the lock
            return
        for fd in held.values():
            os.close(fd)
        if not said:
            logger.info("too few GPU slots free on this host: waiting (%s)", folder)
            said = True
        time.sleep(poll_s)


@contextmanager
def gpu_slot(gpus: list[str], slots: int, folder: Path | None = None, poll_s: float = 0.5) -> Iterator[str]:
    """One slot (:func:`gpu_slots`); yields its GPU id."""
    with gpu_slots(gpus, slots, 1, folder, poll_s) as (gpu,):
        yield gpu


def scheduler_gpu_slots() -> int:
    """How many network tasks one scheduler runs at once on this host's GPUs: Luigi's ``[resources] gpu`` when a
    luigi.cfg sets it (or :func:`declare_gpu_slots` did), else the host's GPUs times ``[network_tasks]
    slots_per_gpu``."""
    import luigi

    from task_engine.network_tasks import network_tasks

    config = luigi.configuration.get_config()
    if config.has_option("resources", "gpu"):
        return config.getint("resources", "gpu")
    return max(1, host_gpu_count()) * max(1, network_tasks().slots_per_gpu)


def declare_gpu_slots() -> int:
    """Hand Luigi's scheduler its ``gpu`` resource, :func:`scheduler_gpu_slots`, as ``[resources] gpu`` when no
    file sets it (Luigi reads that section when it builds its scheduler: the scheduling process calls this
    before, e.g. while the root task is built, after the command line is read); the slots."""
    import luigi
    from luigi.configuration import LuigiTomlParser

    config = luigi.configuration.get_config()
    slots = scheduler_gpu_slots()
    if not config.has_option("resources", "gpu"):  # both of Luigi's parsers add a missing section
        config.set("resources", "gpu", slots if isinstance(config, LuigiTomlParser) else str(slots))
    return slots


def task_device():  # noqa: ANN201 - torch.device, imported only when a task runs a network
    """Where a task's network runs: this process's GPU (a spawned task's slot is its ``cuda:0``), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
