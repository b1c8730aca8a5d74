"""The report's opening section: each headline comparison against the paper's own effect (where the paper's
Politics and GoodNews point estimates lie against this run's interval, raw and Holm-adjusted over every reading
of the section, "at the line" when a bound is within a tenth of the MDE of them), whether the conclusion holds
under both of a tied tuning choice's settings, and the seeds or test items that would bring the smallest
detectable difference to half the paper's effect, with the range its seed-spread estimate allows.

Why first: the question a reader of the field asks of a null is whether the paper's gain could still be there,
and of a tuned comparison whether it hangs on a choice the tuner could not make. A conclusion that depends on a
tie is never stated as a finding (issue 45); a tie whose other side was not trained reads "tie not tested",
never "no tie" (issue 50); the paper's datasets were not run here, so a reading says where the paper's number
lies on this data, not what holds on Politics or GoodNews.
"""

from __future__ import annotations

import itertools
from typing import Any

from evaluation.document import Document
from evaluation.paper_effect import (
    AT_THE_LINE,
    AT_THE_LINE_SHARE,
    CONFIRMED,
    CONSISTENT,
    FAMILY_ALPHA,
    RULED_OUT,
    adjust_readings,
    paper_readings,
    power_to_half,
    variance_parts,
)
from evaluation.report.headline import headline_comparison, row_outcomes, verdict
from evaluation.report.inputs import BASELINE_VARIANT, OURS_VARIANT, ReportInputs, VariantRun

#: the headline comparisons the paper reports (Table 1 and Table 3): method, baseline
PAPER_COMPARISONS = ((OURS_VARIANT, BASELINE_VARIANT), ("ours_trip", "trip_np_sym"))
HOLDS, DEPENDS = "holds under both tied choices", "depends on the tie"
#: no finished trial, nor any trial stopped at a rung, was tied with the choice
NO_TIE = "no tie among finished trials or those stopped at a rung"
#: a tie whose other side was never trained at the report's seeds: nothing says whether the conclusion holds
NOT_TESTED = "tie not tested"
#: the shared protocol: every method at one setting, no choice to tie
NOT_TUNED = "no tuned choice"


def _choices(inputs: ReportInputs, variant: str, protocol: str) -> list[tuple[str, list[VariantRun]]]:
    """The runs of ``variant`` under each setting its choice could have been: the chosen one, and under the
    tuned protocol the runner-up too when the choice was a tie (and its runs were trained)."""
    runs = inputs.tuned_runs if protocol == "tuned" else inputs.runs
    chosen = [("chosen", [run for run in runs if run.variant == variant])]
    if protocol != "tuned" or not inputs.selections.get(variant, {}).get("tie"):
        return chosen
    runner_up = [run for run in inputs.runner_up_runs if run.variant == variant]
    return chosen + ([("runner-up", runner_up)] if runner_up else [])


def untested_ties(inputs: ReportInputs, variant: str) -> list[str]:
    """The ties of ``variant``'s tuned choice that no run at the report's seeds tests: a finished runner-up tied
    with the choice whose runs are missing, and every trial stopped at a rung that was not resolved below the
    choice there (``selection.json``'s ``rung_ties``)."""
    selection = inputs.selections.get(variant, {})
    untested = []
    if selection.get("tie") and not any(run.variant == variant for run in inputs.runner_up_runs):
        untested.append(f"its runner-up (trial {selection.get('runner_up')}) was not trained at the report's seeds")
    for trial in selection.get("rung_ties", []):
        at = selection.get("rung_comparisons", {}).get(str(trial), {})
        untested.append(f"trial {trial}, stopped at the rung of {at.get('epochs', '?')} epochs, was not resolved below the choice there")
    return untested


