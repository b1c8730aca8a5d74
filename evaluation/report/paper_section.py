"""The report's opening section: each headline comparison against the paper's own effect (ruled out, consistent
or confirmed, on Politics and on GoodNews), whether the conclusion holds under both of a tied tuning choice's
settings, and the seeds or test items that would bring the smallest detectable difference to half the paper's
effect.

Why first: the question a reader of the field asks of a null is whether the paper's gain could still be there,
and of a tuned comparison whether it hangs on a choice the tuner could not make. A conclusion that depends on a
tie is never stated as a finding (issue 45).
"""

from __future__ import annotations

import itertools
from typing import Any

from evaluation.document import Document
from evaluation.paper_effect import (
    CONFIRMED,
    CONSISTENT,
    RULED_OUT,
    paper_readings,
    power_to_half,
    variance_parts,
)
from evaluation.report.headline import headline_comparison, row_outcomes, verdict
from evaluation.report.inputs import BASELINE_VARIANT, OURS_VARIANT, ReportInputs, VariantRun

#: the headline comparisons the paper reports (Table 1 and Table 3): method, baseline
PAPER_COMPARISONS = ((OURS_VARIANT, BASELINE_VARIANT), ("ours_trip", "trip_np_sym"))
HOLDS, DEPENDS, NO_TIE = "holds under both tied choices", "depends on the tie", "no tie"


def _choices(inputs: ReportInputs, variant: str, protocol: str) -> list[tuple[str, list[VariantRun]]]:
    """The runs of ``variant`` under each setting its choice could have been: the chosen one, and under the
    tuned protocol the runner-up too when the choice was a tie (and its runs were trained)."""
    runs = inputs.tuned_runs if protocol == "tuned" else inputs.runs
    chosen = [("chosen", [run for run in runs if run.variant == variant])]
    if protocol != "tuned" or not inputs.selections.get(variant, {}).get("tie"):
        return chosen
    runner_up = [run for run in inputs.runner_up_runs if run.variant == variant]
    return chosen + ([("runner-up", runner_up)] if runner_up else [])


def _conclusion(row: dict[str, Any], method_label: str, baseline_label: str, readings: list[dict[str, Any]]) -> tuple:
    return (verdict(row, method_label, baseline_label), *(r["reading"] for r in readings))


def compare_with_paper(inputs: ReportInputs, protocol: str) -> list[dict[str, Any]]:
    """Every row (metric) of every paper comparison under ``protocol``: our difference and interval, the
    paper's readings, the tie reading and what would give an MDE of half the paper's (smaller) effect."""
    results = []
    for method, baseline in PAPER_COMPARISONS:
        method_choices, baseline_choices = _choices(inputs, method, protocol), _choices(inputs, baseline, protocol)
        if not method_choices[0][1] or not baseline_choices[0][1]:
            continue
        combinations = []
        for (method_choice, method_runs), (baseline_choice, baseline_runs) in itertools.product(method_choices, baseline_choices):
            headline = headline_comparison(method_runs + baseline_runs, method, baseline, inputs.bootstrap_resamples)
            combinations.append(((method_choice, baseline_choice), method_runs + baseline_runs, headline))
        (_, runs, headline), tied = combinations[0], len(combinations) > 1
        n_way = int(runs[0].metrics["retrieval"]["n_way"])
        for row in headline["rows"]:
            readings = paper_readings(row, method, baseline, n_way)
            if not readings:
                continue
            labels = (headline["method_label"], headline["baseline_label"])
            under = []
            for choice, _, other in combinations:
                other_row = next((r for r in other["rows"] if r["key"] == row["key"]), None)
                if other_row is None:
                    continue
                other_readings = paper_readings(other_row, method, baseline, n_way)
                under.append(
                    {
                        "method_choice": choice[0],
                        "baseline_choice": choice[1],
                        "difference": other_row["difference"],
                        "ci_low": other_row["ci_low"],
                        "ci_high": other_row["ci_high"],
                        "conclusion": list(_conclusion(other_row, *labels, other_readings)),
                    }
                )
            same = len({tuple(entry["conclusion"]) for entry in under}) == 1
            smallest = min(readings, key=lambda r: abs(r["paper_effect"]))
            parts = variance_parts(
                row_outcomes(runs, method, row["key"]), row_outcomes(runs, baseline, row["key"]), row["se"]
            )
            results.append(
                {
                    "protocol": protocol,
                    "method": method,
                    "baseline": baseline,
                    "label": f"{labels[0]} − {labels[1]}",
                    "key": row["key"],
                    "metric": row["metric"],
                    "difference": row["difference"],
                    "ci_low": row["ci_low"],
                    "ci_high": row["ci_high"],
                    "mde": row["mde"],
                    "verdict": verdict(row, *labels),
                    "readings": readings,
                    "tie": (HOLDS if same else DEPENDS) if tied else NO_TIE,
                    "under_choices": under,
                    "power": {
                        "paper_dataset": smallest["dataset"],
                        "paper_effect": smallest["paper_effect"],
                        "scale": smallest["scale"],
                        **power_to_half(parts, smallest["paper_effect"], smallest["scale"], row["baseline_mean"]),
                    },
                }
            )
    return results


def _signed(value: float, relative: bool) -> str:
    return f"{value:+.1%}" if relative else f"{value:+.4f}"


