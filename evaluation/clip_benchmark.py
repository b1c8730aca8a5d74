"""Results in the shape of LAION-AI/CLIP_benchmark, so a model scored here can be merged into a table of
CLIP_benchmark runs (``clip_benchmark build *.json``).

Checked against CLIP_benchmark's source (``clip_benchmark/cli.py`` at commit 016068f, the ``dump`` of
``run()``; ``clip_benchmark/metrics/zeroshot_retrieval.py`` at commit 082089f): one JSON object per dataset
× model × task with the keys ``dataset``, ``model``, ``pretrained``, ``task`` (``zeroshot_retrieval``),
``metrics`` and ``language``; ``metrics`` holds ``image_retrieval_recall@k`` (text queries, images
retrieved: our T→I) and ``text_retrieval_recall@k`` (image queries, texts retrieved: our I→T) for each
requested k, as fractions. A query counts as a hit when *any* of its correct items is in the top k (several
captions per image), as CLIP_benchmark's ``recall_at_k(...) > 0``. One difference: a wrong item that ties a
correct one is ranked above it here (:func:`evaluation.retrieval.full_ranking_metrics`), where
``torch.topk`` breaks ties arbitrarily; with float scores ties are rare.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evaluation.protocol import RetrievalLayout, full_ranking

TASK = "zeroshot_retrieval"
DEFAULT_RECALL_KS = (1, 5, 10)


def retrieval_recalls(image: np.ndarray, text: np.ndarray, layout: RetrievalLayout, ks: Sequence[int]) -> dict[str, float]:
    """CLIP_benchmark's retrieval metrics of row-aligned embeddings over the distinct items of ``layout``."""
    if not ks or any(int(k) < 1 for k in ks):
        raise ValueError(f"recall k's must be positive integers, got {list(ks)}")
    ranked = full_ranking(image, text, layout, return_ranks=True)["all"]
    metrics: dict[str, float] = {}
    for k in ks:
        metrics[f"image_retrieval_recall@{int(k)}"] = float(np.mean(ranked["t2i_ranks"] <= k))
        metrics[f"text_retrieval_recall@{int(k)}"] = float(np.mean(ranked["i2t_ranks"] <= k))
    return metrics


def benchmark_record(dataset: str, model: str, pretrained: str, metrics: dict[str, float], language: str = "en") -> dict[str, Any]:
    """One result as CLIP_benchmark's ``clip_benchmark eval`` writes it."""
    return {
        "dataset": dataset,
        "model": model,
        "pretrained": pretrained,
        "task": TASK,
        "metrics": metrics,
        "language": language,
    }


def benchmark_filename(record: dict[str, Any]) -> str:
    """CLIP_benchmark's usual output template, ``{dataset}_{pretrained}_{model}_{language}_{task}.json``, with
    path separators and spaces made safe."""
    parts = [record["dataset"], record["pretrained"], record["model"], record["language"], record["task"]]
    return "_".join(str(part).replace("/", "-").replace(" ", "-") for part in parts) + ".json"