def tie_reading(inputs: ReportInputs, protocol: str, method: str, baseline: str, tested: bool, same: bool) -> tuple[str, list[str]]:
    """The tie reading of one comparison: whether a trained tie changes its conclusion (``tested``: the runner-up's
    runs were read; ``same``: every combination concluded the same), and the ties nothing tested."""
    if protocol != "tuned":
        return NOT_TUNED, []
    untested = [f"{variant}: {why}" for variant in (method, baseline) for why in untested_ties(inputs, variant)]
    if tested and not same:
        return DEPENDS, untested
    if untested:
        return NOT_TESTED, untested
    return (HOLDS if tested else NO_TIE), []


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
            tie, untested = tie_reading(inputs, protocol, method, baseline, tied, same)
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
                    "tie": tie,
                    "untested_ties": untested,
                    "under_choices": under,
                    "power": {
                        "paper_dataset": smallest["dataset"],
                        "paper_effect": smallest["paper_effect"],
                        "scale": smallest["scale"],
                        **power_to_half(parts, smallest["paper_effect"], smallest["scale"], row["baseline_mean"]),
                    },
                }
            )
    adjust_readings(results)
    return results


def _signed(value: float, relative: bool) -> str:
    return f"{value:+.1%}" if relative else f"{value:+.4f}"


def _interval(entry: dict[str, Any], relative: bool) -> str:
    return f"{_signed(entry['ours'] if 'ours' in entry else entry['difference'], relative)} [{_signed(entry['ci_low'], relative)}, {_signed(entry['ci_high'], relative)}]"


def _seed_range_phrase(low: int | None, high: int | None) -> str:
    """The seeds needed across the seed spread's 95% range; None: no number of seeds reaches the target."""
    if low is None and high is None:
        return "and at either end of its 95% range no number of seeds would reach it"
    if high is None:
        return f"whose 95% range puts the seeds needed between {low:,} and no number of seeds"
    return f"whose 95% range puts the seeds needed between {low:,} and {high:,}"


def _power_phrase(power: dict[str, Any]) -> str:
    if not power.get("available"):
        return f"no projection ({power.get('reason')})"
    seeds = power["seeds_needed"]
    items = power["items_needed"]
    by_seeds = f"{seeds} seed{'s' if seeds != 1 else ''} at {power['n_items']:,} test items" if seeds else f"no number of seeds at {power['n_items']:,} test items (their spread alone is larger)"
    by_items = f"{items:,} test item{'s' if items != 1 else ''} at {power['n_seeds']} seeds" if items else f"no test size at {power['n_seeds']} seeds (the seeds' spread alone is larger)"
    low, high = power.get("seeds_needed_range", [seeds, seeds])
    spread = (
        f"; the projection rests on {power['n_seeds']} seeds ({power['n_seeds'] - 1} degree{'s' if power['n_seeds'] != 2 else ''} "
        f"of freedom for the seed spread), {_seed_range_phrase(low, high)} (normal-theory MDE of 2.8 standard errors)"
    )
    return f"an MDE of {power['target_mde']:.4f} (half the paper's {power['paper_dataset']} effect) needs {by_seeds}, or {by_items}{spread}"


def reading_phrase(reading: dict[str, Any], relative: bool) -> str:
    """Where the paper's point estimate lies against this run's interval, on this data, raw and after Holm."""
    where = {
        RULED_OUT: "lies above our interval",
        CONSISTENT: "lies inside our interval",
        CONFIRMED: "lies at or below our interval",
    }.get(reading["reading"], reading["reading"])
    line = f", {AT_THE_LINE}" if reading.get("at_the_line") else ""
    holm = f"; Holm-adjusted: {reading['holm_reading']}" if "holm_reading" in reading else ""
    return f"the paper's {reading['dataset']} point estimate ({_signed(reading['paper_effect'], relative)}) **{where}**{line}{holm}"


