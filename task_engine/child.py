"""A task's ``produce`` in a process of its own (:mod:`task_engine.spawn` starts it): the task is rebuilt from
its parameters (the run plan's id among them), produces into the work folder its Luigi worker prepared, and
hands back its summary, or the error it raised, as JSON on the file descriptor ``--answer-fd`` (a pipe the
worker reads).

    python -m task_engine.child --module <the task's module> --family <its class> \
        --params '<its parameters as JSON>' --work-dir runs/<Family>/<signature>.partial --threads 4 --answer-fd 5
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from pathlib import Path

from task_engine.outputs import json_default
from task_engine.spawn import error_record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one task's produce() in a process of its own")
    parser.add_argument("--module", required=True, help="the module that defines the task's class")
    parser.add_argument("--family", required=True, help="the task's class name")
    parser.add_argument("--params", required=True, help="the task's parameters (JSON of to_str_params)")
    parser.add_argument("--work-dir", required=True, help="the task's work folder (its .partial output)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (the worker's share)")
    parser.add_argument("--answer-fd", type=int, required=True, help="where the JSON answer is written")
    args = parser.parse_args(argv)
    work_dir = Path(args.work_dir)
    try:
        import torch

        torch.set_num_threads(max(1, args.threads))
        task_class = getattr(importlib.import_module(args.module), args.family)
        task = task_class.from_str_params(json.loads(args.params))
        answer = json.dumps({"summary": task.produce(work_dir)}, default=json_default)
        code = 0
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the worker, which raises it
        answer = json.dumps({"error": error_record(error)}, default=str)
        code = 1
    with os.fdopen(args.answer_fd, "w") as pipe:
        pipe.write(answer)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
