"""A task's ``produce`` in a process of its own (:mod:`pipeline.engine.spawn` starts it): the task is rebuilt from
its parameters, produces into the work folder its Luigi worker prepared, and hands back its summary, or the
error it raised, in ``_spawned_result.json`` there.

    python -m pipeline.engine.child --module pipeline.tasks.training --family Train \
        --params '<Train parameters as JSON>' --work-dir runs/Train/<signature>.partial --threads 4
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from common.files import atomic_path
from pipeline.engine.outputs import json_default
from pipeline.engine.spawn import RESULT_FILE, error_record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one task's produce() in a process of its own")
    parser.add_argument("--module", required=True, help="the module that defines the task's class")
    parser.add_argument("--family", required=True, help="the task's class name")
    parser.add_argument("--params", required=True, help="the task's parameters (JSON of to_str_params)")
    parser.add_argument("--work-dir", required=True, help="the task's work folder (its .partial output)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (the worker's share)")
    args = parser.parse_args(argv)
    work_dir = Path(args.work_dir)
    try:
        import torch

        torch.set_num_threads(max(1, args.threads))
        task_class = getattr(importlib.import_module(args.module), args.family)
        task = task_class.from_str_params(json.loads(args.params))
        answer = {"summary": task.produce(work_dir)}
        code = 0
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the worker, which raises it
        answer = {"error": error_record(error)}
        code = 1
    with atomic_path(work_dir / RESULT_FILE) as tmp:
        tmp.write_text(json.dumps(answer, default=json_default))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
