"""A sweep: the run plan at each value of one setting (``FullRun --sweep path=v1,v2,...``), one Report per value,
and a sweep section: each headline metric of the headline method (or of the variant a ``variants.<name>`` path
changes) against the value, with its paired interval
against the first value (test items and seeds resampled together), as a table and a figure.

The runs of each value are the headline method's at the report's headline protocol (tuned when it ran, else
shared; shared when the swept setting is one of the method's tuning knobs, which its trials would set). Intervals are paired only when every value evaluates the same test items (one Split output): a sweep of
the split, the dataset or the deduplication changes the items, and then only the means are shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi

from evaluation.document import Document
from evaluation.plots import plot_against_setting
from evaluation.report.headline import headline_comparison
from pipeline.config.changes import read_value, sweep_values
from pipeline.tasks.base import PipelineTask
from pipeline.tasks.data import Split
from pipeline.tasks.report import HEADLINE_METHOD, Report, load_run
from pipeline.tasks.training import Train
from task_engine.outputs import save_text, write_json


class Sweep(PipelineTask):
    """One Report per value of ``sweep`` (with the run's other ``--set`` changes) and the sweep section."""

    sweep = luigi.Parameter(description="path=v1,v2,...: the setting and its values (the first is the reference)")
    value_plans = luigi.ListParameter(
        default=[], description="each value's run plan, in the order of the values (FullRun resolves them)"
    )
    outputs = {"json": "sweep.json", "markdown": "sweep.md", "figure": "sweep.png"}

    def path_and_values(self) -> tuple[str, list[str]]:
        return sweep_values(self.sweep)

    def reports(self) -> list[Report]:
        """One Report per value, each under the run's plan with that one change more."""
        return [self.clone(Report, plan=plan) for plan in self.value_plans]

    def requires(self) -> dict[str, list[Report]]:
        return {"reports": self.reports()}

    def config(self) -> dict[str, Any]:
        path, values = self.path_and_values()
        return {"path": path, "values": values, "method": self.method(self.reports()[0]), "bootstrap_resamples": self.settings.eval.bootstrap_resamples}

    def searched_by_tuning(self, report: Report, method: str) -> bool:
        """Whether the swept setting is one of the method's tuning knobs (its trials would overwrite it)."""
        path, _ = self.path_and_values()
        spec = report.run_plan.variant(method)
        knobs = spec.search_space.paths() if spec.search_space else []
        setting = path.split(".", 2)[2] if path.startswith("variants.") else path
        return setting in knobs

    def method(self, report: Report) -> str:
        """The variant compared across values: the one a ``variants.<name>...`` path changes, else the headline
        method (the first variant when the run leaves it out)."""
        path, _ = self.path_and_values()
        parts = path.split(".")
        if parts[0] == "variants" and len(parts) > 1 and parts[1] in report.variant_names():
            return parts[1]
        return HEADLINE_METHOD if HEADLINE_METHOD in report.variant_names() else report.variant_names()[0]

    def method_evaluations(self, report: Report) -> tuple[str, list[Any]]:
        """The compared variant's evaluations of ``report`` at its headline protocol (the shared one when the
        tuned protocol searches the swept setting itself)."""
        method = self.method(report)
        tuned = [task for task in report.tuned_runs() if task.variant == method]
        if tuned and not self.searched_by_tuning(report, method):
            return "tuned", tuned[0].evaluations()
        return "shared", [e for e in report.evaluations() if e.variant == method]

    def produce(self, work_dir: Path) -> dict[str, Any]:
        path, values = self.path_and_values()
        reports = self.reports()
        paired = len({report.clone(Split).signature() for report in reports}) == 1
        runs, protocols, label = [], [], ""
        for index, report in enumerate(reports):
            protocol, evaluations = self.method_evaluations(report)
            protocols.append(protocol)
            for evaluation in evaluations:
                run = load_run(evaluation, evaluation.clone(Train))
                label = label or run.label
                run.variant, run.label = f"value_{index}", f"{path}={values[index]}"
                runs.append(run)
        n = self.settings.eval.bootstrap_resamples
        rows = []
        for index, value in enumerate(values):
            # unpaired (other test items): the value against itself gives its mean; no interval is drawn
            reference = "value_0" if paired else f"value_{index}"
            comparison = headline_comparison(runs, f"value_{index}", reference, n)
            metrics = {row["key"]: row for row in comparison["rows"]}
            if index == 0 or not paired:
                metrics = {k: {**m, "difference": None, "ci_low": None, "ci_high": None} for k, m in metrics.items()}
            rows.append({"value": read_value(value), "raw": value, "protocol": protocols[index],
                         "seeds": comparison.get("method_seeds", []), "metrics": metrics,
                         "report": str(reports[index].output_path("markdown"))})
        result = {**self.config(), "label": label, "paired": paired, "rows": rows}
        write_json(self.work_path(work_dir, "json"), result)
        plot_against_setting(rows, path, f"{label}: headline metrics against {path}", self.work_path(work_dir, "figure"))
        save_text(self.work_path(work_dir, "markdown"), sweep_document(result).to_markdown())
        return {"path": path, "values": values, "paired": paired}


def _cell(metric: dict[str, Any]) -> str:
    text = f"{metric['method_mean']:.4f}"
    if metric.get("ci_low") is None:
        return text
    return text + f" (Δ {metric['difference']:+.4f} [{metric['ci_low']:+.4f}, {metric['ci_high']:+.4f}])"


def sweep_document(result: dict[str, Any]) -> Document:
    doc = Document(f"Sweep of {result['path']} — {result['label']}")
    keys = list(result["rows"][0]["metrics"])
    names = {key: result["rows"][0]["metrics"][key]["metric"] for key in keys}
    pairing = (
        "Δ: the difference from the first value with its 95% interval (paired bootstrap over test items and seeds)."
        if result["paired"]
        else "The values evaluate different test items (the setting changes the split or the data), so no paired "
        "interval is given: compare the means with the seeds' spread in each value's report."
    )
    doc.paragraph(
        f"{result['label']} at each value of `{result['path']}`, the run's other settings unchanged; each cell the "
        f"mean over seeds of the test metric. {pairing}"
    )
    doc.table(
        [result["path"], "protocol", "seeds", *[names[key] for key in keys]],
        [
            [row["raw"], row["protocol"], ", ".join(map(str, row["seeds"])), *[_cell(row["metrics"][key]) for key in keys]]
            for row in result["rows"]
        ],
    )
    doc.image("sweep.png", f"Each headline metric against {result['path']}; bars: 95% interval of Δ vs the first value.")
    doc.paragraph("Each value's full report: " + "; ".join(f"{row['raw']}: {row['report']}" for row in result["rows"]))
    return doc
