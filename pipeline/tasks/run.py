"""FullRun, the entry point of the whole pipeline (``luigi --module pipeline FullRun``): checks the run's names
before any work, requires the Report and prints where it and the search index are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from pipeline.base import RunSettings
from pipeline.run_settings import resolved_profile, resolved_variant, sweep_values
from pipeline.tasks.params import DatasetParams, GridParams
from pipeline.tasks.report import Report
from pipeline.tasks.sweep import Sweep
from pipeline.validation import (
    RunConfigurationError,
    check_gpu_fit,
    check_recipe_options,
    check_run_names,
    check_tuning,
    exit_or_raise,
)


class FullRun(GridParams, DatasetParams, RunSettings, luigi.WrapperTask):
    """The whole pipeline: data -> dedup -> split -> Doc2Vec, word vectors, CNN features, k-NN tables ->
    every variant trained and evaluated -> report (one per value with ``--sweep``, and the sweep's section).
    Prints where the report is.
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
            self.check()
        except RunConfigurationError as error:
            exit_or_raise(error)

    def check(self) -> None:
        """Everything a run is built from, resolved and checked before any work (one line when wrong; the
        profile and ``--set`` were checked when the task was made: ``RunSettings``)."""
        overrides = recursively_unfreeze(self.variant_overrides)
        check_run_names(self.dataset, self.variants, overrides)
        check_recipe_options(self.dataset, self.recipe_options())
        changes = [tuple(self.set)]
        if self.sweep:
            path, values = sweep_values(self.sweep)
            changes = [(*self.set, f"{path}={value}") for value in values]
        for change in changes:
            profile = resolved_profile(self.profile, change)
            check_gpu_fit(
                {
                    name: resolved_variant(profile, name, overrides.get(name, {})).train_settings(profile.train).nproc_per_node
                    for name in self.variant_names()
                }
            )
            check_tuning(profile, [self.protocol] if self.protocol else [], self.tuned_variants())

    def requires(self) -> Report | Sweep:
        return self.clone(Sweep) if self.sweep else self.clone(Report)

    def report(self) -> Report:
        """The report (the first value's, in a sweep)."""
        target = self.requires()
        return target.reports()[0] if isinstance(target, Sweep) else target

    def report_path(self) -> Path:
        return self.report().output_path("markdown")


def _announce_report(task: FullRun) -> None:
    from pipeline.watch import watching

    if watching():
        return  # the display's process says it once the display is done (pipeline.watch)
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
        from pipeline.watch import start_watching

        start_watching(task, announce)


FullRun.event_handler(luigi.Event.SUCCESS)(_announce_report)
FullRun.event_handler(luigi.Event.DEPENDENCY_PRESENT)(_announce_report)
FullRun.event_handler(luigi.Event.DEPENDENCY_DISCOVERED)(_watch)

__all__ = ["FullRun"]
