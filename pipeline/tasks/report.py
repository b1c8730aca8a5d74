"""The report of a FullRun: every evaluation of the grid read into one Markdown, HTML and JSON document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi
import numpy as np
from luigi.freezing import recursively_unfreeze

from data_recipes.manifest import image_ids, integer_group_ids
from evaluation.document import Document
from evaluation.evaluate import HEADLINE_PRESERVATION
from evaluation.gallery import write_thumbnails
from evaluation.report import (
    BASELINE_VARIANT,
    FIGURES_DIR,
    OURS_VARIANT,
    QUALITATIVE,
    Qualitative,
    ReportInputs,
    VariantRun,
    build_report,
    common_seed,
    compare_qualitatively,
    qualitative_inputs,
)
from pipeline.config.plan import plan_summary
from pipeline.config.plan_file import plan_path
from pipeline.engine.outputs import library_versions, save_text, write_json
from pipeline.engine.task import HashedTask
from pipeline.tasks.base import PipelineTask
from pipeline.tasks.cocos import Cocos
from pipeline.tasks.data import Deduplicate, PrepareDataset, Split
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.representations import NeighborTables, TrainDoc2Vec, TrainWordVectors
from pipeline.tasks.search_index import SearchIndex
from pipeline.tasks.training import Train
from pipeline.tasks.tuning import TunedRuns

#: the headline, the significance table and Figs. 5–6 compare this method with this baseline
HEADLINE_METHOD, HEADLINE_BASELINE = OURS_VARIANT, BASELINE_VARIANT


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


def load_headline_preservation(evaluation: Evaluate) -> dict[str, np.ndarray]:
    """Evaluate's per-sample neighbor preservation at the headline k, by modality (those it saved)."""
    arrays = {
        modality: evaluation.load(name, missing_ok=True) for modality, name in HEADLINE_PRESERVATION.items()
    }
    return {modality: array for modality, array in arrays.items() if array is not None}


def load_run(evaluation: Evaluate, train: Train) -> VariantRun:
    """One evaluated (variant, seed) as the report reads it: Evaluate's metrics and arrays, and the
    training summary of the checkpoint it evaluated."""
    spec = evaluation.variant_spec()
    return VariantRun(
        variant=evaluation.variant,
        label=spec.label,
        seed=evaluation.seed,
        metrics=evaluation.load("metrics"),
        training=train.meta()["summary"],
        hits={name: evaluation.load(name) for name in ("i2t_hits", "t2i_hits")},
        curves=evaluation.load("curves"),
        loss_names=spec.loss_names(),
        preservation=load_headline_preservation(evaluation),
    )


def task_row(task: HashedTask) -> dict[str, Any]:
    """A task of the run metadata table: its family with the parameters that tell instances apart, its
    output signature and wall time (from its meta file)."""
    meta = task.meta()
    label = task.get_task_family()
    for param in ("space", "variant", "seed"):
        if param in task.param_kwargs:
            label += f"[{param}={task.param_kwargs[param]}]"
    return {"task": label, "signature": meta["signature"], "wall_time_s": meta["wall_time_s"]}


