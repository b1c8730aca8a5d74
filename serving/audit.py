"""``crossmodal audit``: which pairs of a table do not belong together? Every valid pair is ranked by how
unlikely it is that its image and its text go together, from a trained bundle's embeddings and each side's
neighborhood — the neighborhoods this project builds.

The score follows LEMoN (Zhang et al., "Label Error Detection using Multimodal Neighbors", ICML 2025): a
pair's cross-modal distance, plus how far its text is from the texts of the pairs whose *images* are nearest
its image, plus how far its image is from the images of the pairs whose *texts* are nearest its text. A photo
attached to the wrong story is far from its text (on non-literal data, only somewhat), and it is also unlike
the pictures that illustrate stories like its text, while the stories its picture's look-alikes illustrate
are unlike its text — two more, partly independent, pieces of evidence. Here, as the issue asks, image
neighbors are found with the bundle's image tower and text neighbors with its Doc2Vec (the semantic
neighborhoods of the paper); the distances between partners are cosine distances in the joint space. Each
component is standardised over the table (z-score) and the three are summed with equal weights (LEMoN tunes
its weights on labelled data, which an archive does not have); ``--weights`` changes them.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from PIL import Image

from common.files import atomic_path
from data_recipes.manifest import integer_group_ids
from evaluation.document import Document
from evaluation.embeddings import chunk_rows
from models.devices import pick_device
from serving.bundle import Bundle, load_bundle
from serving.table_evaluation import EvaluationError, ValidatedTable, doc2vec_vectors, embed_table, read_table

DEFAULT_K = 10
COMPONENTS = ("cross_modal", "image_neighborhood", "text_neighborhood")


@dataclass(frozen=True)
class AuditSettings:
    k: int = DEFAULT_K
    #: weights of the standardised components, in :data:`COMPONENTS` order
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise EvaluationError(f"--k must be >= 1, got {self.k}")
        # nan passes "w < 0" and inf makes every score ±inf or nan: both are refused here, by name
        finite = all(math.isfinite(w) for w in self.weights)
        if len(self.weights) != 3 or not finite or any(w < 0 for w in self.weights) or not any(self.weights):
            raise EvaluationError(
                f"--weights takes three finite non-negative numbers, not all 0, got {list(self.weights)}"
            )


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def nearest_others(vectors: np.ndarray, group_ids: np.ndarray, k: int) -> np.ndarray:
    """Per row, the ``k`` rows of *other* groups most cosine-similar to it (ties: the lower row), ``[n, k]``."""
    unit = _unit(vectors)
    groups = np.asarray(group_ids)
    out = np.empty((len(unit), k), dtype=np.int64)
    for rows in chunk_rows(len(unit), len(unit)):
        similarity = unit[rows] @ unit.T
        similarity[groups[rows][:, None] == groups[None, :]] = -np.inf
        order = np.argsort(-similarity, axis=1, kind="stable")
        out[rows] = order[:, :k]
    return out


def neighborhood_k(group_ids: np.ndarray, k: int) -> int:
    """The k the neighborhoods use: ``k``, or fewer when a pair has fewer pairs of other groups (what
    ``summary.json`` records, beside the k asked for)."""
    n = len(group_ids)
    if n < 2:
        raise EvaluationError(f"auditing needs at least 2 valid pairs, got {n}")
    others = n - np.bincount(np.unique(group_ids, return_inverse=True)[1]).max()
    used = min(k, int(others))
    if used < 1:
        raise EvaluationError(
            "every valid pair belongs to one group: there is no neighborhood to compare with"
        )
    return used


def audit_components(
    image: np.ndarray, text: np.ndarray, doc_vectors: np.ndarray, group_ids: np.ndarray, k: int
) -> dict[str, np.ndarray]:
    """Per pair: ``cross_modal`` = 1 − cos(image, text); ``image_neighborhood`` = mean over the k pairs whose
    images are nearest this image of 1 − cos(this text, their text); ``text_neighborhood`` = mean over the k
    pairs whose texts are nearest this text by Doc2Vec of 1 − cos(this image, their image). Pairs of the same
    group (one image's several captions) are never each other's neighbors."""
    k = neighborhood_k(group_ids, k)
    image_u, text_u = _unit(image), _unit(text)
    cross = 1.0 - np.sum(image_u * text_u, axis=1)
    by_image = nearest_others(image_u, group_ids, k)
    by_text = nearest_others(doc_vectors, group_ids, k)
    image_side = 1.0 - np.einsum("nd,nkd->nk", text_u, text_u[by_image]).mean(axis=1)
    text_side = 1.0 - np.einsum("nd,nkd->nk", image_u, image_u[by_text]).mean(axis=1)
    return {"cross_modal": cross, "image_neighborhood": image_side, "text_neighborhood": text_side}


def standardised(values: np.ndarray) -> np.ndarray:
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def audit_score(components: dict[str, np.ndarray], weights: tuple[float, float, float]) -> np.ndarray:
    """The weighted sum of the standardised components: higher = less likely to belong together."""
    return sum(w * standardised(components[name]) for w, name in zip(weights, COMPONENTS, strict=True))


def audit_frame(
    pairs: pd.DataFrame, image: np.ndarray, text: np.ndarray, doc_vectors: np.ndarray, settings: AuditSettings
) -> pd.DataFrame:
    """The table's valid pairs with their score and components, most suspicious first (``rank`` 1)."""
    group_ids = integer_group_ids(pairs).to_numpy()
    components = audit_components(image, text, doc_vectors, group_ids, settings.k)
    frame = pairs[[c for c in ("pair_id", "image_path", "text", "group_id") if c in pairs]].copy()
    frame["score"] = audit_score(components, settings.weights)
    for name, values in components.items():
        frame[name] = values
    frame = frame.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)
    frame.insert(0, "rank", np.arange(1, len(frame) + 1))
    return frame


