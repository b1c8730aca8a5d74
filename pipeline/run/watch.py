"""Starts the progress display (``pipeline.run.progress``) of a FullRun run from the command line: the plan's tasks
as the display watches them, the display chosen for where the output goes, stopped when the process ends."""

from __future__ import annotations

import atexit
import logging
import sys
from collections.abc import Callable

import luigi

from pipeline.run.progress import ProgressDisplay, WatchedTask
from pipeline.run.status import DONE, KEPT, PlannedTask, task_plan

_started: list[ProgressDisplay] = []


def watched(planned: PlannedTask) -> WatchedTask:
    task = planned.task
    pending = planned.status not in (DONE, KEPT)
    if planned.family != "Train":
        return WatchedTask(planned.family, task.output_dir(), planned.label(), pending=pending)
    settings = task.train_settings()
    label = settings.selection_metric.progress_label_for(settings.selection_n_way)
    # the run's own cap: a warm-started learning tower stops at trunk_epochs, not at epochs
    return WatchedTask(
        "Train", task.output_dir(), planned.label(), task.max_epochs(), settings.selection, label, pending=pending
    )


def display_mode(stream: object) -> str:
    """Live on a terminal, plain lines otherwise, and plain when Luigi's own log is on (``--log-level INFO``):
    its lines would break a display redrawn in place."""
    level = logging.getLevelName(str(luigi.interface.core().log_level).upper())
    verbose = isinstance(level, int) and level < logging.WARNING
    return "live" if getattr(stream, "isatty", lambda: False)() and not verbose else "plain"


def watching() -> bool:
    """Whether a display draws this run (in this process, or in the process that forked this worker)."""
    return bool(_started)


def start_watching(run: luigi.Task, on_finish: Callable[[luigi.Task], None]) -> None:
    """Once per process: plan ``run``'s tasks and start the display (on stderr). At exit it stops, then
    ``on_finish(run)`` runs when the run is complete: what a worker would have printed mid-display."""
    if _started:
        return
    planned = task_plan(run.requires())
    display = ProgressDisplay(
        [watched(p) for p in planned], run_root=run.run_root, stream=sys.stderr, mode=display_mode(sys.stderr)
    )
    _started.append(display.start())

    def finish() -> None:
        display.stop()
        luigi.task_register.Register.clear_instance_cache()  # read the outputs as they are now
        if run.complete():
            on_finish(run)

    atexit.register(finish)