class Report(PipelineTask):
    """Reads every evaluation, COCOS result and data report of the grid and writes the report as Markdown,
    HTML and JSON (the content is assembled by ``evaluation.report``)."""

    outputs = {
        "markdown": "report.md",
        "html": "report.html",
        "json": "report.json",
        "run_index": "run_index.json",
    }

    # ------------------------------------------------------------------ the grid (the plan's)
    def variant_names(self) -> list[str]:
        return list(self.run_plan.grid)

    def seeds_for(self, variant: str) -> list[int]:
        return list(self.run_plan.seeds_for(variant))

    def seed_plan(self) -> dict[str, list[int]]:
        return {variant: self.seeds_for(variant) for variant in self.variant_names()}

    def protocols(self) -> tuple[str, ...]:
        return self.run_plan.protocols()

    def tuned_variants(self) -> list[str]:
        return self.run_plan.tuned_variants()

    def shared_variants(self) -> list[str]:
        return self.run_plan.shared_variants()

    def run_index(self, req: dict[str, Any]) -> list[dict[str, Any]]:
        """Which output folders hold each run of this report (``req``: its requirements): variant, seed,
        protocol and the settings the run used (the protocol's overrides), with its Train and Evaluate folders
        relative to the run root. ``crossmodal export`` reads this instead of guessing from the run root's
        folders."""
        entries = [
            (e, "shared") for e in req["evaluations"]
        ] + [(e, "tuned") for task in req["tuned"] for e in task.evaluations()]
        return [
            {
                "variant": e.variant,
                "label": e.variant_spec().label,
                "seed": int(e.seed),
                "protocol": protocol,
                "point": recursively_unfreeze(e.point),
                "train": f"{Train.__name__}/{e.clone(Train).signature()}",
                "evaluate": f"{Evaluate.__name__}/{e.signature()}",
            }
            for e, protocol in entries
        ]

    def evaluations(self) -> list[Evaluate]:
        """The shared protocol's evaluations (every variant at the profile's settings)."""
        return [
            self.clone(Evaluate, variant=variant, seed=int(seed))
            for variant in self.shared_variants()
            for seed in self.seeds_for(variant)
        ]

    def tuned_runs(self) -> list[TunedRuns]:
        """The tuned protocol's runs: each variant with a search space at the settings it chose."""
        return [
            self.clone(TunedRuns, variant=variant)
            for variant in self.tuned_variants()
        ]

    def per_run(self, task_class: type[HashedTask]) -> list[HashedTask]:
        """``task_class`` (Train, Cocos) of every evaluated (variant, seed), in the order of evaluations()."""
        return [
            self.clone(task_class, variant=e.variant, seed=e.seed, point=e.point)
            for e in self.evaluations()
        ]

    def search_index(self) -> SearchIndex:
        """The test split indexed with the headline method's first seed (the first variant's when the run
        leaves the headline method out)."""
        names = self.variant_names()
        variant = HEADLINE_METHOD if HEADLINE_METHOD in names else names[0]
        # the run at the profile's settings; under the tuned protocol alone, the run at the tuned choice
        tuned = variant not in self.shared_variants()
        return self.clone(SearchIndex, variant=variant, seed=min(self.seeds_for(variant)), tuned=tuned)

    def requires(self) -> dict[str, Any]:
        return {
            "search_index": self.search_index(),
            "evaluations": self.evaluations(),
            "tuned": self.tuned_runs(),
            "trains": self.per_run(Train),
            "prepared": self.clone(PrepareDataset),
            "dedup": self.clone(Deduplicate),
            "split": self.clone(Split),
            "neighbors": [self.clone(NeighborTables, space=space) for space in ("text", "image")],
            "doc2vec": self.clone(TrainDoc2Vec),
            "words": self.clone(TrainWordVectors),
            "cocos": self.per_run(Cocos),
        }

    def config(self) -> dict[str, Any]:
        return {
            "variants": self.variant_names(),
            "seeds": self.seed_plan(),
            "protocols": list(self.protocols()),
            "tuned_variants": self.tuned_variants(),
            "qualitative": QUALITATIVE,
            "headline": {
                "method": HEADLINE_METHOD,
                "baseline": HEADLINE_BASELINE,
                "bootstrap_resamples": self.settings.eval.bootstrap_resamples,
            },
            # every resolved setting and variant of the run (labels too): two runs whose reports could differ
            # never share a report folder, whatever their inputs' hashes leave out
            "plan": report_identity(self.run_plan.summary()),
        }

    def qualitative(self, work_dir: Path) -> Qualitative | None:
        """Figs. 5 and 6: the method against the baseline at their lowest common seed, with thumbnails."""
        req = self.requires()
        by_key = {(e.variant, e.seed): e for e in req["evaluations"]}
        seed = common_seed(by_key, HEADLINE_METHOD, HEADLINE_BASELINE)
        if seed is None:
            return None
        method, baseline = by_key[(HEADLINE_METHOD, seed)], by_key[(HEADLINE_BASELINE, seed)]
        test_rows = method.load("test_rows")
        if not np.array_equal(test_rows, baseline.load("test_rows")):
            raise RuntimeError(
                f"{method.output_dir()} and {baseline.output_dir()} evaluated different test rows; rerun Evaluate"
            )
        manifest = req["split"].manifest()
        test_manifest = manifest.iloc[test_rows]
        cache_rows = test_manifest["cache_row"].to_numpy()
        texts = test_manifest["text"].to_numpy()
        comparison = compare_qualitatively(
            (method.load("test_image"), method.load("test_text")),
            (baseline.load("test_image"), baseline.load("test_text")),
            req["doc2vec"].load("doc_vectors")[test_rows],
            integer_group_ids(manifest).to_numpy()[test_rows],
            image_ids(test_manifest),
            texts,
        )
        thumbnails = write_thumbnails(
            req["prepared"].images(),
            cache_rows,
            comparison.shown,
            work_dir / FIGURES_DIR / "thumbs",
            work_dir,
        )
        return qualitative_inputs(
            comparison,
            seed,
            method.variant_spec().label,
            baseline.variant_spec().label,
            texts,
            thumbnails,
        )

    def produce(self, work_dir: Path) -> dict[str, Any]:
        req = self.requires()
        runs = [load_run(e, train) for e, train in zip(req["evaluations"], req["trains"], strict=True)]
        tuned = [load_run(e, e.clone(Train)) for task in req["tuned"] for e in task.evaluations()]
        runner_up = [load_run(e, e.clone(Train)) for task in req["tuned"] for e in task.runner_up_evaluations()]
        frozen_start = [load_run(e, e.clone(Train)) for task in req["tuned"] for e in task.frozen_start_evaluations()]
        selections = {task.variant: task.requires()["tune"].load("selection") for task in req["tuned"]}
        cocos = [{"label": task.variant_spec().label, **task.load("cocos")} for task in req["cocos"]]
        # the tuning schedule's Trains and the tuned runs' Train and Evaluate are dynamic dependencies (known once
        # Tune has run): added here
        dynamic = [
            task
            for tuned_runs in req["tuned"]
            for e in [*tuned_runs.evaluations(), *tuned_runs.runner_up_evaluations(), *tuned_runs.frozen_start_evaluations()]
            for task in all_upstream(e)
        ]
        for tuned_runs in req["tuned"]:
            tune = tuned_runs.requires()["tune"]
            dynamic += [tune.train_of(key) for key in tune.schedule().visited]
        every = {task.task_id: task for task in [*all_upstream(self), *dynamic] if task is not self}
        tasks = [task_row(task) for task in every.values()]
        inputs = ReportInputs(
            title=f"Crossmodal neighborhoods — {self.run_plan.recipe} ({self.run_plan.profile})",
            runs=runs,
            dataset=req["prepared"].load("report"),
            dedup=req["dedup"].load("report"),
            splits=req["split"].meta()["summary"]["counts"],
            coverage=req["words"].load("coverage"),
            neighbor_tables={t.space: t.load("summary") for t in req["neighbors"]},
            tasks=tasks,
            run_info={
                "dataset": self.run_plan.recipe,
                "profile": self.run_plan.profile,
                "seeds": self.seed_plan(),
                "data_seed": self.run_plan.data_seed,
                "variants": self.variant_names(),
                "protocols": list(self.protocols()),
                "tuned_variants": self.tuned_variants(),
                "changes": list(self.run_plan.changes),
                "device": runs[0].training.get("device", "cpu") if runs else "cpu",
                "total_task_wall_time_s": round(sum(t["wall_time_s"] for t in tasks), 1),
                **{f"version.{k}": v for k, v in library_versions().items()},
            },
            cocos=cocos,
            qualitative=self.qualitative(work_dir),
            baseline=HEADLINE_BASELINE,
            method=HEADLINE_METHOD,
            bootstrap_resamples=self.settings.eval.bootstrap_resamples,
            protocols=self.protocols(),
            tuned_runs=tuned,
            selections=selections,
            runner_up_runs=runner_up,
            frozen_start_runs=frozen_start,
        )
        document, payload = build_report(inputs, work_dir)
        kept = [
            {"task": f"{task.get_task_family()}/{task.signature()}", "reason": reason}
            for task in every.values()
            if (reason := task.stale_reason()) is not None
        ]
        # the plan is linked, not copied: its one file in the run root (written when the run was scheduled)
        payload["run_plan"] = {
            "plan": self.plan_id,
            "file": str(plan_path(".", self.plan_id)),
            "changes": list(self.run_plan.changes),
            "kept_stale_outputs": kept,
        }
        plan_section(document, self.run_plan.summary(), payload["run_plan"])
        payload["serve_command"] = search_section(document, req["search_index"])
        save_text(self.work_path(work_dir, "markdown"), document.to_markdown())
        save_text(self.work_path(work_dir, "html"), document.to_html())
        write_json(self.work_path(work_dir, "json"), payload)
        write_json(self.work_path(work_dir, "run_index"), {"report": self.signature(), "runs": self.run_index(req)})
        return {"variants": self.variant_names(), "seeds": self.seed_plan()}


