"""Starting a data-parallel Train under torchrun: the command every node runs and the wait for it.

``Train.produce`` calls :func:`run_with_torchrun` when its ``nproc_per_node * nnodes`` is above 1; the processes
torchrun starts run ``pipeline.run.train_ddp`` (the entry point), and rank 0 leaves its summary in the work
directory for this module to hand back. See docs/gpu.md.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from models.settings import TrainSettings
from pipeline.engine.gpus import gpu_slots, scheduler_gpu_slots, visible_gpus
from pipeline.engine.import_path import child_environment
from pipeline.engine.outputs import read_json
from pipeline.engine.spawn import die_with_parent
from pipeline.engine.task import HashedTask

logger = logging.getLogger("luigi-interface")

#: the torchrun entry point every process runs
ENTRY_POINT = "pipeline.run.train_ddp"
#: rank 0's summary of the run, read back by the launching Train and removed
SUMMARY_FILE = "ddp_summary.json"


def torchrun_command(task: HashedTask, work_dir: Path, settings: TrainSettings) -> list[str]:
    """The command every node runs (the same on each: torchrun's rendezvous assigns the node ranks)."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(settings.nproc_per_node),
    ]
    if settings.nnodes == 1:
        command.append("--standalone")  # a local rendezvous on a free port
    else:
        if not settings.rdzv_endpoint:
            raise ValueError(
                f"nnodes={settings.nnodes} needs rdzv_endpoint, the host:port of the first node's rendezvous"
            )
        command += [
            "--nnodes",
            str(settings.nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            settings.rdzv_endpoint,
            "--rdzv-id",
            task.signature(),
        ]
    parameters = json.dumps(task.process_params(), sort_keys=True)
    return command + [
        "-m",
        ENTRY_POINT,
        "--task",
        parameters,
        "--work-dir",
        str(Path(work_dir).resolve()),
    ]


def run_with_torchrun(task: HashedTask, work_dir: Path, settings: TrainSettings) -> dict[str, Any]:
    """Run ``task``'s training in ``world_size`` processes under torchrun; rank 0's summary. On a GPU host with
    one node, the processes run on ``nproc_per_node`` GPU slots of different GPUs (:mod:`pipeline.engine.gpus`),
    which torchrun's processes see as their devices 0, 1, ..."""
    gpus = visible_gpus()
    if gpus and settings.nnodes == 1:
        with gpu_slots(gpus, scheduler_gpu_slots(), settings.nproc_per_node) as held:
            return _torchrun(task, work_dir, settings, {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(held)})
    return _torchrun(task, work_dir, settings, dict(os.environ))


def _torchrun(task: HashedTask, work_dir: Path, settings: TrainSettings, env: dict[str, str]) -> dict[str, Any]:
    command = torchrun_command(task, work_dir, settings)
    if settings.nnodes > 1:
        logger.warning(
            "Train %s waits for %d more node(s); on each run:\n%s",
            task.task_id,
            settings.nnodes - 1,
            shlex.join(command),
        )
    else:
        logger.info("Train %s runs: %s", task.task_id, shlex.join(command))
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
