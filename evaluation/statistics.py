"""Summaries and significance: mean ± sd over seeds, the paired bootstrap over test queries, the paired
bootstrap over test items *and* training seeds with the run's minimum detectable difference, and the
per-batch COCOS summary.

Why :func:`paired_bootstrap_items_and_seeds` next to :func:`paired_bootstrap`: the latter resamples test
queries of per-query outcomes already averaged over seeds, so its interval is blind to how much a method
moves from one training seed to the next, and two methods whose difference flips sign between seeds look
settled. The headline comparison of the report (the method against its baseline) resamples both sources of
noise, and states the smallest difference the run could have detected, so a null result reads as "too
small for this run" rather than "no effect".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from evaluation.embeddings import check_seed, chunk_rows

#: z_{1 - alpha/2} + z_{power} = 1.96 + 0.84: a true difference of 2.8 standard errors is found by a
#: two-sided test at alpha = 0.05 with 80% power (normal approximation)
MDE_FACTOR = 2.8


def two_sided_p(z: float) -> float:
    """The two-sided normal p-value of a z statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i + 1), made
    non-decreasing in that order and capped at 1. A reading whose adjusted p is below alpha is rejected with the
    family-wise error rate of the m readings held at alpha (Holm 1979)."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * float(p_values[index])))
        adjusted[index] = running
    return adjusted


def _outcome_table(runs: Mapping[int, np.ndarray], name: str) -> dict[int, np.ndarray]:
    if not runs:
        raise ValueError(f"{name} has no run: pass at least one seed's per-item outcomes")
    table = {}
    for seed, values in runs.items():
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1 or array.size == 0:
            raise ValueError(
                f"{name} seed {seed}: outcomes must be 1-D with one value per test item, got shape "
                f"{array.shape} (for n-way hits [redraws, n_items], average over axis 0 first)"
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} seed {seed}: outcomes contain NaN or inf")
        table[int(seed)] = array
    return table