def report_identity(summary: dict[str, Any]) -> dict[str, Any]:
    """What of a run plan a Report hashes: every resolved setting and variant (labels included), not how the
    changes were spelled, not the dataset's identity twice (it is under ``dataset``) nor the training settings a
    Train does not hash (the speed-only ones, those that do not act, one added after 1.0 at its default)."""
    from common.settings import significant
    from models.settings import TrainSettings

    settings = {key: value for key, value in summary["settings"].items() if key != "variants"}
    settings["data"] = {k: v for k, v in settings["data"].items() if k not in ("recipe", "raw_dir", "shards", "seed")}
    settings["train"] = significant(TrainSettings(**settings["train"]))
    return {**{key: value for key, value in summary.items() if key not in ("changes", "settings")}, "settings": settings}


def plan_section(document: Document, summary: dict[str, Any], link: dict[str, Any]) -> None:
    """The run plan in brief (its file in the run root, ``link['file']``, has all of it) and any output kept from
    older code."""
    document.heading("Run plan")
    document.paragraph(
        f"Everything this run used, resolved once, is in `{link['file']}` of the run root (plan {link['plan']}); "
        "`python -m pipeline plan` with the same arguments shows it and what each task would do."
    )
    for line in plan_summary(summary):
        document.paragraph(line)
    if link["kept_stale_outputs"]:
        document.paragraph(
            "**Outputs made by older code, kept with --keep-stale** (their numbers may not be what today's code "
            "computes): " + "; ".join(f"{k['task']} ({k['reason']})" for k in link["kept_stale_outputs"])
        )


def search_section(document: Document, search_index: SearchIndex) -> str:
    """The report's last section: how to search the test split with the exported model; returns the command."""
    summary = search_index.meta()["summary"]
    label = search_index.variant_spec().label
    command = search_index.serve_command()
    document.heading("Search with this model")
    document.paragraph(
        f"The test split ({summary['items']} items) is indexed with {label} (seed {summary['seed']}), exported "
        f"as a model bundle beside the index. Serve it and open http://127.0.0.1:8000/ (docs/serving.md):"
    )
    document.code(command)
    return command

__all__ = ["Report", "all_upstream"]
