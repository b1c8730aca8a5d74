"""The report's opening section: the method against its baseline, with paired-bootstrap intervals over test
items and training seeds and the smallest difference the run could have detected.

Why first: it answers the question the run is for (does the method beat the baseline, and could this run
have told?) before the tables of every variant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evaluation.document import Document
from evaluation.report.formatting import and_list, direction_label, seeds_phrase
from evaluation.report.inputs import BASELINE_VARIANT, DEFAULT_BOOTSTRAP_RESAMPLES, OURS_VARIANT, VariantRun
from evaluation.statistics import MDE_FACTOR, paired_bootstrap_items_and_seeds

#: the headline bootstrap's random seed: the same runs always give the same intervals
HEADLINE_BOOTSTRAP_SEED = 0


def per_item(values: np.ndarray) -> np.ndarray:
    """One outcome per test item: n-way hits ``[redraws, n]`` averaged over the redraws (paired draws)."""
    array = np.asarray(values, dtype=np.float64)
    return array.mean(axis=0) if array.ndim == 2 else array


def _by_seed(runs: list[VariantRun], outcome: Callable[[VariantRun], np.ndarray]) -> dict[int, np.ndarray]:
    table: dict[int, np.ndarray] = {}
    for run in runs:
        if run.seed in table:
            raise ValueError(
                f"{run.variant} has two runs with seed {run.seed}; each (variant, seed) runs once"
            )
        table[run.seed] = outcome(run)
    return table


def headline_comparison(
    runs: list[VariantRun],
    method: str = OURS_VARIANT,
    baseline: str = BASELINE_VARIANT,
    n_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = HEADLINE_BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """``method`` − ``baseline`` on n-way R@1 (both directions) and neighbor preservation at the headline k.

    Each row is :func:`evaluation.statistics.paired_bootstrap_items_and_seeds` over the runs of the two
    variants: test items resampled with replacement (the same draw for both, so the comparison is paired by
    item), training seeds resampled with replacement (a seed both ran brings both its runs, so it is paired
    by seed; a seed only one ran is resampled within that variant). R@1 outcomes are per-query hits averaged
    over the distractor redraws, which are the same for every run; preservation outcomes are the per-sample
    shares at the headline k. Each row adds ``mde``: the difference the run would detect with 80% power.

    Returns ``available`` (False with ``missing`` when a variant did not run), the labels, seeds and
    ``rows`` (``key``, ``metric``, bootstrap result); a preservation row that cannot be computed (a run did
    not save per-sample preservation, or runs disagree on the headline k) is listed in ``skipped``.
    """
    grouped = {variant: [r for r in runs if r.variant == variant] for variant in (method, baseline)}
    labels = {variant: grouped[variant][0].label if grouped[variant] else variant for variant in grouped}
    result: dict[str, Any] = {
        "method": method,
        "baseline": baseline,
        "method_label": labels[method],
        "baseline_label": labels[baseline],
        "rows": [],
        "skipped": [],
    }
    missing = [variant for variant in (method, baseline) if not grouped[variant]]
    if missing:
        return {**result, "available": False, "missing": missing}
    both = grouped[method] + grouped[baseline]
    result.update(
        {
            "available": True,
            "missing": [],
            "method_seeds": sorted(r.seed for r in grouped[method]),
            "baseline_seeds": sorted(r.seed for r in grouped[baseline]),
            "paired_seeds": sorted({r.seed for r in grouped[method]} & {r.seed for r in grouped[baseline]}),
            "n_resamples": int(n_resamples),
            "bootstrap_seed": int(seed),
        }
    )
    n_way = grouped[method][0].metrics["retrieval"]["n_way"]
    candidates: list[tuple[str, str, Callable[[VariantRun], np.ndarray], dict[str, Any]]] = [
        (direction, f"{n_way}-way R@1 {direction_label(direction)}", _hits_outcome(direction), {})
        for direction in ("i2t", "t2i")
    ]
    headline_ks = {r.metrics.get("neighbor_preservation_at_k", {}).get("headline_k") for r in both}
    for modality in ("image", "text"):
        key = f"preservation_{modality}"
        if len(headline_ks) != 1 or None in headline_ks:
            reason = "runs disagree on the headline k" if len(headline_ks) > 1 else "no headline k in metrics"
            result["skipped"].append({"key": key, "reason": reason})
            continue
        if any(modality not in r.preservation for r in both):
            result["skipped"].append({"key": key, "reason": "per-sample preservation was not saved"})
            continue
        k = int(next(iter(headline_ks)))
        chance = both[0].metrics["neighbor_preservation_at_k"]["ks"][str(k)]["chance"]
        candidates.append(
            (key, f"NP {modality} @k={k}", _preservation_outcome(modality), {"k": k, "chance": chance})
        )
    for key, name, outcome, extra in candidates:
        try:
            comparison = paired_bootstrap_items_and_seeds(
                _by_seed(grouped[method], outcome), _by_seed(grouped[baseline], outcome), n_resamples, seed
            )
        except ValueError as error:
            result["skipped"].append({"key": key, "reason": str(error)})
            continue
        result["rows"].append({"key": key, "metric": name, **extra, **comparison})
    result["n_items"] = max((row["n_items"] for row in result["rows"]), default=0)
    return result


def _hits_outcome(direction: str) -> Callable[[VariantRun], np.ndarray]:
    return lambda run: per_item(run.hits[f"{direction}_hits"])


def _preservation_outcome(modality: str) -> Callable[[VariantRun], np.ndarray]:
    return lambda run: np.asarray(run.preservation[modality], dtype=np.float64)


def row_outcomes(runs: list[VariantRun], variant: str, key: str) -> dict[int, np.ndarray]:
    """The per-item outcomes a headline row ``key`` compares, of ``variant``'s runs by seed."""
    outcome = _preservation_outcome(key.removeprefix("preservation_")) if key.startswith("preservation_") else _hits_outcome(key)
    return _by_seed([run for run in runs if run.variant == variant], outcome)