def paired_bootstrap_items_and_seeds(
    method: Mapping[int, np.ndarray],
    baseline: Mapping[int, np.ndarray],
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """Bootstrap of ``mean(method) - mean(baseline)`` resampling test items and training seeds.

    ``method`` and ``baseline`` map a training seed to that run's per-item outcomes (0/1 hits averaged over
    distractor redraws, or per-sample neighbor preservation), one value per test item, the items in the
    same order in every run. A method's score is the mean over its seeds of the mean over items.

    Resampling scheme, one bootstrap replicate:

    * test items: n indices drawn with replacement from the n items; the *same* draw is applied to every
      run of both methods, so item difficulty cancels in the difference (pairing by item);
    * seeds that both methods ran ("paired seeds"): drawn with replacement from them, and a drawn seed
      brings both methods' runs of that seed (pairing by seed: a seed that is easy for both cancels);
    * seeds only one method ran: drawn with replacement among that method's unpaired seeds, independently;
    * the replicate's difference is (mean over the method's drawn runs) - (mean over the baseline's).

    With one seed per method the seed draw is fixed and the interval covers test-item sampling only. With
    several, the seed means that the seed draw picks from each carry their own item noise, so item noise is
    counted a little twice and the interval errs on the wide side (as two-level bootstraps do); it does not
    understate the seed-to-seed spread.

    Returns ``difference`` (observed), ``method_mean`` / ``baseline_mean``, ``ci_low`` / ``ci_high`` (95%
    percentile interval), ``se`` (standard deviation of the replicates), ``mde`` (``MDE_FACTOR * se``: the
    difference this design would detect with 80% power at two-sided alpha = 0.05), ``p_value`` (two-sided,
    the replicates shifted to the null as in :func:`paired_bootstrap`), ``n_items``,
    ``method_seeds``, ``baseline_seeds``, ``paired_seeds`` and ``n_resamples``.
    """
    method_runs = _outcome_table(method, "method")
    baseline_runs = _outcome_table(baseline, "baseline")
    sizes = {array.size for array in (*method_runs.values(), *baseline_runs.values())}
    if len(sizes) != 1:
        raise ValueError(
            f"every run must score the same test items, got item counts {sorted(sizes)}; evaluate both "
            f"methods on the same test split"
        )
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 2:
        raise ValueError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    check_seed(seed)
    n_items = sizes.pop()
    paired = sorted(set(method_runs) & set(baseline_runs))
    method_only = sorted(set(method_runs) - set(paired))
    baseline_only = sorted(set(baseline_runs) - set(paired))

    # one row per run: the method's runs (paired seeds, then its own), then the baseline's (likewise)
    method_seeds, baseline_seeds = paired + method_only, paired + baseline_only
    outcomes = np.stack([method_runs[s] for s in method_seeds] + [baseline_runs[s] for s in baseline_seeds])
    first_baseline_row = len(method_seeds)

    rng = np.random.default_rng(int(seed))

    def draw(count: int) -> np.ndarray:
        """Per replicate, ``count`` positions drawn with replacement from ``range(count)``."""
        return rng.integers(0, max(count, 1), size=(n_resamples, count))

    paired_draw, method_draw, baseline_draw = (
        draw(len(paired)),
        draw(len(method_only)),
        draw(len(baseline_only)),
    )
    # rows of the drawn runs: a drawn paired seed j is row j of the method and row first_baseline_row + j
    method_pick = np.concatenate([paired_draw, len(paired) + method_draw], axis=1)
    baseline_pick = np.concatenate(
        [first_baseline_row + paired_draw, first_baseline_row + len(paired) + baseline_draw], axis=1
    )

    replicates = np.empty(n_resamples, dtype=np.float64)
    for block in chunk_rows(n_resamples, 2 * n_items):
        size = block.stop - block.start
        picks = rng.integers(0, n_items, size=(size, n_items))
        offsets = np.arange(size)[:, None] * n_items
        counts = np.bincount((picks + offsets).reshape(-1), minlength=size * n_items).reshape(size, n_items)
        run_means = counts @ outcomes.T / n_items  # [size, runs]
        method_mean = np.take_along_axis(run_means, method_pick[block], axis=1).mean(axis=1)
        baseline_mean = np.take_along_axis(run_means, baseline_pick[block], axis=1).mean(axis=1)
        replicates[block] = method_mean - baseline_mean

    item_means = outcomes.mean(axis=1)
    method_mean = float(item_means[:first_baseline_row].mean())
    baseline_mean = float(item_means[first_baseline_row:].mean())
    observed = method_mean - baseline_mean
    se = float(np.std(replicates, ddof=1))
    # a tolerance keeps floating-point noise in the replicates from deciding exact ties
    extreme = np.abs(replicates - observed) >= abs(observed) - 1e-12
    return {
        "difference": observed,
        "method_mean": method_mean,
        "baseline_mean": baseline_mean,
        "ci_low": float(np.percentile(replicates, 2.5)),
        "ci_high": float(np.percentile(replicates, 97.5)),
        "se": se,
        "mde": MDE_FACTOR * se,
        "p_value": float((1 + extreme.sum()) / (1 + n_resamples)),
        "n_items": int(n_items),
        "method_seeds": sorted(method_runs),
        "baseline_seeds": sorted(baseline_runs),
        "paired_seeds": paired,
        "n_resamples": int(n_resamples),
    }


def mean_std(values: Sequence[float] | np.ndarray) -> dict:
    """Mean and sample standard deviation (ddof=1) of a metric across seeds / redraws.

    A single value has no spread to estimate; its ``std`` is reported as 0.0 (``n`` says it was one).
    """
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise ValueError("mean_std needs at least one value")
    std = float(np.std(array, ddof=1)) if array.size > 1 else 0.0
    return {"mean": float(np.mean(array)), "std": std, "n": int(array.size)}


def paired_bootstrap(hits_a: np.ndarray, hits_b: np.ndarray, n_resamples: int = 10000, seed: int = 0) -> dict:
    """Paired bootstrap over queries for the difference of two methods' mean per-query outcome.

    ``hits_a[q]`` and ``hits_b[q]`` are the outcomes (0/1 hits or any score) of methods A and B on the
    same query q. Queries are resampled with replacement ``n_resamples`` times, keeping pairs together.
    Returns ``mean_difference`` (A - B), ``ci_low`` / ``ci_high`` (95% percentile interval),
    ``p_value`` (two-sided, from the bootstrap distribution shifted to the null of no difference:
    (1 + #{|d* - d| >= |d|}) / (1 + n_resamples)), ``n_queries`` and ``n_resamples``.
    """
    a = np.asarray(hits_a, dtype=np.float64)
    b = np.asarray(hits_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(
            f"hits_a and hits_b must be 1-D with one outcome per query, same length; got {a.shape} and "
            f"{b.shape} (for n-way hits [redraws, n_queries], average over axis 0 first)"
        )
    if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
        raise ValueError("hits contain NaN or inf")
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    check_seed(seed)
    difference = a - b
    observed = float(difference.mean())
    rng = np.random.default_rng(int(seed))
    resampled = np.empty(n_resamples, dtype=np.float64)
    for block in chunk_rows(n_resamples, difference.size):
        picks = rng.integers(0, difference.size, size=(block.stop - block.start, difference.size))
        resampled[block] = difference[picks].mean(axis=1)
    # a tolerance keeps floating-point noise in resampled means from deciding exact ties
    extreme = np.abs(resampled - observed) >= abs(observed) - 1e-12
    return {
        "mean_difference": observed,
        "ci_low": float(np.percentile(resampled, 2.5)),
        "ci_high": float(np.percentile(resampled, 97.5)),
        "p_value": float((1 + extreme.sum()) / (1 + n_resamples)),
        "n_queries": int(difference.size),
        "n_resamples": int(n_resamples),
    }


def cocos_summary(diagnostics: Sequence[Mapping[str, np.ndarray]]) -> dict:
    """Summarise per-batch COCOS diagnostics (Bleeker & de Rijke 2022, Sec. 4-5, Tables 2-4).

    ``diagnostics`` holds one dict per batch for one loss, mapping a name (e.g.
    ``"contributing_negatives"``: per-query counts C^q; ``"no_gradient"``: per-query 0/1) to a per-query
    array (tensors on CPU work too). For every key, each batch gives its per-query mean (for a 0/1 key,
    the share of queries) and its sum (C^B, or C^0 for ``no_gradient``); the result reports, per key,
    the mean and sample std of both over batches (``per_query_mean`` / ``per_query_std``,
    ``per_batch_sum_mean`` / ``per_batch_sum_std``) and ``n_batches``.
    """
    if len(diagnostics) == 0:
        raise ValueError("cocos_summary needs at least one batch of diagnostics")
    keys = set(diagnostics[0])
    for index, batch in enumerate(diagnostics):
        if set(batch) != keys:
            raise ValueError(
                f"batch {index} has keys {sorted(batch)} but batch 0 has {sorted(keys)}; every batch of one "
                f"loss must report the same diagnostics"
            )
    summary: dict = {}
    for key in sorted(keys):
        values = [np.asarray(batch[key], dtype=np.float64).reshape(-1) for batch in diagnostics]
        if any(v.size == 0 for v in values):
            raise ValueError(f"diagnostic {key!r} is empty in some batch")
        batch_means = mean_std([v.mean() for v in values])
        batch_sums = mean_std([v.sum() for v in values])
        summary[key] = {
            "per_query_mean": batch_means["mean"],
            "per_query_std": batch_means["std"],
            "per_batch_sum_mean": batch_sums["mean"],
            "per_batch_sum_std": batch_sums["std"],
            "n_batches": len(values),
        }
    return summary