def _interval(entry: dict[str, Any], relative: bool) -> str:
    return f"{_signed(entry['ours'] if 'ours' in entry else entry['difference'], relative)} [{_signed(entry['ci_low'], relative)}, {_signed(entry['ci_high'], relative)}]"


def _power_phrase(power: dict[str, Any]) -> str:
    if not power.get("available"):
        return f"no projection ({power.get('reason')})"
    seeds = power["seeds_needed"]
    items = power["items_needed"]
    by_seeds = f"{seeds} seed{'s' if seeds != 1 else ''} at {power['n_items']:,} test items" if seeds else f"no number of seeds at {power['n_items']:,} test items (their spread alone is larger)"
    by_items = f"{items:,} test item{'s' if items != 1 else ''} at {power['n_seeds']} seeds" if items else f"no test size at {power['n_seeds']} seeds (the seeds' spread alone is larger)"
    return f"an MDE of {power['target_mde']:.4f} (half the paper's {power['paper_dataset']} effect) needs {by_seeds}, or {by_items}"


def comparison_sentence(entry: dict[str, Any]) -> str:
    """One sentence: our difference, the paper's per dataset with its reading, the tie reading, the power."""
    table = entry["readings"][0]["table"]
    relative = entry["readings"][0]["scale"] == "relative"
    ours = f"{entry['difference']:+.4f} [{entry['ci_low']:+.4f}, {entry['ci_high']:+.4f}] (MDE {entry['mde']:.4f}, {entry['verdict']})"
    if relative:
        first = entry["readings"][0]
        ours += f", {_interval(first, True)} relative to the baseline"
    papers = "; ".join(
        f"{reading['dataset']} {_signed(reading['paper_effect'], relative)} — **{reading['reading']}**" for reading in entry["readings"]
    )
    tie = {HOLDS: "This holds under both tied choices. ", DEPENDS: "**This depends on the tie**: it is not a finding. ", NO_TIE: ""}[entry["tie"]]
    power = _power_phrase(entry["power"])
    return (
        f"**{entry['label']}, {entry['metric']}**: {ours}. The paper's {'relative ' if relative else ''}gain "
        f"({table}): {papers}. {tie}{power[0].upper()}{power[1:]}."
    )


def tally(entries: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per paper dataset, how many comparisons rule its effect out, are consistent with it or confirm it (the
    ones that depend on a tie counted apart)."""
    counts: dict[str, dict[str, int]] = {}
    for entry in entries:
        for reading in entry["readings"]:
            bucket = counts.setdefault(reading["dataset"], {RULED_OUT: 0, CONSISTENT: 0, CONFIRMED: 0, DEPENDS: 0})
            bucket[DEPENDS if entry["tie"] == DEPENDS else reading["reading"]] += 1
    return counts


def paper_effect_section(doc: Document, by_protocol: dict[str, list[dict[str, Any]]], fair: str) -> None:
    """The opening section (``fair``: the protocol to read, in sentences; the others as a table)."""
    doc.heading("Against the paper's own effect")
    entries = by_protocol.get(fair, [])
    if not entries:
        doc.paragraph(
            "Not available: the run did not train both methods of a comparison the paper reports (Ours and "
            "Ang+NP+Sym, Ours (Trip) and Trip+NP+Sym)."
        )
        return
    counts = tally(entries)
    summary = "; ".join(
        f"{dataset}: {c[RULED_OUT]} ruled out, {c[CONSISTENT]} consistent, {c[CONFIRMED]} confirmed"
        + (f", {c[DEPENDS]} depending on a tie" if c[DEPENDS] else "")
        for dataset, c in counts.items()
    )
    doc.paragraph(
        f"Each comparison of Thomas & Kovashka's Table 1 (5-way R@1) and Table 3 (neighbor preservation) under "
        f"the {fair} protocol, read against the paper's difference on its non-literal datasets: **ruled out** — "
        "the paper's value lies above our 95% interval; **consistent** — inside it; **confirmed** — our interval "
        "lies at or above it. Table 1 differences are compared as they are (the same 5-way task); Table 3's as "
        "relative gains, since the paper's k = 200 of 24.6k–46k test items is not this run's k. A conclusion "
        f"that changes with a tied tuning choice is marked and is not a finding. Of {len(entries)} comparisons — "
        f"{summary}."
    )
    for entry in entries:
        doc.paragraph(comparison_sentence(entry))
    rows = []
    for protocol, protocol_entries in by_protocol.items():
        for entry in protocol_entries:
            relative = entry["readings"][0]["scale"] == "relative"
            rows.append(
                [
                    protocol,
                    entry["label"],
                    entry["metric"],
                    f"{entry['difference']:+.4f} [{entry['ci_low']:+.4f}, {entry['ci_high']:+.4f}]",
                    *[f"{_signed(r['paper_effect'], relative)}: {r['reading']}" for r in entry["readings"]],
                    entry["tie"],
                ]
            )
    datasets = [reading["dataset"] for reading in entries[0]["readings"]]
    doc.table(
        ["Protocol", "Comparison", "Metric", "Δ [95% CI]", *[f"paper, {d}" for d in datasets], "tie"],
        rows,
        caption="The paper's difference on each dataset (relative gains for Table 3) and whether our interval "
        "rules it out, is consistent with it or confirms it; 'tie': whether a tuned choice was a tie and, if so, "
        "whether the conclusion is the same with the runner-up's runs.",
    )
