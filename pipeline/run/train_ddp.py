"""torchrun's entry point for a data-parallel Train: one process of it.

torchrun starts this module (``Train.torchrun_job`` names it, ``pipeline.engine.torchrun`` builds the command; on
several nodes each node runs the same command) with the Train's parameters and its work directory. Each process joins the group
(``models.distributed.init_from_environment``), rebuilds the same Train and trains its share into the work
directory; rank 0 alone writes the checkpoints, the history and the summary the launching Train reads back.

    python -m torch.distributed.run --nproc-per-node N --standalone -m pipeline.run.train_ddp \
        --task '<Train parameters as JSON>' --work-dir <the Train's work directory>
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch.distributed as dist

from common.bounded_json import COMMAND_LINE, loads_bounded
from models.distributed import init_from_environment
from pipeline.engine.outputs import write_json
from pipeline.engine.torchrun import SUMMARY_FILE
from pipeline.tasks.training import Train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one process of a data-parallel Train (started by torchrun)")
    parser.add_argument("--task", required=True, help="the Train's parameters (JSON of to_str_params)")
    parser.add_argument("--work-dir", required=True, help="the Train's work directory (shared by all nodes)")
    args = parser.parse_args(argv)
    distributed = init_from_environment()  # torchrun sets OMP_NUM_THREADS=1 per process unless the user did
    task = Train.from_str_params(loads_bounded(args.task, "--task", COMMAND_LINE))
    summary = task.train_in(Path(args.work_dir), distributed)
    if distributed.is_main:
        write_json(Path(args.work_dir) / SUMMARY_FILE, summary)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
