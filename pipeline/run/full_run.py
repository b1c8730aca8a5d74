"""FullRun, the entry point of the whole pipeline (``luigi --module pipeline FullRun``): checks the run's names
before any work, requires the Report and prints where it and the search index are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import luigi

from data_recipes.manifest import ManifestError
from pipeline.config.changes import sweep_values
from pipeline.config.checks import RunConfigurationError, exit_or_raise
from pipeline.config.plan import RunPlan, with_change
from pipeline.config.plan_file import hold_plan
from pipeline.config.profiles import NEEDS_A_GPU
from pipeline.run.scheduler import check_scheduler
from pipeline.tasks.base import PlanParams
from pipeline.tasks.data import Split, check_split_fits
from pipeline.tasks.report import Report
from pipeline.tasks.sweep import Sweep
from task_engine import gpus


def check_profile_fits_host(profile: str) -> None:
    """:class:`RunConfigurationError` for a profile sized for a GPU (``profiles.NEEDS_A_GPU``) on a host without
    one (counted as the scheduler counts GPUs: no CUDA context), before any work."""
    if profile in NEEDS_A_GPU and not gpus.host_gpu_count():
        raise RunConfigurationError(
            f"profile {profile!r} needs a GPU and this host has none: {NEEDS_A_GPU[profile]}; run it on a GPU host "
            "(docs/gpu.md), or run demo-finetune here"
        )


class FullRun(PlanParams, luigi.WrapperTask):
    """The whole pipeline: data -> dedup -> split -> Doc2Vec, word vectors, CNN features, k-NN tables ->
    every variant trained and evaluated -> report (one per value with ``--sweep``, and the sweep's section).
    Its plan (and each swept value's) is resolved and checked when it is built, and written when Luigi schedules
    it, before any task runs. Prints where the report is.
    """

    run_root = luigi.Parameter(default="runs", significant=False)
    keep_stale = luigi.BoolParameter(
        default=False, significant=False, description="keep outputs made by older code (the report names them)"
    )
    sweep = luigi.Parameter(
        default="", description="path=v1,v2,...: run the plan at each value and compare them (docs/usage.md)"
    )
    quiet = luigi.BoolParameter(default=False, significant=False, description="no progress display")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            check_profile_fits_host(self.profile)
            self.check_known_data()
            #: each swept value's plan: the run's with that change, resolved and checked now
            self._value_runs = self.sweep_plans() if self.sweep else []
            self._value_plans = tuple(hold_plan(plan, self.run_root) for plan in self._value_runs)
        except ManifestError as error:
            exit_or_raise(RunConfigurationError(str(error)))
        except RunConfigurationError as error:
            exit_or_raise(error)
        check_scheduler()  # a central scheduler that is not there: one line now, not a traceback in two minutes

    def sweep_plans(self) -> list[RunPlan]:
        path, values = sweep_values(self.sweep)
        return [with_change(self.run_plan, f"{path}={value}") for value in values]

    def started_plans(self) -> list[RunPlan]:
        return [*super().started_plans(), *self._value_runs]

    def check_known_data(self) -> None:
        """When this run root already holds the run's split, the settings that depend on its size are checked
        now, before anything is scheduled (a new split is checked by Split itself)."""
        split = self.clone(Split)
        if split.complete():
            check_split_fits(split)

    def default_grid(self) -> list[str]:
        return []  # the paper's grid for the dataset

    def requires(self) -> Report | Sweep:
        return self.clone(Sweep, value_plans=self._value_plans) if self.sweep else self.clone(Report)

    def report(self) -> Report:
        """The report (the first value's, in a sweep)."""
        target = self.requires()
        return target.reports()[0] if isinstance(target, Sweep) else target

    def report_path(self) -> Path:
        return self.report().output_path("markdown")


def _announce_report(task: FullRun) -> None:
    from pipeline.run.watch import watching

    if watching():
        return  # the display's process says it once the display is done (pipeline.run.watch)
    announce(task)


def announce(task: FullRun) -> None:
    report = task.report()
    lines = [f"\nReport: {report.output_path('markdown').resolve()}", f"        {report.output_path('html').resolve()}"]
    if task.sweep:
        lines.append(f"Sweep:  {task.requires().output_path('markdown').resolve()}")
    lines.append(f"Search: {report.search_index().serve_command()}")
    print("\n".join(lines), file=sys.stdout, flush=True)


def _watch(task: FullRun, _dependency: luigi.Task) -> None:
    """Luigi found FullRun's dependencies: a run is starting (``python -m pipeline plan`` never gets here). Only
    on the command line: a run built from code (``luigi.build``, the tests) draws nothing."""
    from luigi.cmdline_parser import CmdlineParser

    if not task.quiet and CmdlineParser.get_instance() is not None:
        from pipeline.run.watch import start_watching

        start_watching(task, announce)


FullRun.event_handler(luigi.Event.SUCCESS)(_announce_report)
FullRun.event_handler(luigi.Event.DEPENDENCY_PRESENT)(_announce_report)

FullRun.event_handler(luigi.Event.DEPENDENCY_DISCOVERED)(_watch)

__all__ = ["FullRun"]