def verdict(row: dict[str, Any], method_label: str, baseline_label: str) -> str:
    if row["ci_low"] > 0:
        return f"{method_label} higher"
    if row["ci_high"] < 0:
        return f"{baseline_label} higher"
    return "not resolved"


def headline_section(doc: Document, headline: dict[str, Any], title_suffix: str = "") -> None:
    """Does the method beat the baseline, and could this run have told?"""
    method, baseline = headline["method_label"], headline["baseline_label"]
    doc.heading(f"Headline details — {method} vs {baseline}{title_suffix}")
    if not headline["available"]:
        names = " and ".join(f"`{variant}`" for variant in headline["missing"])
        doc.paragraph(
            f"Not available: {names} did not run, so `{headline['method']}` − `{headline['baseline']}` "
            "cannot be computed."
        )
        return
    rows = headline["rows"]
    if not rows:
        doc.paragraph(
            "Not available: " + "; ".join(f"{s['key']}: {s['reason']}" for s in headline["skipped"])
        )
        return
    n_method, n_baseline = len(headline["method_seeds"]), len(headline["baseline_seeds"])
    paired = headline["paired_seeds"]
    detectable = and_list([f"{row['mde']:.4f} in {row['metric']}" for row in rows])
    text = (
        f"{method} − {baseline} on {headline['n_items']} test items; {seeds_phrase(headline['method_seeds'])} "
        f"of {method} and {seeds_phrase(headline['baseline_seeds'])} of {baseline}, {len(paired)} paired by "
        f"seed. 95% intervals come from a "
        f"paired bootstrap ({headline['n_resamples']} resamples) over test items and seeds: test items are "
        "resampled with replacement, the same draw for both methods; seeds are resampled with replacement, a "
        "seed both methods ran bringing both runs, a seed only one ran resampled within that method. "
        f"This run could detect differences of about {detectable} (MDE = {MDE_FACTOR} × the bootstrap "
        "standard error: 80% power at two-sided α = 0.05); smaller ones are invisible to it."
    )
    if n_method == 1 and n_baseline == 1:
        text += (
            " With one seed per method the intervals cover test-item sampling only: how much a method moves "
            "from one training seed to another is not in them."
        )
    if any(row["se"] == 0 for row in rows):
        text += " An MDE of 0 means both methods gave the same outcome on every item and seed."
    doc.paragraph(text)
    chances = {row["k"]: row["chance"] for row in rows if "chance" in row}
    doc.table(
        ["Metric", method, baseline, "Δ", "95% CI", "MDE", "p", "verdict"],
        [
            [
                row["metric"],
                f"{row['method_mean']:.4f}",
                f"{row['baseline_mean']:.4f}",
                f"{row['difference']:+.4f}",
                f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
                f"{row['mde']:.4f}",
                f"{row['p_value']:.4f}",
                verdict(row, method, baseline),
            ]
            for row in rows
        ],
        caption=(
            "Means over seeds of the mean over test items. n-way R@1: per-query hits averaged over the "
            "distractor redraws (the same draws for every run). NP: per-sample neighbor preservation at the "
            "headline k (Table 3)"
            + "".join(f"; chance at k = {k} is k/(n−1) = {chance:.4f}" for k, chance in chances.items())
            + ". 'not resolved': the interval contains 0."
        ),
    )
    if headline["skipped"]:
        doc.paragraph(
            "Not compared: " + "; ".join(f"{s['key']} ({s['reason']})" for s in headline["skipped"])
        )
