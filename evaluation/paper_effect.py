"""The paper's own effect as the yardstick of a comparison: what Thomas & Kovashka (ECCV 2020) measured on their
non-literal datasets, whether a run's interval rules that effect out, is consistent with it or confirms a gain at
least that large, and how many seeds or test items would bring the run's smallest detectable difference to half
of it.

Why the paper's number and not zero alone: "not resolved" says the run saw no difference; it does not say whether
the difference the paper reports could be there. An interval whose upper bound lies below the paper's gain rules
that gain out at this run's settings; one that holds it cannot, however wide.

The figures are Table 1 (5-way R@1, Politics and GoodNews use a 5-way task) and Table 3 (neighbor preservation
at k = 200, image and text). Table 1's differences are compared as they are when the run scores the same n-way
task, else as relative gains; Table 3's always as relative gains (method / baseline − 1): the paper's k = 200 of
24.6k–46k test items is not a run's k, and preservation scales with k/(n − 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluation.statistics import MDE_FACTOR, holm, two_sided_p

#: the paper's non-literal datasets, whose comparisons a run is read against
PAPER_DATASETS = ("Politics", "GoodNews")
#: the n of the paper's n-way task on those datasets (§4.3)
PAPER_N_WAY = 5

#: Table 1, 5-way R@1 (I→T, T→I)
TABLE_1: dict[str, dict[str, tuple[float, float]]] = {
    "Politics": {
        "ang_np_sym": (0.6270, 0.6216),
        "ours": (0.6467, 0.6492),
        "trip_np_sym": (0.4742, 0.4801),
        "ours_trip": (0.4940, 0.4877),
    },
    "GoodNews": {
        "ang_np_sym": (0.8704, 0.8728),
        "ours": (0.8849, 0.8865),
        "trip_np_sym": (0.7203, 0.7216),
        "ours_trip": (0.7390, 0.7378),
    },
}
#: Table 3, neighbor preservation of the Doc2Vec neighbors at k = 200 (image, text)
TABLE_3: dict[str, dict[str, tuple[float, float]]] = {
    "Politics": {
        "trip_np_sym": (0.1135, 0.1311),
        "ours_trip": (0.1319, 0.1483),
        "ang_np_sym": (0.1199, 0.1544),
        "ours": (0.1386, 0.1703),
    },
    "GoodNews": {
        "trip_np_sym": (0.1183, 0.1294),
        "ours_trip": (0.1327, 0.1426),
        "ang_np_sym": (0.1032, 0.1131),
        "ours": (0.1270, 0.1376),
    },
}
#: a headline row's key -> (the table, the column of its pair of values)
ROW_SOURCES = {
    "i2t": ("Table 1", 0),
    "t2i": ("Table 1", 1),
    "preservation_image": ("Table 3", 0),
    "preservation_text": ("Table 3", 1),
}
_TABLES = {"Table 1": TABLE_1, "Table 3": TABLE_3}

#: where the paper's point estimate lies against this run's 95% interval, on this run's data: the words say what
#: was measured (the paper's datasets were not run here)
RULED_OUT, CONSISTENT, CONFIRMED = "above our interval", "inside our interval", "at or below our interval"
#: a reading whose nearest bound lies within this share of the MDE from the paper's value is "at the line": a
#: difference smaller than the run can detect decides it
AT_THE_LINE_SHARE = 0.1
AT_THE_LINE = "at the line"
#: the family-wise error rate of the Holm-adjusted readings
FAMILY_ALPHA = 0.05


@dataclass(frozen=True)
class PaperEffect:
    """The paper's difference for one comparison, metric and dataset, on the scale a run is read on."""

    table: str
    dataset: str
    method_value: float
    baseline_value: float
    #: "absolute" (a difference of the same metric) or "relative" (method / baseline − 1)
    scale: str

    @property
    def effect(self) -> float:
        difference = self.method_value - self.baseline_value
        return difference if self.scale == "absolute" else difference / self.baseline_value


def paper_effects(method: str, baseline: str, key: str, n_way: int) -> list[PaperEffect]:
    """The paper's effects for ``method`` − ``baseline`` on headline row ``key`` (one per dataset that reports
    both); none when the paper has no such comparison. Table 1 is absolute when the run's ``n_way`` is the
    paper's, else relative; Table 3 relative."""
    if key not in ROW_SOURCES:
        return []
    table, column = ROW_SOURCES[key]
    scale = "absolute" if table == "Table 1" and n_way == PAPER_N_WAY else "relative"
    effects = []
    for dataset in PAPER_DATASETS:
        values = _TABLES[table][dataset]
        if method in values and baseline in values:
            effects.append(PaperEffect(table, dataset, values[method][column], values[baseline][column], scale))
    return effects


