"""The report of a FullRun, and FullRun itself (``luigi --module pipeline FullRun``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import luigi
import numpy as np
from luigi.freezing import recursively_unfreeze

from data_recipes import CAPTION_GROUP_RECIPES
from evaluation.gallery import proximity_study, retrieval_examples, snippet, write_thumbnails
from evaluation.report import (
    BASELINE_VARIANT,
    FIGURES_DIR,
    OURS_VARIANT,
    Qualitative,
    ReportInputs,
    ShownItem,
    VariantRun,
    build_report,
)
from pipeline.base import META_FILE, HashedTask
from pipeline.io import library_versions, read_json, save_text, write_json
from pipeline.profiles import get_profile
from pipeline.tasks.cocos import COCOS_FILE, Cocos
from pipeline.tasks.data import (
    Deduplicate,
    PrepareDataset,
    Split,
    integer_group_ids,
    load_prepared_images,
    read_manifest,
)
from pipeline.tasks.evaluation import (
    CURVES,
    HEADLINE_PRESERVATION,
    TEST_IMAGE,
    TEST_ROWS,
    TEST_TEXT,
    Evaluate,
    retrieval_layout,
)
from pipeline.tasks.params import DatasetParams
from pipeline.tasks.representations import DOC_VECTORS, NeighborTables, TrainDoc2Vec
from pipeline.variants import paper_grid

REPORT_MD, REPORT_HTML, REPORT_JSON = "report.md", "report.html", "report.json"

#: Figs. 5 and 6 (Thomas & Kovashka §4.4); hashed into the Report's output path
QUALITATIVE = {
    "seed": 0,
    # exact Doc2Vec neighbours per test item; Eq. 5's k = 200 is meant for a training set, not a test split
    "proximity_k": 10,
    "proximity_pairs": 10_000,
    "proximity_shown": 3,
    "gallery_queries": 4,
    "gallery_top_k": 3,
    "snippet_chars": 160,
}


class GridParams:
    variants = luigi.ListParameter(
        default=[],
        description="variants to train and compare (default: the paper's grid for the dataset, see "
        "pipeline.variants.paper_grid)",
    )
    seeds = luigi.ListParameter(
        default=[],
        description="training seeds of every variant (default: the profile's, which gives the headline's "
        "baseline and method several seeds)",
    )
    variant_overrides = luigi.DictParameter(
        default={}, description='per-variant loss changes: {"ours": {"within_modality": {"alpha": 0.5}}}'
    )

    def seeds_for(self, variant: str) -> list[int]:
        """``--seeds`` when given, else the profile's seeds for ``variant``."""
        return [int(s) for s in self.seeds] or list(get_profile(self.profile).seeds_for(variant))

    def seed_plan(self) -> dict[str, list[int]]:
        return {variant: self.seeds_for(variant) for variant in self.variant_names()}

    def overrides_for(self, variant: str) -> dict[str, Any]:
        return recursively_unfreeze(self.variant_overrides).get(variant, {})

    def variant_names(self) -> list[str]:
        """``variants``, or Tables 1 and 4 (plus Table 2 for a dataset with several captions per image)."""
        return list(self.variants) or list(paper_grid(self.dataset in CAPTION_GROUP_RECIPES))


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


def load_headline_preservation(folder: Path) -> dict[str, np.ndarray]:
    """Evaluate's per-sample neighbour preservation at the headline k, by modality (those it saved)."""
    paths = {modality: folder / f"{name}.npy" for modality, name in HEADLINE_PRESERVATION.items()}
    return {modality: np.load(path) for modality, path in paths.items() if path.is_file()}


