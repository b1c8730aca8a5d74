"""Starting a data-parallel job under torchrun: the command every node runs and the wait for it.

The caller says what runs (:class:`TorchrunJob`: an entry point module, its arguments, the processes per node
and the nodes); this module builds torchrun's command, holds a GPU slot for each local process, runs it and
hands back the summary rank 0 left in the work directory (:data:`SUMMARY_FILE`). A task of the project makes the
job (``Train`` does when its ``nproc_per_node * nnodes`` is above 1); the engine knows no entry point of its
own. See docs/gpu.md.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from task_engine.gpus import gpu_slots, scheduler_gpu_slots, visible_gpus
from task_engine.outputs import read_json
from task_engine.processes import child_environment, die_with_parent

logger = logging.getLogger("luigi-interface")

#: rank 0's summary of the run, written by the entry point into the work directory, read back here and removed
SUMMARY_FILE = "ddp_summary.json"


@dataclass(frozen=True)
class TorchrunJob:
    """What torchrun runs: ``python -m <entry_point> <arguments>`` in ``nproc_per_node`` processes on each of
    ``nnodes`` nodes, which meet at ``rdzv_endpoint`` (``host:port`` of the first node; needed above one node)
    under ``rdzv_id``; ``name`` says which work it is in the log."""

    entry_point: str
    arguments: tuple[str, ...]
    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str = ""
    rdzv_id: str = ""
    name: str = ""


def torchrun_command(job: TorchrunJob) -> list[str]:
    """The command every node runs (the same on each: torchrun's rendezvous assigns the node ranks)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(job.nproc_per_node)]
    if job.nnodes == 1:
        command.append("--standalone")  # a local rendezvous on a free port
    else:
        if not job.rdzv_endpoint:
            raise ValueError(f"nnodes={job.nnodes} needs rdzv_endpoint, the host:port of the first node's rendezvous")
        command += ["--nnodes", str(job.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", job.rdzv_endpoint]
        command += ["--rdzv-id", job.rdzv_id or job.name or "job"]
    return [*command, "-m", job.entry_point, *job.arguments]


def run_with_torchrun(job: TorchrunJob, work_dir: Path) -> dict[str, Any]:
    """Run ``job`` under torchrun; the summary rank 0 wrote into ``work_dir``. On a GPU host with one node, the
    processes run on ``nproc_per_node`` GPU slots of different GPUs (:mod:`task_engine.gpus`), which
    torchrun's processes see as their devices 0, 1, ..."""
    gpus = visible_gpus()
    if gpus and job.nnodes == 1:
        with gpu_slots(gpus, scheduler_gpu_slots(), job.nproc_per_node) as held:
            return _torchrun(job, work_dir, {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(held)})
    return _torchrun(job, work_dir, dict(os.environ))


def _torchrun(job: TorchrunJob, work_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    command = torchrun_command(job)
    if job.nnodes > 1:
        logger.warning("%s waits for %d more node(s); on each run:\n%s", job.name, job.nnodes - 1, shlex.join(command))
    else:
        logger.info("%s runs: %s", job.name, shlex.join(command))
    summary_path = Path(work_dir) / SUMMARY_FILE
    summary_path.unlink(missing_ok=True)
    completed = subprocess.run(command, preexec_fn=die_with_parent, env=child_environment(env), check=False)
    if completed.returncode != 0:
        raise RuntimeError(
            f"torchrun exited with status {completed.returncode} ({shlex.join(command)}); the checkpoints in "
            f"{work_dir} are kept and a rerun resumes from them"
        )
    summary = read_json(summary_path)
    summary_path.unlink()
    return summary