def embed_for_audit(
    bundle: Bundle, table: ValidatedTable, device: torch.device
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    image, text = embed_table(bundle, table, device, progress=False)
    if image.ndim == 3:  # PVSE: one embedding per item, the mean of its K
        image, text = _unit(image.mean(axis=1)), _unit(text.mean(axis=1))
    doc_vectors, skipped = doc2vec_vectors(bundle, table.pairs["text"].tolist())
    if doc_vectors is None:
        raise EvaluationError(f"the audit finds text neighbors with the bundle's Doc2Vec, but {skipped}")
    return image, text, doc_vectors


def audit(
    bundle_path: Path,
    table_path: Path,
    out: Path,
    settings: AuditSettings = AuditSettings(),
    flag_share: float | None = None,
    top: int = 24,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Audit the table with the bundle; write ``audit.csv``, ``report.md`` (the ``top`` most suspicious pairs
    as thumbnails), ``rejects.csv`` and, with ``flag_share``, ``filtered_pairs.csv`` (the valid pairs less the
    most suspicious share, in the ``pairs`` format); return the summary."""
    if flag_share is not None and not 0 < flag_share < 1:
        raise EvaluationError(f"--flag-share is a share of the pairs, between 0 and 1; got {flag_share}")
    device = device or pick_device()
    bundle = load_bundle(bundle_path)
    size = int(bundle.image["cache_size"])
    with tempfile.TemporaryDirectory(prefix="crossmodal-audit-") as work:
        table = read_table(table_path, {size}, Path(work))
    image, text, doc_vectors = embed_for_audit(bundle, table, device)
    frame = audit_frame(table.pairs, image, text, doc_vectors, settings)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "audit.csv") as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(out / "rejects.csv") as tmp:
        table.rejects.to_csv(tmp, index=False)
    summary: dict[str, Any] = {
        "table": table.stats,
        "bundle": str(bundle_path),
        "bundle_id": bundle.bundle_id,
        # the k the neighborhoods used: fewer than asked when the table has fewer pairs of other groups
        "k": neighborhood_k(integer_group_ids(table.pairs).to_numpy(), settings.k),
        "k_asked": settings.k,
        "weights": dict(zip(COMPONENTS, settings.weights, strict=True)),
        "n_scored": len(frame),
    }
    if flag_share is not None:
        flagged = int(round(flag_share * len(frame)))
        kept = table.pairs[~table.pairs["pair_id"].isin(set(frame["pair_id"].head(flagged)))]
        columns = [c for c in ("pair_id", "image_path", "text", "group_id", "split", "source") if c in kept]
        with atomic_path(out / "filtered_pairs.csv") as tmp:
            kept[columns].to_csv(tmp, index=False)
        summary.update({"flag_share": flag_share, "n_flagged": flagged, "n_kept": len(kept)})
    row_of = {pair_id: i for i, pair_id in enumerate(table.pairs["pair_id"])}
    shown = frame.head(top)
    thumbs = out / "thumbs"
    thumbs.mkdir(exist_ok=True)
    for rank, pair_id in zip(shown["rank"], shown["pair_id"], strict=True):
        with atomic_path(thumbs / f"{rank:04d}.png") as tmp:  # a full disk names the file, leaves no half PNG
            Image.fromarray(np.asarray(table.pixels[size][row_of[pair_id]])).save(tmp, format="PNG")
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text(audit_document(summary, shown).to_markdown())
    with atomic_path(out / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _fewer(summary: dict[str, Any]) -> str:
    asked = summary.get("k_asked", summary["k"])
    return f", fewer than the {asked} asked: the table has only {summary['k']} pairs outside its largest group" if asked != summary["k"] else ""


def audit_document(summary: dict[str, Any], shown: pd.DataFrame) -> Document:
    table = summary["table"]
    doc = Document(f"crossmodal audit — {Path(table['table']).name}")
    doc.paragraph(
        f"{summary['n_scored']} valid pairs of {table['n_input']} scored ({table['n_rejected']} rejected, in "
        f"rejects.csv) with bundle {summary['bundle_id']}: the higher the score, the less likely the image and "
        f"the text belong together. Score = the standardised sum of the cross-modal distance, the image "
        f"neighborhood's text distance and the text neighborhood's image distance (k = {summary['k']}{_fewer(summary)}, weights "
        f"{summary['weights']}; LEMoN, Zhang et al. 2025). Every pair, with each component: audit.csv."
        + (
            f" The {summary['n_flagged']} most suspicious pairs ({summary['flag_share']:.0%}) are left out of "
            f"filtered_pairs.csv ({summary['n_kept']} pairs)."
            if "flag_share" in summary
            else ""
        )
    )
    doc.heading(f"The {len(shown)} most suspicious pairs")
    doc.table(
        ["rank", "image", "text", "score", "cross-modal", "image nbhd", "text nbhd"],
        [
            [
                str(row["rank"]),
                f"![{row['pair_id']}](thumbs/{row['rank']:04d}.png)",
                str(row["text"])[:160].replace("|", "/").replace("\n", " "),
                f"{row['score']:.2f}",
                f"{row['cross_modal']:.3f}",
                f"{row['image_neighborhood']:.3f}",
                f"{row['text_neighborhood']:.3f}",
            ]
            for _, row in shown.iterrows()
        ],
    )
    return doc
