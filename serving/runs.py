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


def tuned_train_dirs(run_root: Path, variant: str) -> list[Path]:
    """The Train outputs of ``variant``'s tuned-protocol report runs (at the settings its Tune chose)."""
    found = []
    for path in (run_root / "TunedRuns").glob(f"*/{META_FILE}"):
        if _meta(path.parent)["params"]["variant"] != variant:
            continue
        runs = json.loads(_output(path.parent, "runs").read_text())
        for evaluation in runs["evaluations"].values():
            found.append(_sibling(run_root, _meta(_sibling(run_root, evaluation))["upstream"]["Train"]))
    return found


def find_train_dir(
    source: Path, variant: str | None = None, seed: int | None = None, protocol: str = "shared"
) -> Path:
    """``source`` itself when it is a Train output; in a run root, the Train of ``variant`` (default: the
    newest report's headline method) with ``seed`` (default: its lowest) under ``protocol``: ``shared`` (the
    profile's settings, no overrides) or ``tuned`` (the settings the variant's Tune chose); the newest when
    several still match."""
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
    if variant is None:
        reports = sorted(
            (source / "Report").glob(f"*/{META_FILE}"), key=lambda p: _meta(p.parent)["finished_at"]
        )
        if not reports:
            raise BundleError(
                f"{source} holds no finished Report to take the headline method from; pass --variant"
            )
        variant = _meta(reports[-1].parent)["config"]["headline"]["method"]
    if protocol == "tuned":
        trains = tuned_train_dirs(source, variant)
        if not trains:
            raise BundleError(
                f"{source} holds no tuned run of variant {variant!r}; run FullRun --protocol both"
            )
    else:
        trains = [p.parent for p in (source / "Train").glob(f"*/{META_FILE}")]
        trains = [t for t in trains if _meta(t)["params"]["variant"] == variant]
        # the shared protocol's runs have no overrides; other runs of the variant are ablations or trials
        shared = [t for t in trains if _meta(t)["params"]["variant_overrides"] in ("{}", "")]
        trains = shared or trains
    if seed is not None:
        trains = [t for t in trains if _meta(t)["config"]["seed"] == seed]
    if not trains:
        raise BundleError(
            f"{source} holds no finished Train of variant {variant!r}"
            + (f" seed {seed}" if seed is not None else "")
        )
    lowest = min(_meta(t)["config"]["seed"] for t in trains)
    trains = sorted(
        (t for t in trains if _meta(t)["config"]["seed"] == lowest), key=lambda t: _meta(t)["finished_at"]
    )
    if len(trains) > 1:
        print(
            f"{len(trains)} Train outputs of {variant} seed {lowest} (ablations?); exporting the newest, {trains[-1]}",
            file=sys.stderr,
        )
    return trains[-1]


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
