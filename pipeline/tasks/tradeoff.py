"""What the within-modality term trades (issue 30, item 5): a method with L_text and L_img (Ours, Eq. 8) trained
at several scales of their weights α, β — 0 (its batches, neighbors included, with the cross-modal loss alone)
up to several times the paper's — each with the report's seeds, and scored on test: n-way R@1 in both
directions and neighbor preservation, each against scale 0 with a paired interval over test items and seeds.

    luigi --module pipeline WithinModalityTradeoff            # the demo: Ours at its tuned lr and angle
    luigi --module pipeline WithinModalityTradeoff --settings-from shared --variant ours_trip

A table and a figure a user picks an operating point from; not part of FullRun (it trains 5 x 3 models).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from common.settings import significant
from evaluation.document import Document
from evaluation.plots import plot_tradeoff
from evaluation.report.headline import headline_comparison
from evaluation.report.inputs import VariantRun
from pipeline.config.checks import RunConfigurationError
from pipeline.config.variant_spec import merge_overrides
from pipeline.tasks.base import PipelineTask, VariantChoice
from pipeline.tasks.data import Split
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.report import load_run
from pipeline.tasks.training import Train
from pipeline.tasks.tuning import Tune, final_run
from task_engine.outputs import save_text, write_json
from task_engine.task import HashedTask

#: 0 = the cross-modal loss alone on the same batches; 1 = the paper's α, β
DEFAULT_SCALES = (0.0, 0.5, 1.0, 2.0, 4.0)
SETTINGS_FROM = ("tuned", "shared")


class WithinModalityTradeoff(VariantChoice, PipelineTask):
    """``variant`` (one with a ``within_modality`` loss) at each weight scale and seed, evaluated on test;
    writes ``tradeoff.json``, ``tradeoff.md`` and ``tradeoff.png``."""

    variant = luigi.Parameter(default="ours", description="a variant with a within_modality loss")
    scales = luigi.ListParameter(default=list(DEFAULT_SCALES), description="within-modality weight scales")
    settings_from = luigi.Parameter(
        default="tuned",
        description="the other settings: 'tuned' (the variant's Tune choice, its scale replaced) or 'shared'",
    )
    outputs = {"json": "tradeoff.json", "markdown": "tradeoff.md", "figure": "tradeoff.png"}

    def check_identity(self) -> None:
        """What the trade-off is run on, checked when it starts (one line, exit 2)."""
        super().check_identity()
        if self.settings_from not in SETTINGS_FROM:
            raise RunConfigurationError(f"--settings-from {self.settings_from!r}: expected one of {', '.join(SETTINGS_FROM)}")
        spec = self.variant_spec()
        if "within_modality" not in spec.loss_names():
            raise RunConfigurationError(f"--variant {self.variant}: it has no within_modality loss to scale")
        if self.settings_from == "tuned" and spec.search_space is None:
            raise RunConfigurationError(
                f"--variant {self.variant} has no search space, so no tuned settings: use --settings-from shared"
            )
        if 0.0 not in [float(s) for s in self.scales]:
            raise RunConfigurationError("--scales must include 0 (the comparison point of every interval)")

    def seed_list(self) -> list[int]:
        """The variant's seeds of the run (``--seeds`` changes them)."""
        return list(self.run_plan.seeds_for(self.variant))

    def requires(self) -> dict[str, Any]:
        """The dataset (its split) and, for the tuned settings, the variant's Tune."""
        return {"split": self.clone(Split), **({"tune": self.clone(Tune)} if self.settings_from == "tuned" else {})}

    def config(self) -> dict[str, Any]:
        return {
            "variant": self.variant_spec().as_dict(),
            "train": significant(self.train_settings()),
            "scales": [float(s) for s in self.scales],
            "seeds": self.seed_list(),
            "settings_from": self.settings_from,
            # the evaluations' settings: the runs themselves are dynamic dependencies (see HashedTask.complete)
            "eval": self.settings.section("eval"),
        }

    def base_overrides(self) -> dict[str, Any]:
        if self.settings_from == "tuned":
            return self.requires()["tune"].chosen_overrides()
        return recursively_unfreeze(self.point)

    def trains(self) -> dict[float, list[Train]]:
        base = self.base_overrides()
        return {
            float(scale): [
                self.clone(
                    Train,
                    seed=seed,
                    point=merge_overrides(base, {"within_modality": {"weight_scale": float(scale)}}),
                )
                for seed in self.seed_list()
            ]
            for scale in self.scales
        }

    def first_trains(self) -> dict[float, list[Train]]:
        """What trains first: :meth:`trains`, or with a warm start their frozen parents (as TunedRuns does)."""
        return {scale: [t.parent() or t for t in trains] for scale, trains in self.trains().items()}

    def final_trains(self) -> dict[float, list[Train]]:
        """Each run as the tuned protocol finishes it (:func:`final_run`: continued to the extended cap when
        capped; with a warm start, the trunk's run from the parent so continued, as TunedRuns makes and reports
        it); readable once first_trains() ran."""
        return {
            scale: [final_run(train, self.settings.tuning) for train in trains]
            for scale, trains in self.trains().items()
        }

    def evaluations(self) -> dict[float, list[Evaluate]]:
        return {
            scale: [self.clone(Evaluate, seed=t.seed, point=t.overrides()) for t in trains]
            for scale, trains in self.final_trains().items()
        }

    def dynamic_upstream(self) -> list[HashedTask]:
        """Every scale's runs and evaluations (the tuned settings are readable once Tune has run)."""
        trains = [t for group in self.first_trains().values() for t in group]
        finals = [t for group in self.final_trains().values() for t in group]
        return [*trains, *finals, *(e for group in self.evaluations().values() for e in group)]

    def run(self) -> Iterator[list[HashedTask]]:  # a Luigi task with dynamic dependencies is a generator
        yield [train for trains in self.first_trains().values() for train in trains]
        yield [train for trains in self.final_trains().values() for train in trains]
        yield [e for evaluations in self.evaluations().values() for e in evaluations]
        super().run()

    def produce(self, work_dir: Path) -> dict[str, Any]:
        label = self.variant_spec().label
        runs: list[VariantRun] = []
        for scale, evaluations in self.evaluations().items():
            for evaluation in evaluations:
                run = load_run(evaluation, evaluation.clone(Train))
                run.variant, run.label = f"scale_{scale:g}", f"{label} ×{scale:g}"
                runs.append(run)
        result = tradeoff_table(runs, [float(s) for s in self.scales], self.settings.eval.bootstrap_resamples)
        shown = self.base_overrides()
        shown.get("within_modality", {}).pop("weight_scale", None)  # the scale is what varies
        result.update({"variant": self.variant, "label": label, "base_overrides": shown, **self.config()})
        write_json(self.work_path(work_dir, "json"), result)
        plot_tradeoff(result, self.work_path(work_dir, "figure"))
        save_text(self.work_path(work_dir, "markdown"), tradeoff_document(result).to_markdown())
        return {"rows": len(result["rows"])}


