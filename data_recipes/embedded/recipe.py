"""The recipe: draw the original pairs, add near-duplicate copies and boilerplate, shuffle, render, tabulate.

The order of the generator's draws is part of the output: originals first, then near-duplicate clusters,
then boilerplate, then the shuffle; each image has a generator of its own, so rendering one changes no other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from data_recipes.embedded.design import DEFAULT_N_PAIRS, GENERATOR_VERSION, pick
from data_recipes.embedded.drawing import render_image
from data_recipes.embedded.text import near_duplicate, news_text
from data_recipes.embedded.vocabulary import BOILERPLATE_TEXTS, TOPIC_MOTIFS, TOPICS
from data_recipes.manifest import RecipeResult
from data_recipes.registry import register_recipe


def _draw_motif(topic: str, rng: np.random.Generator) -> str:
    motifs, weights = zip(*TOPIC_MOTIFS[topic], strict=True)
    return motifs[int(rng.choice(len(motifs), p=np.asarray(weights) / sum(weights)))]


def _cluster_sizes(total: int, rng: np.random.Generator) -> list[int]:
    """Split ``total`` near-duplicate copies into clusters of 1-3 copies each (mostly 1)."""
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(int(rng.choice([1, 2, 3], p=[0.6, 0.3, 0.1])), total - sum(sizes)))
    return sizes


def _injected_counts(n_pairs: int, boilerplate_share: float, near_duplicate_share: float) -> tuple[int, int]:
    """(boilerplate pairs, near-duplicate copies); a notice seen once is no duplicate, so never just one."""
    n_boilerplate = round(n_pairs * boilerplate_share)
    return (0 if n_boilerplate == 0 else max(2, n_boilerplate)), round(n_pairs * near_duplicate_share)


def _check_options(
    n_pairs: int, seed: int, image_size: int, boilerplate_share: float, near_duplicate_share: float
) -> None:
    if not 0 <= boilerplate_share <= 0.5 or not 0 <= near_duplicate_share <= 0.5:
        raise ValueError(
            f"boilerplate_share={boilerplate_share} and near_duplicate_share={near_duplicate_share} must each "
            "lie in [0, 0.5]; most pairs must stay original"
        )
    if n_pairs < 2 * len(TOPICS):
        raise ValueError(f"n_pairs={n_pairs} is too small; use at least {2 * len(TOPICS)} (two per topic)")
    n_boilerplate, n_near = _injected_counts(n_pairs, boilerplate_share, near_duplicate_share)
    n_original = n_pairs - n_boilerplate - n_near
    if n_near > n_original:
        raise ValueError(
            f"{n_near} near-duplicate copies need at least as many originals, but only {n_original} remain; "
            "lower near_duplicate_share or boilerplate_share"
        )
    if seed < 0:
        raise ValueError(f"seed={seed} must be a non-negative integer")
    if image_size < 16:
        raise ValueError(f"image_size={image_size} is too small to draw a motif; use 16 or more (default 64)")


Row = dict[str, str | None]


def _original_rows(n_original: int, rng: np.random.Generator) -> list[Row]:
    """Pairs of a uniformly drawn topic, a motif drawn from the topic's motif shares, and a news text."""
    rows: list[Row] = []
    for _ in range(n_original):
        topic = pick(rng, TOPICS)
        motif = _draw_motif(topic, rng)
        text = news_text(topic, motif, rng)
        rows.append({"topic": topic, "motif": motif, "text": text, "kind": "original", "dup_cluster": None})
    return rows


def _add_near_duplicates(rows: list[Row], n_copies: int, rng: np.random.Generator) -> int:
    """Append ``n_copies`` republished copies of randomly chosen originals; returns the number of clusters."""
    sizes = _cluster_sizes(n_copies, rng)
    sources = rng.choice(len(rows), size=len(sizes), replace=False)
    for cluster, (source, cluster_copies) in enumerate(zip(sources.tolist(), sizes, strict=True)):
        original = rows[source]
        original["dup_cluster"] = f"nd-{cluster:04d}"
        topic = str(original["topic"])
        for _ in range(cluster_copies):
            # a republished story keeps its topic but runs with a picture of its own
            rows.append(
                {
                    "topic": topic,
                    "motif": _draw_motif(topic, rng),
                    "text": near_duplicate(str(original["text"]), rng),
                    "kind": "near_duplicate",
                    "dup_cluster": original["dup_cluster"],
                }
            )
    return len(sizes)


