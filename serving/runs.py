"""What ``crossmodal export`` reads from a run tree (``runs/<Task>/<signature>/_meta.json`` beside each output),
without importing the pipeline: the files are the interface.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from common.hashing import file_sha256
from common.run_folder import (
    META_FILE,
    declared_output,
    finished_outputs,
    meta_field,
    plan_summary_of,
    read_meta,
    read_object,
    upstream_folder,
)
from models.trained import ModelRecordError, read_record
from serving.bundle import BundleError, BundleParts
from serving.trained_as_recorded import check_trained_as_recorded

RUN_INDEX_OUTPUT = "run_index"


def finished_reports(run_root: Path) -> list[Path]:
    """The run root's finished Report folders, oldest first."""
    return sorted(
        finished_outputs(run_root, "Report"),
        key=lambda p: str(meta_field(p, "finished_at")),
    )


def choose_report(run_root: Path, report: str | None) -> Path:
    """The Report named by (a prefix of) its hash, or the newest (said on stderr when there are several)."""
    reports = finished_reports(run_root)
    if not reports:
        raise BundleError(
            f"{run_root} holds no finished Report to say which runs it made; run the FullRun to its end, or "
            "give one Train output folder (runs/Train/<hash>)"
        )
    if report is not None:
        named = [r for r in reports if r.name.startswith(report)]
        if len(named) != 1:
            listed = ", ".join(f"{r.name} ({_report_line(r)})" for r in reports)
            what = "no report" if not named else f"{len(named)} reports"
            raise BundleError(f"--report {report} matches {what} in {run_root}; its reports: {listed}")
        return named[0]
    if len(reports) > 1:
        others = ", ".join(f"{r.name} ({_report_line(r)})" for r in reports[:-1])
        print(
            f"exporting from report {reports[-1].name} ({_report_line(reports[-1])}), the newest of "
            f"{len(reports)}; --report HASH picks another: {others}",
            file=sys.stderr,
        )
    return reports[-1]


def _report_line(report: Path) -> str:
    plan = plan_summary_of(report)
    shown = {
        "profile": plan.get("profile"),
        "dataset": plan.get("dataset", {}).get("name"),
        "protocols": "+".join(plan.get("protocols", [])),
        "changes": " ".join(plan.get("changes", [])),
    }
    shown = {k: v for k, v in shown.items() if v}
    return ", ".join(f"{k} {v}" for k, v in shown.items()) + f", finished {meta_field(report, 'finished_at')}"


def find_train_dir(
    source: Path,
    variant: str | None = None,
    seed: int | None = None,
    protocol: str | None = None,
    report: str | None = None,
) -> Path:
    """``source`` itself when it is a Train output; in a run root, the Train that a Report's run index names
    for ``variant`` (default: the report's headline method), ``protocol`` (needed when the report ran the
    variant under both) and ``seed`` (default: its lowest). The report is ``report`` (a hash prefix) or the
    newest. Nothing is guessed from folder names: a request the index does not settle is refused, listing
    the candidates."""
    source = Path(source)
    if (source / META_FILE).is_file():
        if read_meta(source).get("task") != "Train":
            raise BundleError(
                f"{source} is a {read_meta(source).get('task')} output; give a Train output or a run root"
            )
        trained = meta_field(source, "config")
        if variant is not None and variant != trained["variant"]["name"]:
            raise BundleError(f"{source} trained variant {trained['variant']['name']!r}, not {variant!r}: drop --variant or give a run root")
        if seed is not None and seed != trained["seed"]:
            raise BundleError(f"{source} trained with seed {trained['seed']}, not {seed}: drop --seed or give a run root")
        return source
    if not (source / "Train").is_dir():
        raise BundleError(
            f"{source} is neither a Train output (no {META_FILE}) nor a run root (no Train/ folder)"
        )
    chosen = choose_report(source, report)
    index = declared_output(chosen, RUN_INDEX_OUTPUT)
    runs = read_object(index, "run the report's task again").get("runs")
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise BundleError(f"{index} is damaged (its runs are not a list of runs): run the report's task again")
    variant = variant or meta_field(chosen, "config", "headline", "method")
    candidates = [run for run in runs if run["variant"] == variant]
    if not candidates:
        ran = sorted({run["variant"] for run in runs})
        raise BundleError(
            f"report {chosen.name} holds no run of variant {variant!r}; its variants: {', '.join(ran)}"
        )
    if protocol is not None:
        candidates = [run for run in candidates if run["protocol"] == protocol]
        if not candidates:
            raise BundleError(
                f"report {chosen.name} ran {variant} under no {protocol} protocol; pass another --protocol"
            )
    protocols = sorted({run["protocol"] for run in candidates})
    if len(protocols) > 1:
        raise BundleError(
            f"report {chosen.name} ran {variant} under both protocols; pass --protocol shared or --protocol tuned "
            f"(candidates: {_candidates(candidates)})"
        )
    seeds = sorted({run["seed"] for run in candidates})
    wanted = seeds[0] if seed is None else seed
    candidates = [run for run in candidates if run["seed"] == wanted]
    if not candidates:
        raise BundleError(f"report {chosen.name} holds no {variant} run with seed {seed}; its seeds: {seeds}")
    if len(candidates) > 1:
        raise BundleError(f"report {chosen.name} holds several matching runs: {_candidates(candidates)}")
    return source / candidates[0]["train"]