def on_scale(row: Mapping[str, Any], scale: str) -> tuple[float, float, float]:
    """A headline row's difference and 95% interval on ``scale``: as they are, or relative to the baseline's mean
    (its mean taken as fixed, so the relative interval is the absolute one divided by it)."""
    if scale == "absolute":
        return row["difference"], row["ci_low"], row["ci_high"]
    base = row["baseline_mean"]
    if base == 0:
        return math.nan, math.nan, math.nan
    return row["difference"] / base, row["ci_low"] / base, row["ci_high"] / base


def reading(effect: float, ci_low: float, ci_high: float) -> str:
    """Where the paper's point estimate ``effect`` lies against the run's interval: above its upper bound (on this
    data the paper's gain is larger than the run allows), inside it, or at or below its lower bound (the run's
    difference is at least the paper's)."""
    if effect > ci_high:
        return RULED_OUT
    if ci_low >= effect:
        return CONFIRMED
    return CONSISTENT


def at_the_line(effect: float, ci_low: float, ci_high: float, mde: float) -> bool:
    """Whether the interval's bound nearest the paper's value lies within :data:`AT_THE_LINE_SHARE` of the MDE of
    it: the reading then turns on a difference the run cannot detect."""
    return min(abs(effect - ci_low), abs(effect - ci_high)) < AT_THE_LINE_SHARE * mde


def holm_reading(adjusted_p: float, ours: float, effect: float) -> str:
    """The reading after Holm's adjustment: the paper's value outside the run's interval only when the adjusted
    test of "our difference equals the paper's" rejects at :data:`FAMILY_ALPHA`."""
    if adjusted_p >= FAMILY_ALPHA:
        return CONSISTENT
    return RULED_OUT if ours < effect else CONFIRMED


def paper_readings(row: Mapping[str, Any], method: str, baseline: str, n_way: int) -> list[dict[str, Any]]:
    """The readings of one headline row against every paper effect it has."""
    readings = []
    for effect in paper_effects(method, baseline, row["key"], n_way):
        difference, low, high = on_scale(row, effect.scale)
        scale = 1.0 if effect.scale == "absolute" else abs(row["baseline_mean"]) or math.nan
        # a row without its standard error (hand-made) gets no test and no "at the line"
        se, mde = row.get("se", math.nan) / scale, row.get("mde", math.nan) / scale
        comparable = math.isfinite(low) and math.isfinite(se) and se > 0
        readings.append(
            {
                "table": effect.table,
                "dataset": effect.dataset,
                "scale": effect.scale,
                "paper_method": effect.method_value,
                "paper_baseline": effect.baseline_value,
                "paper_effect": effect.effect,
                "ours": difference,
                "ci_low": low,
                "ci_high": high,
                "reading": reading(effect.effect, low, high) if math.isfinite(low) else "not comparable",
                "at_the_line": bool(comparable and at_the_line(effect.effect, low, high, mde)),
                # the normal test of "our difference equals the paper's" on the run's bootstrap standard error, for
                # Holm's adjustment across the report's readings (evaluation.statistics.holm)
                "p_value": two_sided_p((difference - effect.effect) / se) if comparable else math.nan,
            }
        )
    return readings


def adjust_readings(entries: list[Mapping[str, Any]]) -> int:
    """Holm-adjust every reading of ``entries`` (one family: a report's comparisons under one protocol) in place:
    each reading gains ``holm_p`` and ``holm_reading``; returns how many readings the family holds."""
    readings = [r for entry in entries for r in entry["readings"] if math.isfinite(r.get("p_value", math.nan))]
    for r, adjusted in zip(readings, holm([r["p_value"] for r in readings]), strict=True):
        r["holm_p"] = adjusted
        r["holm_reading"] = holm_reading(adjusted, r["ours"], r["paper_effect"])
    return len(readings)


# ---------------------------------------------------------------------------------------------- power
@dataclass(frozen=True)
class VarianceParts:
    """The variance of a paired per-item difference d[s, i] = method − baseline (seeds s, test items i) split
    as d = μ + a_s + b_i + e_si: the seed part, the item part and the rest; with ``calibration`` the factor that
    makes the model's standard error at the run's own design equal the bootstrap's (which counts item noise a
    little twice: :func:`evaluation.statistics.paired_bootstrap_items_and_seeds`)."""

    seeds: float
    items: float
    residual: float
    n_seeds: int
    n_items: int
    calibration: float = 1.0
    #: the variance of the seeds' mean differences (ddof 1, ``n_seeds - 1`` degrees of freedom), which ``seeds`` is
    #: estimated from: the seed part rests on it
    seed_mean_variance: float = 0.0

    def seed_part_range(self, level: float = 0.95) -> tuple[float, float]:
        """The range of the seed part that its ``n_seeds - 1`` degrees of freedom allow (a chi-square interval of
        the seeds' mean variance at ``level``, less the item noise in it, floored at 0)."""
        from scipy.stats import chi2

        df = self.n_seeds - 1
        tail = (1 - level) / 2
        low = df * self.seed_mean_variance / chi2.ppf(1 - tail, df) - self.residual / self.n_items
        high = df * self.seed_mean_variance / chi2.ppf(tail, df) - self.residual / self.n_items
        return max(low, 0.0), max(high, 0.0)

    def with_seed_part(self, seeds: float) -> VarianceParts:
        return VarianceParts(seeds, self.items, self.residual, self.n_seeds, self.n_items, self.calibration, self.seed_mean_variance)

    def se(self, n_seeds: int, n_items: int) -> float:
        variance = self.seeds / n_seeds + self.items / n_items + self.residual / (n_seeds * n_items)
        return math.sqrt(max(self.calibration * variance, 0.0))

    def mde(self, n_seeds: int, n_items: int) -> float:
        return MDE_FACTOR * self.se(n_seeds, n_items)


