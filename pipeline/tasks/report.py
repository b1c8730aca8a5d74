"""The report of a FullRun, and FullRun itself (``luigi --module pipeline FullRun``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import luigi
import numpy as np
from luigi.freezing import recursively_unfreeze

from evaluation.report import ReportInputs, VariantRun, build_report
from pipeline.base import META_FILE, HashedTask
from pipeline.io import library_versions, read_json, save_text, write_json
from pipeline.tasks.data import Deduplicate, PrepareDataset, Split
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.representations import NeighborTables
from pipeline.variants import DEFAULT_VARIANTS, resolve_variant

REPORT_MD, REPORT_HTML, REPORT_JSON = "report.md", "report.html", "report.json"


class GridParams:
    variants = luigi.ListParameter(
        default=list(DEFAULT_VARIANTS), description="variants to train and compare"
    )
    seeds = luigi.ListParameter(default=[0], description="training seeds; every variant runs with each")
    variant_overrides = luigi.DictParameter(
        default={}, description='per-variant loss changes: {"ours": {"within_modality": {"alpha": 0.5}}}'
    )

    def overrides_for(self, variant: str) -> dict[str, Any]:
        return recursively_unfreeze(self.variant_overrides).get(variant, {})


def all_upstream(task: luigi.Task) -> list[HashedTask]:
    """Every HashedTask reachable from ``task`` (each once, dependencies first)."""
    seen: dict[str, HashedTask] = {}

    def visit(node: luigi.Task) -> None:
        for child in luigi.task.flatten(node.requires()):
            visit(child)
        if isinstance(node, HashedTask) and node.task_id not in seen:
            seen[node.task_id] = node

    visit(task)
    return list(seen.values())


class Report(GridParams, DatasetParams, HashedTask):
    def evaluations(self) -> list[Evaluate]:
        return [
            self.clone(
                Evaluate, variant=variant, seed=int(seed), variant_overrides=self.overrides_for(variant)
            )
            for variant in self.variants
            for seed in self.seeds
        ]

    def requires(self) -> dict[str, Any]:
        return {
            "evaluations": self.evaluations(),
            "prepared": self.clone(PrepareDataset),
            "dedup": self.clone(Deduplicate),
            "split": self.clone(Split),
            "neighbors": [self.clone(NeighborTables, space=space) for space in ("text", "image")],
        }

    def config(self) -> dict[str, Any]:
        return {"variants": list(self.variants), "seeds": [int(s) for s in self.seeds]}

    def produce(self, work_dir: Path) -> dict[str, Any]:
        req = self.requires()
        runs = []
        for evaluation in req["evaluations"]:
            folder = evaluation.output_dir()
            train_meta = read_json(evaluation.requires()["train"].output_dir() / META_FILE)
            runs.append(
                VariantRun(
                    variant=evaluation.variant,
                    label=resolve_variant(evaluation.variant)["label"],
                    seed=evaluation.seed,
                    metrics=read_json(folder / "metrics.json"),
                    training=train_meta["summary"],
                    hits={name: np.load(folder / f"{name}.npy") for name in ("i2t_hits", "t2i_hits")},
                )
            )
        tasks = []
        for task in all_upstream(self):
            if task is self:
                continue
            meta = read_json(task.output_dir() / META_FILE)
            label = task.get_task_family()
            for param in ("space", "variant", "seed"):
                if param in task.param_kwargs:
                    label += f"[{param}={task.param_kwargs[param]}]"
            tasks.append({"task": label, "signature": meta["signature"], "wall_time_s": meta["wall_time_s"]})
        inputs = ReportInputs(
            title=f"Crossmodal neighbourhoods — {self.dataset} ({self.profile})",
            runs=runs,
            dataset=read_json(self.input_dir(req["prepared"]) / "dataset_report.json"),
            dedup=read_json(self.input_dir(req["dedup"]) / "dedup_report.json"),
            splits=req["split"].meta()["summary"]["counts"],
            neighbor_tables={t.space: read_json(t.output_dir() / "neighbors.json") for t in req["neighbors"]},
            tasks=tasks,
            run_info={
                "dataset": self.dataset,
                "profile": self.profile,
                "seeds": [int(s) for s in self.seeds],
                "data_seed": self.data_seed,
                "variants": list(self.variants),
                "variant_overrides": recursively_unfreeze(self.variant_overrides),
                "device": runs[0].training.get("device", "cpu") if runs else "cpu",
                "total_task_wall_time_s": round(sum(t["wall_time_s"] for t in tasks), 1),
                **{f"version.{k}": v for k, v in library_versions().items()},
            },
        )
        document, payload = build_report(inputs)
        save_text(work_dir / REPORT_MD, document.to_markdown())
        save_text(work_dir / REPORT_HTML, document.to_html())
        write_json(work_dir / REPORT_JSON, payload)
        return {"variants": list(self.variants), "seeds": [int(s) for s in self.seeds]}


class FullRun(GridParams, DatasetParams, luigi.WrapperTask):
    """The whole pipeline: data -> dedup -> split -> Doc2Vec, word vectors, CNN features, k-NN tables ->
    every variant trained and evaluated -> report. Prints where the report is.
    """

    run_root = luigi.Parameter(default="runs", significant=False)
    profile = luigi.Parameter(default="demo")

    def requires(self) -> Report:
        return self.clone(Report)

    def report_path(self) -> Path:
        return self.requires().output_dir() / REPORT_MD


def _announce_report(task: FullRun) -> None:
    path = task.report_path()
    print(
        f"\nReport: {path.resolve()}\n        {path.with_name(REPORT_HTML).resolve()}",
        file=sys.stdout,
        flush=True,
    )


FullRun.event_handler(luigi.Event.SUCCESS)(_announce_report)
FullRun.event_handler(luigi.Event.DEPENDENCY_PRESENT)(_announce_report)

__all__ = ["FullRun", "Report"]
