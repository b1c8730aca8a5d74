"""FullRun, the entry point of the whole pipeline (``luigi --module pipeline FullRun``): checks the run's names
before any work, requires the Report and prints where it and the search index are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from pipeline.tasks.params import DatasetParams, GridParams
from pipeline.tasks.report import Report
from pipeline.validation import (
    RunConfigurationError,
    check_gpu_fit,
    check_run_names,
    check_tuning,
    exit_or_raise,
)


class FullRun(GridParams, DatasetParams, luigi.WrapperTask):
    """The whole pipeline: data -> dedup -> split -> Doc2Vec, word vectors, CNN features, k-NN tables ->
    every variant trained and evaluated -> report. Prints where the report is.
    """

    run_root = luigi.Parameter(default="runs", significant=False)
    profile = luigi.Parameter(default="demo")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            overrides = recursively_unfreeze(self.variant_overrides)
            check_run_names(self.profile, self.dataset, self.variants, overrides)
            check_gpu_fit(self.profile, self.variant_names(), overrides)
            check_tuning(self.profile, [self.protocol] if self.protocol else [], self.tuned_variants())
        except RunConfigurationError as error:
            exit_or_raise(error)

    def requires(self) -> Report:
        return self.clone(Report)

    def report_path(self) -> Path:
        return self.requires().output_path("markdown")


def _announce_report(task: FullRun) -> None:
    path = task.report_path()
    print(
        f"\nReport: {path.resolve()}\n        {task.requires().output_path('html').resolve()}"
        f"\nSearch: {task.requires().search_index().serve_command()}",
        file=sys.stdout,
        flush=True,
    )


FullRun.event_handler(luigi.Event.SUCCESS)(_announce_report)
FullRun.event_handler(luigi.Event.DEPENDENCY_PRESENT)(_announce_report)

__all__ = ["FullRun"]