def _add_boilerplate(rows: list[Row], n_boilerplate: int, rng: np.random.Generator) -> int:
    """Append ``n_boilerplate`` pairs of a site notice and a picture of a random topic; returns the number
    of notices used. Every notice used appears at least twice, so it is a duplicate cluster."""
    n_notices = min(len(BOILERPLATE_TEXTS), n_boilerplate // 2)
    notices = [k % n_notices for k in range(2 * n_notices)]
    notices += rng.integers(0, n_notices, n_boilerplate - len(notices)).tolist() if n_notices else []
    for notice in notices:
        topic = pick(rng, TOPICS)
        rows.append(
            {
                "topic": topic,
                "motif": _draw_motif(topic, rng),
                "text": BOILERPLATE_TEXTS[notice],
                "kind": "boilerplate",
                "dup_cluster": f"bp-{notice}",
            }
        )
    return n_notices


@register_recipe("embedded", generated=True)
def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    n_pairs: int = DEFAULT_N_PAIRS,
    seed: int = 0,
    image_size: int = 64,
    boilerplate_share: float = 0.05,
    near_duplicate_share: float = 0.05,
) -> RecipeResult:
    """Generate the embedded dataset: PNGs under ``work_dir/images/``, the manifest and the ground truth.

    ``raw_dir`` is unused (nothing is downloaded). The same arguments give byte-identical images and equal
    data frames. ``ground_truth`` has one row per pair: ``pair_id``, ``topic`` (of the picture, so also for
    boilerplate pairs), ``dup_cluster`` (``bp-N`` for a boilerplate notice, ``nd-N`` for a near-duplicate
    cluster with its original, else None), ``kind`` (original / boilerplate / near_duplicate) and ``motif``.
    """
    del raw_dir
    _check_options(n_pairs, seed, image_size, boilerplate_share, near_duplicate_share)
    rng = np.random.default_rng([seed, GENERATOR_VERSION])
    n_boilerplate, n_near = _injected_counts(n_pairs, boilerplate_share, near_duplicate_share)
    n_original = n_pairs - n_boilerplate - n_near

    rows = _original_rows(n_original, rng)
    n_clusters = _add_near_duplicates(rows, n_near, rng)
    n_notices = _add_boilerplate(rows, n_boilerplate, rng)
    rows = [rows[i] for i in rng.permutation(len(rows)).tolist()]
    image_dir = Path(work_dir) / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    pair_ids = [f"emb-{i:06d}" for i in range(len(rows))]
    image_paths = []
    for index, (pair_id, row) in enumerate(zip(pair_ids, rows, strict=True)):
        image_rng = np.random.default_rng([seed, GENERATOR_VERSION, image_size, index])
        path = (image_dir / f"{pair_id}.png").resolve()
        render_image(str(row["topic"]), str(row["motif"]), image_size, image_rng).save(
            path, format="PNG", compress_level=1
        )
        image_paths.append(str(path))

    manifest = pd.DataFrame(
        {"pair_id": pair_ids, "image_path": image_paths, "text": [r["text"] for r in rows]}
    )
    ground_truth = pd.DataFrame(
        {
            "pair_id": pair_ids,
            "topic": [r["topic"] for r in rows],
            "dup_cluster": pd.Series([r["dup_cluster"] for r in rows], dtype=object),
            "kind": [r["kind"] for r in rows],
            "motif": [r["motif"] for r in rows],
        }
    )
    notes = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "image_size": image_size,
        "n_pairs": len(rows),
        "n_original": n_original,
        "n_near_duplicate": n_near,
        "n_boilerplate": n_boilerplate,
        "n_near_duplicate_clusters": n_clusters,
        "n_boilerplate_clusters": n_notices,
    }
    return RecipeResult(manifest=manifest, image_root=None, ground_truth=ground_truth, notes=notes)
