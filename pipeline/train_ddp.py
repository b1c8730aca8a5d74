"""torchrun's entry point for a data-parallel Train, and the launcher Train uses to start it.

``Train`` with ``nproc_per_node * nnodes`` > 1 runs :func:`run_with_torchrun`: it starts

    python -m torch.distributed.run --nproc-per-node N [--standalone | --nnodes M --rdzv-backend c10d
        --rdzv-endpoint HOST:PORT --rdzv-id ID] -m pipeline.train_ddp --task '<Train parameters>' --work-dir DIR

and waits. Each process joins the group (``models.distributed.init_from_environment``), rebuilds the same
Train from its parameters and trains its share into the task's work directory; rank 0 alone writes the
checkpoints, the history and the summary this module hands back to Train. On several nodes the other
nodes run that same command (Train logs it), with the run root on storage every node sees.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from models.distributed import init_from_environment
from models.settings import TrainSettings
from pipeline.tasks.training import Train

logger = logging.getLogger("luigi-interface")

#: rank 0's summary of the run, read back by the launching Train and removed
SUMMARY_FILE = "ddp_summary.json"


def torchrun_command(task: Train, work_dir: Path, settings: TrainSettings) -> list[str]:
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
    parameters = json.dumps(task.to_str_params(), sort_keys=True)
    return command + [
        "-m",
        "pipeline.train_ddp",
        "--task",
        parameters,
        "--work-dir",
        str(Path(work_dir).resolve()),
    ]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """torchrun gets SIGTERM (and stops its workers) when the Train that started it dies, so a killed Train
    never leaves a run writing into the work directory its rerun resumes from."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: nothing to arm


def run_with_torchrun(task: Train, work_dir: Path, settings: TrainSettings) -> dict[str, Any]:
    """Run ``task``'s training in ``world_size`` processes under torchrun; rank 0's summary."""
    command = torchrun_command(task, work_dir, settings)
    if settings.nnodes > 1:
        logger.warning(
            "Train %s waits for %d more node(s); on each run:\n%s",
            task.task_id,
            settings.nnodes - 1,
            shlex.join(command),
        )
    summary_path = Path(work_dir) / SUMMARY_FILE
    summary_path.unlink(missing_ok=True)
    completed = subprocess.run(command, preexec_fn=_die_with_parent, check=False)
    if completed.returncode != 0:
        raise RuntimeError(
            f"torchrun exited with status {completed.returncode} ({shlex.join(command)}); the checkpoints in "
            f"{work_dir} are kept and a rerun resumes from them"
        )
    summary = json.loads(summary_path.read_text())
    summary_path.unlink()
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one process of a data-parallel Train (started by torchrun)")
    parser.add_argument("--task", required=True, help="the Train's parameters (JSON of to_str_params)")
    parser.add_argument("--work-dir", required=True, help="the Train's work directory (shared by all nodes)")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    distributed = init_from_environment()
    if os.environ.get("OMP_NUM_THREADS") is None:
        import torch

        torch.set_num_threads(1)
    task = Train.from_str_params(json.loads(args.task))
    summary = task.train_in(Path(args.work_dir), distributed)
    if distributed.is_main:
        (Path(args.work_dir) / SUMMARY_FILE).write_text(json.dumps(summary))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
