"""The validation scores checkpoints are selected by (``TrainSettings.selection``): every metric of
:data:`evaluation.selection_metrics.SELECTION_METRICS` computed from the validation ranking (expected n-way R@1,
AUC, MRR, median rank, and the rsum of the full ranking, computed by the same code as the test split's,
:func:`evaluation.protocol.full_ranking`), on at most ``max_pairs`` validation pairs. Every epoch's row of ``history.csv`` holds them all, so a run can
be re-read under any of them; the one ``selection`` names decides the best checkpoint and early stopping."""

from __future__ import annotations

from typing import Any

import numpy as np

from data_recipes.manifest import ManifestError
from evaluation.protocol import EVAL_SEED, full_ranking, retrieval_layout
from evaluation.selection_metrics import (
    SELECTION_METRICS,
    QueryRanks,
    ValidationRanking,
    both_directions,
    ranking_metrics,
)


def sample_whole_groups(group_ids: np.ndarray, max_pairs: int, seed: int = EVAL_SEED) -> np.ndarray:
    """Row indices, in their order, of a fixed-seed sample of whole groups holding at most ``max_pairs``
    rows (every row when there are no more; a group's several captions stay together)."""
    group_ids = np.asarray(group_ids)
    if len(group_ids) <= max_pairs:
        return np.arange(len(group_ids))
    groups, sizes = np.unique(group_ids, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(groups))
    kept = order[np.cumsum(sizes[order]) <= max_pairs]
    return np.flatnonzero(np.isin(group_ids, groups[kept]))


class ValidationScorer:
    """Scores validation embeddings (row-aligned with the ``group_ids`` etc. it was built with, the
    validation positions in the trainer's order): ``scorer(image, text)`` gives every named score of an
    epoch's row; :meth:`ranks` gives the per-query ranks the scores come from (what a paired comparison of
    two runs on the same validation items resamples)."""

    def __init__(
        self, group_ids: np.ndarray, image_ids: np.ndarray, texts: np.ndarray, max_pairs: int, n_way: int
    ) -> None:
        self.rows = sample_whole_groups(group_ids, max_pairs)
        self.group_ids = np.asarray(group_ids)[self.rows]
        self.layout = retrieval_layout(self.group_ids, np.asarray(image_ids)[self.rows], np.asarray(texts)[self.rows])
        self.n_way = n_way
        self.n_pairs = len(group_ids)
        # the fewest items of other groups a validation query has: an n-way draw needs n - 1 of them
        groups = self.group_ids
        self.fewest_others = int(len(groups) - max(np.unique(groups, return_counts=True)[1], default=0))

    def check(self, metric: str) -> None:
        """Refuse, before any training, a selection metric this validation split cannot compute."""
        if SELECTION_METRICS[metric].n_way and self.fewest_others < self.n_way - 1:
            # the data's size, not a bug: one line (pipeline/run/failures.py), as a split that is too small
            raise ManifestError(
                f"selection by the expected {self.n_way}-way R@1 needs {self.n_way - 1} validation pairs of other "
                f"groups per pair, but this validation split has {self.fewest_others}: lower selection_n_way, "
                "select by val_rsum, or give the split more validation pairs"
            )

    def ranks(self, image: np.ndarray, text: np.ndarray) -> dict[str, QueryRanks]:
        return both_directions(image[self.rows], text[self.rows], self.group_ids)

    def ranking(self, image: np.ndarray, text: np.ndarray) -> ValidationRanking:
        """What every metric is computed from: the ranks, and the full ranking with the split's layout (an image's
        best caption with several captions per image, as on test)."""
        ranked = full_ranking(image[self.rows], text[self.rows], self.layout)["all"]
        return ValidationRanking(self.ranks(image, text), self.n_way, ranked)

    def __call__(self, image: np.ndarray, text: np.ndarray) -> dict[str, float]:
        ranking = self.ranking(image, text)
        # every metric is recorded; one this split cannot compute (too few pairs for an n-way draw) is NaN
        defined = self.fewest_others >= self.n_way - 1
        scores = {metric.name: metric.value(ranking) if defined or not metric.n_way else float("nan") for metric in ranking_metrics()}
        ranked = ranking.full_ranking
        scores.update(
            {f"val_{direction}_r@{k}": ranked[f"{direction}_r@{k}"] for direction in ("i2t", "t2i") for k in (1, 5, 10)}
        )
        return scores

    def describe(self, metric: str) -> dict[str, Any]:
        """What the run's metadata says of its selection."""
        return {
            "metric": metric,
            **({"n_way": self.n_way} if SELECTION_METRICS[metric].n_way else {}),
            "protocol": self.layout.protocol,
            "pairs_ranked": int(len(self.rows)),
            "validation_pairs": int(self.n_pairs),
            "sampled": bool(len(self.rows) < self.n_pairs),
            "sample_seed": EVAL_SEED,
        }


def save_ranks(path, ranks: dict[str, QueryRanks]) -> None:  # noqa: ANN001 - a path or an open file
    """The per-query ranks of both directions as one ``.npz`` (``i2t_above``, ``i2t_eligible``, ...)."""
    np.savez(
        path,
        **{f"{direction}_{field}": getattr(r, field) for direction, r in ranks.items() for field in ("above", "eligible")},
    )


def load_ranks(path) -> dict[str, QueryRanks]:  # noqa: ANN001 - a path or an open file
    with np.load(path) as saved:
        return {d: QueryRanks(saved[f"{d}_above"], saved[f"{d}_eligible"]) for d in ("i2t", "t2i")}