def _candidates(runs: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{run['protocol']} seed {run['seed']} {json.dumps(run['point'], sort_keys=True)} -> {run['train']}"
        for run in runs
    )


def evaluation_of(train_dir: Path) -> Path | None:
    """The Evaluate output of a Train output in the same run root, if one was run."""
    for evaluate in finished_outputs(Path(train_dir).parent.parent, "Evaluate"):
        if upstream_folder(evaluate, "Train").name == Path(train_dir).name:
            return evaluate
    return None


def bundle_parts(train_dir: Path, evaluate_dir: Path | None = None) -> BundleParts:
    """What a bundle of a Train output holds: the model record Train wrote, its best checkpoint, the vocabulary
    the record names, the image cache's side, and the test metrics and Doc2Vec of ``evaluate_dir`` (default:
    the run root's Evaluate of this Train, if any). The one bundle builder of SearchIndex and
    ``crossmodal export``."""
    train_dir = Path(train_dir)
    meta = read_meta(train_dir)
    made = meta.get("summary", {}).get("model_record") if isinstance(meta.get("summary"), dict) else None
    try:
        record = read_record(declared_output(train_dir, "model"), made)
    except ModelRecordError as error:
        raise BundleError(str(error)) from None
    plan = plan_summary_of(train_dir)
    check_trained_as_recorded(train_dir, meta, record, plan)
    vocab_file = (train_dir / record.vocabulary["file"]).resolve()
    if not vocab_file.is_file() or file_sha256(vocab_file) != record.vocabulary["sha256"]:
        raise BundleError(
            f"{train_dir}: the vocabulary its model record names ({vocab_file}) is missing or was changed since "
            "training; export from the run root the model was trained in"
        )
    image_size = meta_field(upstream_folder(train_dir, "PrepareDataset"), "summary", "image_cache", "image_size")
    evaluate_dir = evaluation_of(train_dir) if evaluate_dir is None else Path(evaluate_dir)
    metrics: dict[str, Any] = {}
    doc2vec, infer_epochs = None, None
    if evaluate_dir is not None:
        metrics = read_object(declared_output(evaluate_dir, "metrics"))
        # the Doc2Vec its neighbor preservation was measured against (Train needs none without text neighbors)
        doc2vec_dir = upstream_folder(evaluate_dir, "TrainDoc2Vec")
        doc2vec = declared_output(doc2vec_dir, "model")
        infer_epochs = int(meta_field(doc2vec_dir, "config", "doc2vec", "infer_epochs"))
    spec = meta_field(train_dir, "config", "variant")
    return BundleParts(
        variant=spec["name"],
        label=metrics.get("label", spec["name"]),
        spec=spec,
        train=meta_field(train_dir, "config", "train"),
        record=record,
        checkpoint=declared_output(train_dir, "checkpoint"),
        vocab=read_object(vocab_file, "export from the run root the model was trained in"),
        trained_epoch=meta.get("summary", {}).get("best_epoch"),
        image_cache_size=int(image_size),
        metrics=metrics,
        doc2vec=doc2vec,
        doc2vec_infer_epochs=infer_epochs,
        source={
            "train": f"{train_dir.name}",
            "seed": meta_field(train_dir, "config", "seed"),
            "profile": plan.get("profile"),
            "dataset": plan.get("dataset", {}).get("name"),
        },
    )


def split_of_train_dir(train_dir: Path) -> tuple[Path, Path | None]:
    """The ``Split`` manifest a Train output trained on, and its data's ground truth (the embedded recipe
    writes one; other recipes none)."""
    train_dir = Path(train_dir)
    split = declared_output(upstream_folder(train_dir, "Split"), "manifest")
    prepared = upstream_folder(train_dir, "PrepareDataset")
    outputs = read_meta(prepared).get("outputs", {})
    truth = prepared / outputs["ground_truth"] if isinstance(outputs, dict) and "ground_truth" in outputs else None
    return split, truth if truth is not None and truth.exists() else None
