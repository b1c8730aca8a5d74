"""Running tasks through luigi.build in tests and recording which of them actually ran."""

from __future__ import annotations

import shutil
from pathlib import Path

import luigi


class RanTasks:
    """Records which tasks actually ran (SUCCESS after run()), by task family and params."""

    def __init__(self) -> None:
        self.ran: list[luigi.Task] = []

    def __call__(self, task: luigi.Task) -> None:
        self.ran.append(task)

    def families(self) -> list[str]:
        return sorted(task.get_task_family() for task in self.ran)


def build(tasks: list[luigi.Task]) -> tuple[luigi.execution_summary.LuigiRunResult, RanTasks]:
    recorder = RanTasks()
    luigi.Task.event_handler(luigi.Event.SUCCESS)(recorder)
    try:
        result = luigi.build(
            tasks, local_scheduler=True, detailed_summary=True, workers=1, log_level="WARNING"
        )
    finally:
        luigi.Task._event_callbacks[luigi.Task][luigi.Event.SUCCESS].discard(recorder)
    return result, recorder


def copied_root(smoke_run, tmp_path: Path) -> Path:
    """A copy of the session's smoke run root, for a test that rebuilds outputs in place or watches a run
    (the other tests must not see its outputs)."""
    root = tmp_path / "runs"
    shutil.copytree(smoke_run[3], root, ignore=shutil.ignore_patterns("*.lock", "*.partial"))
    return root
