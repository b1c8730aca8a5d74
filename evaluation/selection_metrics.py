"""Validation metrics a run or a tuning trial can be selected by, from one ranking of the validation pairs.

Why these and not only the rsum: on non-literal data the top of a full ranking is near its floor (on the
demo's 766 validation pairs, R@1 is about 0.5 %, four hits), so R@1 + R@5 + R@10 moves by a few hits from
one seed to the next and cannot tell settings apart; the report compares n-way R@1, which asks whether the
positive beats a few *random* items, i.e. where the positive sits in the bulk of the ranking. Every metric
here is computed from one number per query: ``above``, how many items of *other* groups score at least as
high as the query's positive (a tie counts against it, as in :func:`evaluation.retrieval.n_way_recall_at_1`),
out of ``eligible`` items of other groups.

* ``expected n-way R@1``: the probability that the positive beats ``n - 1`` distractors drawn uniformly
  without replacement from the eligible items, C(eligible - above, n - 1) / C(eligible, n - 1). It is the
  paper's n-way R@1 averaged over *every* possible draw of distractors: the same quantity the test split
  reports, without the noise of a finite number of redraws.
* ``AUC``: the same with n = 2, 1 - above / eligible (a normalised mean rank).
* ``MRR``: 1 / (1 + above), dominated by the top of the ranking.
* ``median rank``: 1 + above at the median query (lower is better; coarse: one integer).
* ``rsum``: R@1 + R@5 + R@10 in percent, both directions (the field's criterion on literal data).

Each metric's value is the mean of its two retrieval directions (image→text, text→image); a metric that is a
mean over queries also gives per-query values (:attr:`SelectionMetric.per_query`), which a paired
comparison of two settings on the same validation items resamples. Each metric is one entry of
:data:`SELECTION_METRICS`, with its direction, what it needs and how it is called, and so is the validation loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from common.registry import Registry
from evaluation.embeddings import as_unit_embeddings, chunk_rows, cross_modal_scores, group_codes

DIRECTIONS = ("i2t", "t2i")


@dataclass(frozen=True)
class QueryRanks:
    """Per query of one direction: how many other-group items score at least as high as its positive
    (``above``), out of how many other-group items (``eligible``)."""

    above: np.ndarray
    eligible: np.ndarray

    def __post_init__(self) -> None:
        if self.above.shape != self.eligible.shape:
            raise ValueError(f"above {self.above.shape} and eligible {self.eligible.shape} differ in shape")
        if np.any(self.above < 0) or np.any(self.above > self.eligible):
            raise ValueError("above must lie in [0, eligible] for every query")


def other_group_ranks(
    query: np.ndarray, gallery: np.ndarray, group_ids: np.ndarray | None = None
) -> QueryRanks:
    """Row ``i`` of ``query`` against row ``i`` of ``gallery`` (its positive) and every gallery row of another
    group (rows sharing ``group_ids`` with ``i`` are neither positive nor negative, as in n-way R@1)."""
    query = as_unit_embeddings(query, "query")
    gallery = as_unit_embeddings(gallery, "gallery")
    n = query.shape[0]
    if gallery.shape[0] != n:
        raise ValueError(f"query and gallery must be row-aligned pairs, got {n} and {gallery.shape[0]} rows")
    groups = group_codes(group_ids, n)
    eligible = (n - np.bincount(groups)[groups]).astype(np.int64)
    above = np.empty(n, dtype=np.int64)
    for rows in chunk_rows(n, n):
        scores = cross_modal_scores(query[rows], gallery)
        local = np.arange(rows.stop - rows.start)
        positive = scores[local, local + rows.start]
        other = groups[None, :] != groups[rows][:, None]
        above[rows] = ((scores >= positive[:, None]) & other).sum(axis=1)
    return QueryRanks(above, eligible)


def both_directions(
    image: np.ndarray, text: np.ndarray, group_ids: np.ndarray | None = None
) -> dict[str, QueryRanks]:
    """:func:`other_group_ranks` image→text and text→image of row-aligned validation pairs."""
    return {"i2t": other_group_ranks(image, text, group_ids), "t2i": other_group_ranks(text, image, group_ids)}


def expected_n_way_hits(ranks: QueryRanks, n_way: int) -> np.ndarray:
    """Per query, the probability that its positive beats ``n_way - 1`` distractors drawn without replacement
    from the eligible items: prod_{j < n_way - 1} (eligible - above - j) / (eligible - j), 0 when fewer than
    ``n_way - 1`` items rank below the positive."""
    if not isinstance(n_way, (int, np.integer)) or n_way < 2:
        raise ValueError(f"n_way must be an integer >= 2, got {n_way!r}")
    if ranks.eligible.size and ranks.eligible.min() < n_way - 1:
        raise ValueError(
            f"an {n_way}-way draw needs {n_way - 1} items of other groups per query; some query has "
            f"{int(ranks.eligible.min())}: lower n_way or validate on more pairs"
        )
    below = (ranks.eligible - ranks.above).astype(np.float64)
    total = ranks.eligible.astype(np.float64)
    probability = np.ones_like(below)
    for j in range(n_way - 1):
        probability *= np.clip(below - j, 0.0, None) / (total - j)
    return probability


@dataclass(frozen=True)
class ValidationRanking:
    """What a selection metric is computed from: the per-query ranks of both directions (``i2t``, ``t2i``), the n of
    the expected n-way R@1, and, where the ranking knew the validation split's layout (several captions per
    image), its full-ranking scores (:func:`evaluation.protocol.full_ranking`'s ``all``)."""

    ranks: Mapping[str, QueryRanks]
    n_way: int = 5
    full_ranking: Mapping[str, float] | None = None


@dataclass(frozen=True)
class SelectionMetric:
    """A score a run's best checkpoint, early stopping and a tuning's choice follow: its direction, what it needs,
    how it is called, and how it is computed from a :class:`ValidationRanking` (``value``; None for the validation
    loss, which the trainer computes). ``per_query`` (None for a metric that is no mean over queries) gives one
    value per validation pair, which a paired comparison of two runs on the same items resamples."""

    name: str
    #: what a report and a tuning's ``selection.json`` call it (``{n}``: the n-way task's n)
    label: str
    #: what the progress display calls it on a training's line
    progress_label: str
    higher_is_better: bool
    value: Callable[[ValidationRanking], float] | None = None
    per_query: Callable[[ValidationRanking], np.ndarray] | None = None
    #: its value is an n-way task's (``train.selection_n_way``): the validation split needs n items per query
    n_way: bool = False

    @property
    def ranks_pairs(self) -> bool:
        """Computed from how the validation pairs rank (a scorer of their embeddings), not from the loss."""
        return self.value is not None

    def better(self, value: float, than: float) -> bool:
        return value > than if self.higher_is_better else value < than

    def label_for(self, n_way: int) -> str:
        return self.label.format(n=n_way)

    def progress_label_for(self, n_way: int) -> str:
        return self.progress_label.format(n=n_way)


def _mean_of_directions(per_direction: Callable[[QueryRanks, int], np.ndarray]) -> Callable[[ValidationRanking], np.ndarray]:
    def per_query(ranking: ValidationRanking) -> np.ndarray:
        return np.mean([per_direction(ranking.ranks[d], ranking.n_way) for d in DIRECTIONS], axis=0)

    return per_query


def _mean_metric(
    name: str, label: str, progress_label: str, per_direction: Callable[[QueryRanks, int], np.ndarray], n_way: bool = False
) -> SelectionMetric:
    per_query = _mean_of_directions(per_direction)
    return SelectionMetric(name, label, progress_label, True, lambda r: float(per_query(r).mean()), per_query, n_way)


def _median_rank(ranking: ValidationRanking) -> float:
    return float(np.mean([np.median(1 + ranking.ranks[d].above) for d in DIRECTIONS]))


def _rsum_per_query(ranking: ValidationRanking) -> np.ndarray:
    """100 x the number of (direction, k in 1, 5, 10) at which the query's positive is within the top k: the
    mean over queries is the rsum of each pair's own image and text (other groups only)."""
    return 100.0 * sum((1 + ranking.ranks[d].above <= k).astype(np.float64) for d in DIRECTIONS for k in (1, 5, 10))


def _rsum(ranking: ValidationRanking) -> float:
    """The full ranking's rsum where the ranking knew the layout (an image's best caption, with several captions
    per image, as on test); else the mean of :func:`_rsum_per_query` (the same with one caption per image)."""
    if ranking.full_ranking is not None:
        return ranking.full_ranking["rsum"]
    return float(_rsum_per_query(ranking).mean())


#: every score a run can be selected by (``train.selection``): a retrieval metric of the validation split (the
#: expected n-way R@1, the bulk of the ranking that non-literal data is judged by; AUC; MRR; median rank; the rsum
#: R@1 + R@5 + R@10 of both directions, VSE++'s and PVSE's criterion on literal data) or the validation loss (the
#: paper's §3.3; not comparable across loss families). Every epoch's row of ``history.csv`` holds them all.
SELECTION_METRICS: Registry[SelectionMetric] = Registry("selection metric")
for _metric in (
    _mean_metric("val_nway_r1", "expected {n}-way R@1", "val {n}-way R@1", lambda r, n: expected_n_way_hits(r, n), n_way=True),
    _mean_metric("val_auc", "AUC (expected 2-way R@1)", "val AUC", lambda r, n: 1.0 - r.above / r.eligible),
    _mean_metric("val_mrr", "MRR", "val MRR", lambda r, n: 1.0 / (1.0 + r.above)),
    SelectionMetric("val_medr", "median rank", "val median rank", False, _median_rank),
    SelectionMetric("val_rsum", "rsum (R@1+R@5+R@10, %)", "val rsum", True, _rsum, _rsum_per_query),
    SelectionMetric("val_loss", "validation loss", "val loss", False),
):
    SELECTION_METRICS.add(_metric.name, _metric)


def ranking_metrics() -> list[SelectionMetric]:
    """The metrics computed from the validation ranking (all but the loss), in name order."""
    return [metric for metric in SELECTION_METRICS.values() if metric.ranks_pairs]
