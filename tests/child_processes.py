"""Network tasks that report the process they produced in (tests/test_spawn.py): importable by name, as the
server of network tasks' processes imports a task's module."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import luigi

from task_engine.outputs import write_json
from task_engine.task import HashedTask


class ReportsItsProcess(HashedTask):
    """Writes which process produced it: its pid, its parent, the GPU it was given, its threads and folder."""

    runs_network = True
    name = luigi.Parameter()
    outputs = {"process": "process.json"}

    def config(self) -> dict[str, Any]:
        return {"name": self.name}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        import torch

        record = {
            "pid": os.getpid(),
            "parent": os.getppid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "threads": torch.get_num_threads(),
            "cwd": os.getcwd(),
            "cuda_initialized": torch.cuda.is_initialized(),
        }
        write_json(self.work_path(work_dir, "process"), record)
        return {**record, "device": "cpu"}


class SleepsAfterSayingItsPid(HashedTask):
    """Writes its pid into ``pid_file``, then sleeps (a task a killed run leaves behind)."""

    runs_network = True
    pid_file = luigi.Parameter()

    def produce(self, work_dir: Path) -> dict[str, Any]:
        Path(self.pid_file).write_text(str(os.getpid()))
        time.sleep(120)
        return {}


class EndsWithoutAnAnswer(HashedTask):
    """Its process ends in the middle of the work (as one killed for its memory would)."""

    runs_network = True

    def produce(self, work_dir: Path) -> dict[str, Any]:
        os._exit(3)


class WaitsForItsPeers(HashedTask):
    """Says it started (a file named after it in ``folder``), then waits until ``peers`` tasks have: it finishes
    only when that many run at once."""

    runs_network = True
    name = luigi.Parameter()
    folder = luigi.Parameter()
    peers = luigi.IntParameter()

    def config(self) -> dict[str, Any]:
        return {"name": self.name}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        folder = Path(self.folder)
        (folder / self.name).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        deadline = time.monotonic() + 120
        while len(list(folder.iterdir())) < self.peers:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {self.peers} tasks never ran at once")
            time.sleep(0.05)
        return {"device": "cpu"}