def variance_parts(method: Mapping[int, np.ndarray], baseline: Mapping[int, np.ndarray], bootstrap_se: float | None = None) -> VarianceParts | None:
    """Two-way variance components of the paired differences over the seeds both ran (None with fewer than two
    such seeds, where the seed part cannot be estimated). ``bootstrap_se``: the run's reported standard error,
    to calibrate the model to it."""
    seeds = sorted(set(method) & set(baseline))
    if len(seeds) < 2:
        return None
    d = np.stack([np.asarray(method[s], dtype=np.float64) - np.asarray(baseline[s], dtype=np.float64) for s in seeds])
    n_seeds, n_items = d.shape
    seed_means, item_means, grand = d.mean(axis=1), d.mean(axis=0), d.mean()
    residual = d - seed_means[:, None] - item_means[None, :] + grand
    residual_variance = float((residual**2).sum() / max((n_seeds - 1) * (n_items - 1), 1))
    seed_variance = max(float(seed_means.var(ddof=1)) - residual_variance / n_items, 0.0)
    item_variance = max(float(item_means.var(ddof=1)) - residual_variance / n_seeds, 0.0)
    raw = float(seed_means.var(ddof=1))
    parts = VarianceParts(seed_variance, item_variance, residual_variance, n_seeds, n_items, 1.0, raw)
    model_se = parts.se(n_seeds, n_items)
    if bootstrap_se is not None and model_se > 0:
        parts = VarianceParts(seed_variance, item_variance, residual_variance, n_seeds, n_items, (bootstrap_se / model_se) ** 2, raw)
    return parts


#: the largest design a projection names (beyond it: "more than")
MAX_SEEDS, MAX_ITEMS = 1000, 10_000_000


def seeds_needed(parts: VarianceParts, target_mde: float) -> int | None:
    """The fewest seeds (at the run's test size) whose MDE is at most ``target_mde``; None when no number of
    seeds reaches it (the test items' spread alone is larger) or it would take more than :data:`MAX_SEEDS`."""
    for n_seeds in range(1, MAX_SEEDS + 1):
        if parts.mde(n_seeds, parts.n_items) <= target_mde:
            return n_seeds
    return None


def items_needed(parts: VarianceParts, target_mde: float) -> int | None:
    """The fewest test items (at the run's seeds) whose MDE is at most ``target_mde``; None when no test size
    reaches it (the seeds' spread alone is larger) or it would take more than :data:`MAX_ITEMS`."""
    if parts.mde(parts.n_seeds, MAX_ITEMS) > target_mde:
        return None
    low, high = 1, MAX_ITEMS  # the MDE falls as items grow: bisect
    while low < high:
        middle = (low + high) // 2
        if parts.mde(parts.n_seeds, middle) <= target_mde:
            high = middle
        else:
            low = middle + 1
    return low


def power_to_half(parts: VarianceParts | None, paper_effect: float, scale: str, baseline_mean: float) -> dict[str, Any]:
    """What would bring the run's MDE to half the paper's effect (``paper_effect`` on ``scale``): the seeds at its
    test size, the test items at its seeds; on the relative scale the target is taken at the run's baseline."""
    target = abs(paper_effect) / 2 * (1.0 if scale == "absolute" else abs(baseline_mean))
    result: dict[str, Any] = {"target_mde": target}
    if parts is None:
        return {**result, "available": False, "reason": "fewer than two seeds ran both methods: the seed spread is unknown"}
    low, high = parts.seed_part_range()
    optimistic, pessimistic = parts.with_seed_part(low), parts.with_seed_part(high)
    return {
        **result,
        "available": True,
        "mde_now": parts.mde(parts.n_seeds, parts.n_items),
        "n_seeds": parts.n_seeds,
        "n_items": parts.n_items,
        "seeds_needed": seeds_needed(parts, target),
        "items_needed": items_needed(parts, target),
        # the seed part is estimated from n_seeds - 1 degrees of freedom: what its 95% range would need
        "seeds_needed_range": [seeds_needed(optimistic, target), seeds_needed(pessimistic, target)],
        "items_needed_range": [items_needed(optimistic, target), items_needed(pessimistic, target)],
        "variance": {
            "seeds": parts.seeds, "items": parts.items, "residual": parts.residual, "calibration": parts.calibration,
            "seeds_range": [low, high],
        },
    }