def tradeoff_table(runs: list[VariantRun], scales: list[float], n_resamples: int) -> dict[str, Any]:
    """Per scale: each headline metric's mean over seeds and its paired difference from scale 0."""
    rows = []
    for scale in scales:
        comparison = headline_comparison(runs, f"scale_{scale:g}", "scale_0", n_resamples)
        rows.append({"scale": scale, "metrics": {row["key"]: row for row in comparison["rows"]}})
    return {"rows": rows}


def tradeoff_document(result: dict[str, Any]) -> Document:
    doc = Document(f"Within-modality trade-off — {result['label']}")
    keys = list(result["rows"][0]["metrics"])
    names = {key: result["rows"][0]["metrics"][key]["metric"] for key in keys}
    doc.paragraph(
        f"{result['label']} with its within-modality weights α, β scaled (0: the cross-modal loss alone on "
        f"the same batches, neighbors included; 1: the paper's α, β), other settings from the "
        f"{result['settings_from']} protocol ({result['base_overrides'] or 'the profile defaults'}); seeds "
        f"{result['seeds']}. Each cell: mean over seeds, and Δ against scale 0 with its 95% interval (paired "
        "bootstrap over test items and seeds)."
    )
    doc.table(
        ["scale", *[names[key] for key in keys]],
        [
            [
                f"{row['scale']:g}",
                *[
                    f"{m['method_mean']:.4f}"
                    + ("" if row["scale"] == 0 else f" (Δ {m['difference']:+.4f} [{m['ci_low']:+.4f}, {m['ci_high']:+.4f}])")
                    for m in (row["metrics"][key] for key in keys)
                ],
            ]
            for row in result["rows"]
        ],
    )
    doc.image("tradeoff.png", "Each metric against the within-modality weight scale; bars: 95% interval of Δ vs 0.")
    return doc
