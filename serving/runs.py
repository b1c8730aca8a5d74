"""What ``crossmodal export`` reads from a run tree (``runs/<Task>/<signature>/_meta.json`` beside each output),
without importing the pipeline: the files are the interface.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from models.settings import TrainSettings
from serving.bundle import BundleError, BundleParts

META_FILE = "_meta.json"


def _meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / META_FILE).read_text())


def _output(folder: Path, name: str) -> Path:
    """The file of declared output ``name`` of the task output ``folder``, as the task's metadata names it."""
    outputs = _meta(folder).get("outputs")
    if outputs is None or name not in outputs:
        raise BundleError(
            f"{folder / META_FILE} names no output {name!r} (a run tree from before outputs were recorded); "
            "rerun the pipeline into a new run root"
        )
    return folder / outputs[name]


def _tail(path: str | Path) -> tuple[str, str]:
    """``(task family, signature)`` of an output folder, however its run root was spelled."""
    parts = Path(path).parts
    return parts[-2], parts[-1]


def _sibling(run_root: Path, recorded: str) -> Path:
    family, signature = _tail(recorded)
    return run_root / family / signature


RUN_INDEX_OUTPUT = "run_index"


def finished_reports(run_root: Path) -> list[Path]:
    """The run root's finished Report folders, oldest first."""
    return sorted(
        (p.parent for p in (run_root / "Report").glob(f"*/{META_FILE}")),
        key=lambda p: _meta(p)["finished_at"],
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
    params = _meta(report)["params"]
    shown = {
        k: params[k]
        for k in ("profile", "dataset", "protocol", "set", "variant_overrides")
        if params.get(k) not in ("", "{}", "[]", "()", None)
    }
    return ", ".join(f"{k} {v}" for k, v in shown.items()) + f", finished {_meta(report)['finished_at']}"


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
        if _meta(source).get("task") != "Train":
            raise BundleError(
                f"{source} is a {_meta(source).get('task')} output; give a Train output or a run root"
            )
        return source
    if not (source / "Train").is_dir():
        raise BundleError(
            f"{source} is neither a Train output (no {META_FILE}) nor a run root (no Train/ folder)"
        )
    chosen = choose_report(source, report)
    outputs = _meta(chosen).get("outputs", {})
    if RUN_INDEX_OUTPUT not in outputs or not (chosen / outputs[RUN_INDEX_OUTPUT]).is_file():
        raise BundleError(
            f"report {chosen.name} was written before reports recorded their runs (run_index.json): run the same "
            "FullRun command again (only its Report is rebuilt), or give one Train output folder"
        )
    runs = json.loads((chosen / outputs[RUN_INDEX_OUTPUT]).read_text())["runs"]
    variant = variant or _meta(chosen)["config"]["headline"]["method"]
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
        f"{run['protocol']} seed {run['seed']} {json.dumps(run['variant_overrides'], sort_keys=True)} -> {run['train']}"
        for run in runs
    )


def parts_from_train_dir(train_dir: Path) -> BundleParts:
    """A Train output's checkpoint, settings and vocabulary, and the test metrics of its Evaluate (if run)."""
    train_dir = Path(train_dir)
    run_root = train_dir.parent.parent
    meta = _meta(train_dir)
    upstream = meta["upstream"]
    words = _sibling(run_root, upstream["TrainWordVectors"])
    prepared = _meta(_sibling(run_root, upstream["PrepareDataset"]))
    metrics: dict[str, Any] = {}
    doc2vec, infer_epochs = None, None
    for path in (run_root / "Evaluate").glob(f"*/{META_FILE}"):
        evaluation = _meta(path.parent)
        if _tail(evaluation["upstream"]["Train"]) == _tail(train_dir):
            metrics = json.loads(_output(path.parent, "metrics").read_text())
            # the Doc2Vec its neighbor preservation was measured against (Train needs none without text
            # neighbors)
            doc2vec_dir = _sibling(run_root, evaluation["upstream"]["TrainDoc2Vec"])
            doc2vec = _output(doc2vec_dir, "model")
            infer_epochs = int(_meta(doc2vec_dir)["config"]["doc2vec"]["infer_epochs"])
            break
    spec = meta["config"]["variant"]
    return BundleParts(
        variant=meta["params"]["variant"],
        label=metrics.get("label", meta["params"]["variant"]),
        spec=spec,
        train=TrainSettings(**meta["config"]["train"]),
        checkpoint=_output(train_dir, "checkpoint"),
        vocab=json.loads(_output(words, "vocab").read_text()),
        trunk_seed=int(meta["params"]["data_seed"]),
        image_cache_size=int(prepared["summary"]["image_cache"]["image_size"]),
        metrics=metrics,
        doc2vec=doc2vec,
        doc2vec_infer_epochs=infer_epochs,
        source={
            "train_dir": str(train_dir.resolve()),
            "seed": meta["config"]["seed"],
            "profile": meta["params"]["profile"],
            "dataset": meta["params"]["dataset"],
        },
    )


def split_of_train_dir(train_dir: Path) -> tuple[Path, Path | None]:
    """The ``Split`` manifest a Train output trained on, and its data's ground truth (the embedded recipe
    writes one; other recipes none)."""
    train_dir = Path(train_dir)
    run_root = train_dir.parent.parent
    upstream = _meta(train_dir)["upstream"]
    split = _output(_sibling(run_root, upstream["Split"]), "manifest")
    prepared = _sibling(run_root, upstream["PrepareDataset"])
    outputs = _meta(prepared).get("outputs", {})
    truth = prepared / outputs["ground_truth"] if "ground_truth" in outputs else None
    return split, truth if truth is not None and truth.exists() else None