def comparison_sentence(entry: dict[str, Any]) -> str:
    """One sentence: our difference, where the paper's point estimates lie against it, the tie reading, the power."""
    table = entry["readings"][0]["table"]
    relative = entry["readings"][0]["scale"] == "relative"
    ours = f"{entry['difference']:+.4f} [{entry['ci_low']:+.4f}, {entry['ci_high']:+.4f}] (MDE {entry['mde']:.4f}, {entry['verdict']})"
    if relative:
        first = entry["readings"][0]
        ours += f", {_interval(first, True)} relative to the baseline"
    papers = "; ".join(reading_phrase(reading, relative) for reading in entry["readings"])
    tie = {
        HOLDS: "This holds under both tied choices. ",
        DEPENDS: "**This depends on the tie**: it is not a finding. ",
        NOT_TESTED: "**A tie was not tested** (" + "; ".join(entry.get("untested_ties", [])) + "): this is not a finding. ",
    }.get(entry["tie"], "")
    power = _power_phrase(entry["power"])
    return (
        f"**{entry['label']}, {entry['metric']}**: {ours}. On this data, against the paper's {'relative ' if relative else ''}gain "
        f"({table}): {papers}. {tie}{power[0].upper()}{power[1:]}."
    )


def tally(entries: list[dict[str, Any]], key: str = "reading") -> dict[str, dict[str, int]]:
    """Per paper dataset, how many readings put the paper's point estimate above, inside or at or below our
    interval (``key``: the raw reading or ``holm_reading``; those that depend on a tie or rest on an untested one
    counted apart)."""
    counts: dict[str, dict[str, int]] = {}
    for entry in entries:
        for reading in entry["readings"]:
            bucket = counts.setdefault(reading["dataset"], {RULED_OUT: 0, CONSISTENT: 0, CONFIRMED: 0, DEPENDS: 0})
            unsettled = entry["tie"] in (DEPENDS, NOT_TESTED)
            bucket[DEPENDS if unsettled else reading.get(key, reading["reading"])] += 1
    return counts


def _tally_text(counts: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{dataset}: {c[RULED_OUT]} {RULED_OUT}, {c[CONSISTENT]} {CONSISTENT}, {c[CONFIRMED]} {CONFIRMED}"
        + (f", {c[DEPENDS]} on a tie (untested or changing the reading)" if c[DEPENDS] else "")
        for dataset, c in counts.items()
    )


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
    n_readings = sum(len(entry["readings"]) for entry in entries)
    doc.paragraph(
        f"Each comparison of Thomas & Kovashka's Table 1 (5-way R@1) and Table 3 (neighbor preservation) under "
        f"the {fair} protocol, read against the paper's difference on its non-literal datasets. The paper's datasets "
        "were not run here: each reading says where the paper's point estimate lies against **our** 95% interval "
        "**on this data** — above it, inside it, or at or below it — and \"at the line\" when our nearest bound is "
        f"within {AT_THE_LINE_SHARE:.0%} of the MDE of it. Table 1 differences are compared as they are (the same "
        "5-way task); Table 3's as relative gains, since the paper's k = 200 of 24.6k–46k test items is not this "
        "run's k. A conclusion that changes with a tied tuning choice, or rests on a tie no run tested, is marked "
        f"and is not a finding. This section makes **{n_readings} readings** of {len(entries)} comparisons; besides "
        f"each raw reading it gives Holm's adjustment over all {n_readings} (family-wise error {FAMILY_ALPHA:.0%}; "
        "normal tests of \"our difference equals the paper's\" on the bootstrap standard error). Raw — "
        f"{_tally_text(tally(entries))}. Holm-adjusted — {_tally_text(tally(entries, 'holm_reading'))}."
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
                    *[
                        f"{_signed(r['paper_effect'], relative)}: {r['reading']}{' (' + AT_THE_LINE + ')' if r.get('at_the_line') else ''}; "
                        f"Holm: {r.get('holm_reading', '–')}"
                        for r in entry["readings"]
                    ],
                    entry["tie"],
                ]
            )
    datasets = [reading["dataset"] for reading in entries[0]["readings"]]
    doc.table(
        ["Protocol", "Comparison", "Metric", "Δ [95% CI]", *[f"paper, {d}" for d in datasets], "tie"],
        rows,
        caption="The paper's difference on each of its datasets (relative gains for Table 3) and where it lies "
        "against our interval on this data, raw and Holm-adjusted within each protocol; 'tie': whether a tuned "
        "choice was a tie and, if so, whether the conclusion is the same with the runner-up's runs, or whether a "
        "tie was not tested.",
    )
