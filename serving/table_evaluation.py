"""``crossmodal evaluate``: score one or more model bundles on a labelled image–text table of the ``pairs``
recipe's format — the question right after training: does this model transfer to that archive, and is it
better than that one?

The table's rows are read and validated exactly as the pipeline's ``PrepareShard`` does (the ``pairs``
recipe, ``validate_records``, the image cache: the same reject reasons, into ``rejects.csv``); each bundle
embeds the kept pairs through the one inference path; the scores are the pipeline's own metric functions
(:mod:`evaluation.table_scores`): n-way Recall@1 where the table is large enough, full-ranking R@1/5/10,
median rank and rsum in both directions, with 95% bootstrap intervals over items, neighbor preservation at
k = 10 when the bundle carries its run's Doc2Vec, and each model's paired difference from the first.

CLIP-family baselines (``--open-clip``, :mod:`serving.open_clip_baseline`) are scored beside the bundles by
the same functions, each through its own image transform and tokenizer (neighbor preservation against the
first bundle's Doc2Vec); every model also gets a CLIP_benchmark-shaped JSON (:mod:`evaluation.clip_benchmark`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from common.files import atomic_path
from common.tokenizer import tokenizer_for
from data_recipes import build_recipe
from data_recipes.image_cache import build_image_cache
from data_recipes.manifest import check_manifest_columns, image_ids, integer_group_ids, resolve_image_paths
from data_recipes.validate import reject_counts, validate_records
from evaluation.clip_benchmark import (
    DEFAULT_RECALL_KS,
    benchmark_filename,
    benchmark_record,
    retrieval_recalls,
)
from evaluation.protocol import RetrievalLayout, retrieval_layout
from evaluation.table_scores import BOOTSTRAP_RESAMPLES, paired_differences, score_table
from models.devices import pick_device
from models.doc2vec import infer_vectors
from serving.bundle import Bundle, load_bundle
from serving.embed import Embedder
from serving.open_clip_baseline import OpenClipModel
from serving.table_report import write_report

#: fewer valid rows than this cannot be scored (a 5-way task needs 4 distractors per query)
MIN_ROWS = 5
#: the thumbnail size a table is decoded at when only CLIP baselines score it (they read the files; the decode
#: rejects what no model could read, as for a bundle)
VALIDATION_CACHE_SIZE = 32
#: CLIP_benchmark-shaped results go to this folder of ``--out``
CLIP_BENCHMARK_DIR = "clip_benchmark"


class EvaluationError(ValueError):
    """A table that cannot be scored (too few valid rows); the message says why."""


@dataclass
class ValidatedTable:
    """The table's kept pairs (in table order), their thumbnails per cache size, and what was rejected."""

    pairs: pd.DataFrame
    pixels: dict[int, np.ndarray]
    rejects: pd.DataFrame
    stats: dict[str, Any]


def read_table(table: Path, cache_sizes: set[int], work_dir: Path) -> ValidatedTable:
    """The ``pairs`` recipe's rows, validated and decoded as ``PrepareShard`` does; raises
    :class:`EvaluationError` below :data:`MIN_ROWS` valid pairs."""
    table = Path(table)
    if not table.exists():
        raise FileNotFoundError(f"no table at {table}")
    recipe = build_recipe("pairs", table.resolve(), work_dir / "recipe")
    manifest = resolve_image_paths(check_manifest_columns(recipe.manifest), recipe.image_root)
    kept, rejects = validate_records(manifest)
    pixels: dict[int, np.ndarray] = {}
    for size in sorted(cache_sizes):
        cache = build_image_cache(kept, size, work_dir / f"images_{size}.npy")
        if not pixels:  # a rejected image is rejected at every size: the first decode decides
            rejects = pd.concat([rejects, cache.rejects], ignore_index=True)
            kept = kept[kept["pair_id"].isin(set(cache.pair_ids))].reset_index(drop=True)
        pixels[size] = np.load(work_dir / f"images_{size}.npy")
    stats = {
        "table": str(table),
        "n_input": len(manifest),
        "n_kept": len(kept),
        "n_rejected": len(rejects),
        "rejects_by_reason": reject_counts(rejects),
    }
    if len(kept) < MIN_ROWS:
        raise EvaluationError(
            f"{table} has {len(kept)} valid pair(s) of {len(manifest)} ({stats['rejects_by_reason'] or 'none rejected'}); "
            f"scoring needs at least {MIN_ROWS}"
        )
    return ValidatedTable(kept, pixels, rejects, stats)