class Report(GridParams, DatasetParams, HashedTask):
    def evaluations(self) -> list[Evaluate]:
        return [
            self.clone(
                Evaluate, variant=variant, seed=int(seed), variant_overrides=self.overrides_for(variant)
            )
            for variant in self.variant_names()
            for seed in self.seeds_for(variant)
        ]

    def requires(self) -> dict[str, Any]:
        return {
            "evaluations": self.evaluations(),
            "prepared": self.clone(PrepareDataset),
            "dedup": self.clone(Deduplicate),
            "split": self.clone(Split),
            "neighbors": [self.clone(NeighborTables, space=space) for space in ("text", "image")],
            "doc2vec": self.clone(TrainDoc2Vec),
            "cocos": [
                self.clone(Cocos, variant=e.variant, seed=e.seed, variant_overrides=e.variant_overrides)
                for e in self.evaluations()
            ],
        }

    def config(self) -> dict[str, Any]:
        return {
            "variants": self.variant_names(),
            "seeds": self.seed_plan(),
            "qualitative": QUALITATIVE,
            "headline": {
                "method": OURS_VARIANT,
                "baseline": BASELINE_VARIANT,
                "bootstrap_resamples": self.settings.eval.bootstrap_resamples,
            },
        }

    def qualitative(self, work_dir: Path) -> Qualitative | None:
        """Figs. 5 and 6: ``ours`` against the baseline at their lowest common seed, with thumbnails."""
        by_key = {(e.variant, e.seed): e for e in self.requires()["evaluations"]}
        seeds = sorted(
            seed for variant, seed in by_key if variant == OURS_VARIANT and (BASELINE_VARIANT, seed) in by_key
        )
        if not seeds:
            return None
        req = self.requires()
        q = QUALITATIVE
        ours_dir = by_key[(OURS_VARIANT, seeds[0])].output_dir()
        base_dir = by_key[(BASELINE_VARIANT, seeds[0])].output_dir()
        test_rows = np.load(ours_dir / TEST_ROWS)
        if not np.array_equal(test_rows, np.load(base_dir / TEST_ROWS)):
            raise RuntimeError(f"{ours_dir} and {base_dir} evaluated different test rows; rerun Evaluate")
        ours = (np.load(ours_dir / TEST_IMAGE), np.load(ours_dir / TEST_TEXT))
        baseline = (np.load(base_dir / TEST_IMAGE), np.load(base_dir / TEST_TEXT))
        manifest = read_manifest(self.input_dir(req["split"]))
        test_manifest = manifest.iloc[test_rows]
        groups = integer_group_ids(manifest).to_numpy()[test_rows]
        cache_rows = test_manifest["cache_row"].to_numpy()
        texts = test_manifest["text"].to_numpy()
        layout = retrieval_layout(groups, cache_rows, texts)
        proximity = None
        if len(test_rows) >= 3:
            doc_vectors = np.load(self.input_dir(req["doc2vec"]) / DOC_VECTORS)[test_rows]
            proximity = proximity_study(
                ours,
                baseline,
                doc_vectors,
                q["proximity_k"],
                q["proximity_pairs"],
                q["seed"],
                q["proximity_shown"],
                group_ids=groups,
            )
        examples = retrieval_examples(
            ours,
            baseline,
            layout.image_positions,
            layout.text_positions,
            groups,
            q["gallery_queries"],
            q["gallery_top_k"],
            q["seed"],
        )
        shown = {
            p for rows in examples.values() for e in rows for p in [e["query"]] + [r[0] for r in e["ours"]]
        }
        shown |= {r[0] for rows in examples.values() for e in rows for r in e["baseline"]}
        if proximity is not None:
            shown |= {p for m in ("image", "text") for a, b, _ in proximity[m]["smallest"] for p in (a, b)}
        thumbnails = write_thumbnails(
            load_prepared_images(self.input_dir(req["prepared"])),
            cache_rows,
            shown,
            work_dir / FIGURES_DIR / "thumbs",
            work_dir,
        )
        items = {
            p: ShownItem(text=snippet(texts[p], q["snippet_chars"]), thumbnail=thumbnails[p]) for p in shown
        }
        return Qualitative(
            seed=seeds[0],
            ours_label=by_key[(OURS_VARIANT, seeds[0])].variant_spec()["label"],
            baseline_label=by_key[(BASELINE_VARIANT, seeds[0])].variant_spec()["label"],
            items=items,
            proximity=proximity,
            examples=examples,
        )

    def produce(self, work_dir: Path) -> dict[str, Any]:
        req = self.requires()
        runs = []
        for evaluation in req["evaluations"]:
            folder = evaluation.output_dir()
            train_meta = read_json(evaluation.requires()["train"].output_dir() / META_FILE)
            spec = evaluation.variant_spec()
            with np.load(folder / CURVES) as curves:
                arrays = {name: curves[name] for name in curves.files}
            runs.append(
                VariantRun(
                    variant=evaluation.variant,
                    label=spec["label"],
                    seed=evaluation.seed,
                    metrics=read_json(folder / "metrics.json"),
                    training=train_meta["summary"],
                    hits={name: np.load(folder / f"{name}.npy") for name in ("i2t_hits", "t2i_hits")},
                    curves=arrays,
                    loss_names=[loss["name"] for loss in spec["losses"]],
                    preservation=load_headline_preservation(folder),
                )
            )
        cocos = []
        for task in req["cocos"]:
            result = read_json(task.output_dir() / COCOS_FILE)
            cocos.append({"label": task.variant_spec()["label"], **result})
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
                "seeds": self.seed_plan(),
                "data_seed": self.data_seed,
                "variants": self.variant_names(),
                "variant_overrides": recursively_unfreeze(self.variant_overrides),
                "device": runs[0].training.get("device", "cpu") if runs else "cpu",
                "total_task_wall_time_s": round(sum(t["wall_time_s"] for t in tasks), 1),
                **{f"version.{k}": v for k, v in library_versions().items()},
            },
            cocos=cocos,
            qualitative=self.qualitative(work_dir),
            baseline=BASELINE_VARIANT,
            method=OURS_VARIANT,
            bootstrap_resamples=self.settings.eval.bootstrap_resamples,
        )
        document, payload = build_report(inputs, work_dir)
        save_text(work_dir / REPORT_MD, document.to_markdown())
        save_text(work_dir / REPORT_HTML, document.to_html())
        write_json(work_dir / REPORT_JSON, payload)
        return {"variants": self.variant_names(), "seeds": self.seed_plan()}


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