def embed_table(bundle: Bundle, table: ValidatedTable, device: torch.device, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """The bundle's image and text embeddings of the kept pairs (``[n, D]``, or ``[n, K, D]`` for PVSE)."""
    embedder = Embedder(bundle, device)
    image = embedder.embed_pixels(table.pixels[embedder.cache_size], progress=progress)
    text = embedder.embed_texts(table.pairs["text"].tolist(), progress=progress)
    squeeze = image.shape[1] == 1
    return (image[:, 0], text[:, 0]) if squeeze else (image, text)


def doc2vec_vectors(bundle: Bundle, texts: list[str]) -> tuple[np.ndarray | None, str]:
    """The bundle's Doc2Vec vectors of ``texts`` (as the pipeline infers validation and test texts), or None
    and why neighbor preservation is skipped."""
    model = bundle.doc2vec()
    if model is None:
        return None, (
            "the bundle holds no Doc2Vec model (exported from a Train with no Evaluate beside it; export from the run "
            "root after its Evaluate to add one)"
        )
    epochs = int(bundle.text["doc2vec"]["infer_epochs"])
    tokenize = tokenizer_for(bundle.tokenizer_version)
    return infer_vectors(model, [tokenize(text) for text in texts], epochs), ""


@dataclass
class BundleModel:
    """A model bundle scored on a table."""

    path: Path
    bundle: Bundle

    @property
    def label(self) -> str:
        return self.bundle.manifest["variant"]["label"]

    @property
    def name(self) -> str:
        """The label and the bundle's folder: two bundles of one variant are told apart."""
        return f"{self.label} ({self.path.name})"

    @property
    def cache_size(self) -> int | None:
        return int(self.bundle.image["cache_size"])

    def record(self) -> dict[str, Any]:
        return {"kind": "bundle", "bundle": str(self.path), "source": self.path.name, "bundle_id": self.bundle.bundle_id}

    def benchmark_names(self) -> tuple[str, str]:
        """(model, pretrained) for a CLIP_benchmark record: the variant and the bundle's id."""
        return self.bundle.manifest["variant"]["name"], self.bundle.bundle_id

    def embed(self, table: ValidatedTable, device: torch.device, progress: bool) -> tuple[np.ndarray, np.ndarray]:
        return embed_table(self.bundle, table, device, progress)


def display_names(names: list[str]) -> list[str]:
    """Each model's name in the report, numbered where two are still the same."""
    return [f"{name} #{i + 1}" if names.count(name) > 1 else name for i, name in enumerate(names)]


@dataclass
class ClipModel:
    """A CLIP-family baseline scored on a table (its own transform reads the image files)."""

    model: OpenClipModel

    @property
    def label(self) -> str:
        return self.model.label

    @property
    def name(self) -> str:
        return self.label  # the architecture and its weights already tell baselines apart

    cache_size = None

    def record(self) -> dict[str, Any]:
        spec = self.model.spec
        return {"kind": "open_clip", "open_clip": {"model": spec.model, "pretrained": spec.pretrained}, "source": "open_clip"}

    def benchmark_names(self) -> tuple[str, str]:
        return self.model.spec.model, self.model.spec.pretrained

    def embed(self, table: ValidatedTable, device: torch.device, progress: bool) -> tuple[np.ndarray, np.ndarray]:
        """On the device the baseline was loaded on (``load_baselines``); no progress bar."""
        image = self.model.embed_images(table.pairs["image_path"].tolist())
        return image, self.model.embed_texts(table.pairs["text"].tolist())


def worst_ranks(group_ids: np.ndarray, layout: RetrievalLayout) -> dict[str, int]:
    """Per direction, the largest rank a query's first correct item can have: the distinct candidates less
    the fewest correct ones any query has, plus 1. A recall at k at or above it is 1 by construction."""
    codes = pd.factorize(pd.Series(np.asarray(group_ids)))[0]
    images, texts = codes[layout.image_positions], codes[layout.text_positions]
    if layout.protocol == "pairs":  # one correct item per query (a mixed group's others count as wrong)
        return {"I→T": len(texts), "T→I": len(images)}
    groups = int(codes.max()) + 1
    fewest_texts = int(np.bincount(texts, minlength=groups)[images].min())
    fewest_images = int(np.bincount(images, minlength=groups)[texts].min())
    return {"I→T": len(texts) - fewest_texts + 1, "T→I": len(images) - fewest_images + 1}


def mark_trivial_recalls(scores: dict[str, Any], benchmark: dict[str, Any], worst: dict[str, int]) -> dict[str, str]:
    """Mark every recall whose k reaches ``worst`` (R@10 on a 5-item table is 1.0 whatever the model):
    the metric gets a ``trivial`` note, rsum lists the ones it includes (its value stays the pipeline's
    definition, so it still equals ``Evaluate``'s); returns metric -> note, for the report."""
    notes: dict[str, str] = {}
    for name, metric in scores["metrics"].items():
        if name.startswith("R@") and (k := int(name[2:].split()[0])) >= worst[name.split()[1]]:
            metric["trivial"] = notes[name] = _trivial(k, worst[name.split()[1]])
    if "rsum" in scores["metrics"] and notes:
        scores["metrics"]["rsum"]["includes_trivial"] = sorted(notes)
    for key in benchmark["metrics"]:
        direction = "T→I" if key.startswith("image_retrieval") else "I→T"  # CLIP_benchmark's names
        if (k := int(key.rsplit("@", 1)[1])) >= worst[direction]:
            notes[key] = _trivial(k, worst[direction])
    return notes


def _trivial(k: int, worst: int) -> str:
    return f"k = {k} ≥ {worst}, the worst rank a correct item can have here: 1 by construction, not a measurement"


def evaluate_bundles(
    bundle_paths: list[Path],
    table_path: Path,
    out: Path,
    redraws: int = 5,
    device: torch.device | None = None,
    progress: bool = False,
    baselines: list[OpenClipModel] | None = None,
    recall_ks: tuple[int, ...] = DEFAULT_RECALL_KS,
    dataset_name: str | None = None,
) -> dict[str, Any]:
    """Score every bundle, then every CLIP baseline, on the table; write ``metrics.json``, ``report.md``,
    ``rejects.csv`` and one CLIP_benchmark JSON per model (``clip_benchmark/``) into ``out``; return what
    ``metrics.json`` holds. The first model is the one the others are compared with."""
    device = device or pick_device()
    models: list[BundleModel | ClipModel] = [BundleModel(Path(path), load_bundle(path)) for path in bundle_paths]
    models += [ClipModel(baseline) for baseline in baselines or []]
    if not models:
        raise EvaluationError("nothing to score: give a bundle or --open-clip MODEL:PRETRAINED")
    sizes = {m.cache_size for m in models if m.cache_size is not None} or {VALIDATION_CACHE_SIZE}
    with tempfile.TemporaryDirectory(prefix="crossmodal-evaluate-") as work:
        table = read_table(table_path, sizes, Path(work))
    pairs = table.pairs
    group_ids = integer_group_ids(pairs).to_numpy()
    images, texts = image_ids(pairs), pairs["text"].to_numpy()
    layout = retrieval_layout(group_ids, images, texts)
    dataset = dataset_name or Path(table_path).stem
    # neighbor preservation of a CLIP baseline is measured against the first bundle's Doc2Vec
    shared_vectors, shared_skip = None, "no bundle with a Doc2Vec model was given"
    results, outcomes, benchmarks = [], [], []
    worst = worst_ranks(group_ids, layout)
    for model in models:
        image, text = model.embed(table, device, progress)
        if isinstance(model, BundleModel):
            doc_vectors, skipped = doc2vec_vectors(model.bundle, texts.tolist())
            if shared_vectors is None and doc_vectors is not None:
                shared_vectors, shared_skip = doc_vectors, ""
        else:
            doc_vectors, skipped = shared_vectors, shared_skip
        scores, per_query = score_table(image, text, group_ids, images, texts, redraws, doc_vectors)
        benchmarks.append(benchmark_record(dataset, *model.benchmark_names(), retrieval_recalls(image, text, layout, recall_ks)))
        trivial = mark_trivial_recalls(scores, benchmarks[-1], worst)
        results.append(
            {
                "label": model.label,
                **model.record(),
                **scores,
                **({"neighbor_preservation_skipped": skipped} if skipped else {}),
                **({"trivial_recalls": trivial} if trivial else {}),
            }
        )
        outcomes.append(per_query)
    for result, name in zip(results, display_names([model.name for model in models]), strict=True):
        result["name"] = name
    for result, per_query in zip(results[1:], outcomes[1:], strict=True):
        result["difference_from_first"] = paired_differences(per_query, outcomes[0])
        result["difference_is"] = f"{result['name']} − {results[0]['name']}"
    payload = {
        "table": table.stats,
        "redraws": redraws,
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
        "device": str(device),
        "bundles": results,
        "clip_benchmark": [benchmark_filename(record) for record in benchmarks],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for record in benchmarks:
        with atomic_path(out / CLIP_BENCHMARK_DIR / benchmark_filename(record)) as tmp:
            tmp.write_text(json.dumps(record) + "\n")
    with atomic_path(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    with atomic_path(out / "rejects.csv") as tmp:
        table.rejects.to_csv(tmp, index=False)
    write_report(payload, out / "report.md")
    return payload
