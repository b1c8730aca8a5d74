"""The report's opening section: the headline Ours − Ang+NP+Sym under each protocol that ran, side by side
(the tuned one first), and under the tuned protocol Ours against the strongest baseline by validation score
and Ours (Trip) against Trip+NP+Sym; then each tuned variant's choice against its runner-up, its trials
(table and figure), and every run the epoch cap stopped while it was still improving.

Why the protocols side by side: a method's advantage at one shared schedule may be the baseline's
disadvantage at that schedule. The tuned protocol gives every variant the same trial budget on validation
data (Musgrave et al., ECCV 2020); only a difference that survives it is the method's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.document import Document
from evaluation.labels import point_label
from evaluation.plots import plot_tuning_sensitivity
from evaluation.report.headline import headline_comparison, headline_section
from evaluation.report.inputs import FIGURES_DIR, OURS_VARIANT, ReportInputs, VariantRun
from evaluation.report.retrieval_tables import N_WAY_COLUMNS, n_way_rows

#: the baselines a tuned comparison may call the strongest (by validation score at the chosen trial)
BASELINE_CANDIDATES = ("ang_np_sym", "trip_np_sym")
TRIPLET_PAIR = ("ours_trip", "trip_np_sym")
SENSITIVITY_PNG = "tuning_sensitivity.png"
FAIRNESS = (
    "Read the tuned protocol: every variant had the same budget of trials on the validation split, each "
    "trial scored over several seeds by a metric that can tell the settings apart, and each method's own "
    "knobs (its angle or margin, its within-modality weights) were searched; it is reported at its own best "
    "setting, so no method gains from a schedule chosen for another. The shared protocol runs every variant "
    "at the profile's one setting (comparable with earlier releases)."
)
SHARED_ONLY = (
    "Only the shared protocol ran: every variant at the profile's one setting, so a difference may be how well "
    "that setting suits each method; `--protocol both` adds the tuned comparison."
)


def chosen_score(selection: dict[str, Any]) -> float:
    return selection["trials"][selection["chosen"]]["score"]


def strongest_baseline(selections: dict[str, dict[str, Any]]) -> str | None:
    """The tuned baseline with the best validation score at its chosen trial (None: none was tuned)."""
    scored = {name: selection for name, selection in selections.items() if name in BASELINE_CANDIDATES}
    if not scored:
        return None
    sign = {name: 1.0 if s["metric"]["higher_is_better"] else -1.0 for name, s in scored.items()}
    return max(scored, key=lambda name: (sign[name] * chosen_score(scored[name]), -BASELINE_CANDIDATES.index(name)))


def protocol_comparisons(inputs: ReportInputs) -> dict[str, Any]:
    """Every comparison of the opening section (the report.json ``protocols`` entry); the tuned headline
    first when it ran (the one to read)."""
    result: dict[str, Any] = {"ran": list(inputs.protocols), "fair": "tuned" if "tuned" in inputs.protocols else "shared"}
    headlines = {}
    if "tuned" in inputs.protocols:
        headlines["tuned"] = _compare(inputs, inputs.tuned_runs, inputs.method, inputs.baseline)
        strongest = strongest_baseline(inputs.selections)
        result["strongest_baseline"] = strongest
        result["tuned_comparisons"] = {}
        if strongest is not None and strongest != inputs.baseline:  # else it is the tuned headline itself
            result["tuned_comparisons"]["ours_vs_strongest"] = _compare(inputs, inputs.tuned_runs, OURS_VARIANT, strongest)
        result["tuned_comparisons"]["ours_trip_vs_trip"] = _compare(inputs, inputs.tuned_runs, *TRIPLET_PAIR)
        result["selections"] = inputs.selections
    if "shared" in inputs.protocols:
        headlines["shared"] = _compare(inputs, inputs.runs, inputs.method, inputs.baseline)
    result["headlines"] = headlines
    result["capped_runs"] = capped_runs(inputs)
    return result


def _compare(inputs: ReportInputs, runs: list[VariantRun], method: str, baseline: str) -> dict[str, Any]:
    return headline_comparison(runs, method, baseline, inputs.bootstrap_resamples)


def capped_runs(inputs: ReportInputs) -> list[dict[str, Any]]:
    """Every run whose best epoch was its last allowed one: the shared protocol's report runs (flagged, kept as
    they are), and under the tuned protocol the report runs and finished trials still capped after their
    continuation to the extended cap."""
    found = []
    for protocol, runs in (("shared", inputs.runs), ("tuned", inputs.tuned_runs)):
        for run in runs:
            best, cap = run.training.get("best_epoch"), run.training.get("max_epochs")
            if best is not None and cap is not None and best >= cap:
                found.append({"protocol": protocol, "label": run.label, "seed": run.seed, "best_epoch": best, "cap": cap})
    for selection in inputs.selections.values():
        for trial in selection["trials"]:
            for seed, record in trial.get("seeds", {}).items():
                if record["capped"]:
                    found.append(
                        {
                            "protocol": "tuning trial",
                            "label": selection["label"],
                            "seed": int(seed),
                            "settings": trial["point"],
                            "best_epoch": record["best_epoch"],
                            "cap": record["max_epochs"],
                        }
                    )
    return found


def _cell(headline: dict[str, Any], key: str) -> str:
    row = next((row for row in headline.get("rows", []) if row["key"] == key), None)
    if row is None:
        return "–"
    return f"{row['difference']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}], MDE {row['mde']:.4f}"


def protocols_section(doc: Document, inputs: ReportInputs, comparisons: dict[str, Any], figure_dir: Path | None) -> dict[str, Any]:
    """The opening section; returns the figure's entry for report.json (empty when not drawn)."""
    headlines = comparisons["headlines"]
    first = next(iter(headlines.values()))
    doc.heading(f"Headline — {first['method_label']} vs {first['baseline_label']} under each protocol")
    if not any(headline["available"] for headline in headlines.values()):
        names = " and ".join(f"`{variant}`" for variant in first["missing"])
        doc.paragraph(
            f"Not available: {names} did not run, so `{first['method']}` − `{first['baseline']}` cannot be computed."
        )
    else:
        doc.paragraph(FAIRNESS if "tuned" in headlines else SHARED_ONLY)
        keys = [row["key"] for row in first.get("rows", [])] or ["i2t", "t2i"]
        metrics = {row["key"]: row["metric"] for headline in headlines.values() for row in headline.get("rows", [])}
        doc.table(
            ["Metric", *[f"Δ {protocol} [95% CI]" for protocol in headlines]],
            [[metrics.get(key, key), *[_cell(h, key) for h in headlines.values()]] for key in keys],
            caption="Δ = method − baseline, paired bootstrap over test items and seeds (details below); MDE: the "
            "smallest difference the run could detect (80% power). An interval containing 0 is not resolved.",
        )
    figure: dict[str, Any] = {}
    if "tuned" in headlines:
        _tuned_comparisons(doc, comparisons)
        figure = _tuning_section(doc, inputs.selections, figure_dir)
    _capped_section(doc, comparisons["capped_runs"])
    for protocol, headline in headlines.items():
        if headline["available"]:
            headline_section(doc, headline, title_suffix=f" ({protocol} protocol)")
    return figure


def _tuned_comparisons(doc: Document, comparisons: dict[str, Any]) -> None:
    tuned = comparisons["tuned_comparisons"]
    rows = []
    for headline in tuned.values():
        if not headline.get("available"):
            continue
        for row in headline["rows"]:
            rows.append([f"{headline['method_label']} − {headline['baseline_label']}", row["metric"], _cell(headline, row["key"])])
    strongest = comparisons.get("strongest_baseline")
    labels = {name: selection["label"] for name, selection in comparisons["selections"].items()}
    which = (
        f"{labels[strongest]}, " + ("the headline's own baseline" if "ours_vs_strongest" not in tuned else "compared below")
        if strongest
        else "none tuned"
    )
    doc.paragraph(
        "Under the tuned protocol the paper's claim is tested against the strongest baseline by validation "
        f"score ({which}), and Ours (Trip) against Trip+NP+Sym."
    )
    if rows:
        doc.table(["Comparison (tuned)", "Metric", "Δ [95% CI]"], rows)


def _score(value: float | None, higher_is_better: bool) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if higher_is_better or abs(value) < 10 else f"{value:.1f}"


def _seed_scores(scores: dict[str, float], higher_is_better: bool) -> str:
    return " / ".join(_score(value, higher_is_better) for value in scores.values())


def _status(selection: dict[str, Any], index: int) -> str:
    trial = selection["trials"][index]
    if index == selection["chosen"]:
        return "**chosen**"
    if index == selection.get("runner_up"):
        return "runner-up"
    if trial.get("stopped_at_rung") is not None:
        epochs = trial["rungs"][trial["stopped_at_rung"]]["epochs"]
        return f"stopped at rung {trial['stopped_at_rung']} ({epochs} epoch{'s' if epochs != 1 else ''})"
    return "finished"


def choice_sentence(selection: dict[str, Any]) -> str:
    """How the choice was made and how sure it is."""
    chosen = point_label(selection["trials"][selection["chosen"]]["point"])
    if selection.get("runner_up") is None:
        return f"{selection['label']}: {chosen} (the only finished trial)."
    runner = point_label(selection["trials"][selection["runner_up"]]["point"])
    comparison = selection.get("comparison")
    if comparison is None:
        return f"{selection['label']}: {chosen} over {runner} ({selection['decided_by']})."
    interval = f"{comparison['difference']:+.4f} [{comparison['ci_low']:+.4f}, {comparison['ci_high']:+.4f}]"
    if selection["tie"]:
        return (
            f"{selection['label']}: **a tie** between {chosen} and {runner} (Δ {interval} on validation, not "
            "resolved); the tie rule kept the first, the higher mean."
        )
    return (
        f"{selection['label']}: {chosen}, ahead of the runner-up {runner} by {interval} on validation (resolved "
        "among the finished trials; a trial stopped at a rung is not in the comparison)."
    )


def _tuning_section(doc: Document, selections: dict[str, dict[str, Any]], figure_dir: Path | None) -> dict[str, Any]:
    doc.heading("Tuning on the validation split")
    any_selection = next(iter(selections.values()), None)
    if any_selection is None:
        doc.paragraph("No variant was tuned.")
        return {}
    halving = any_selection["halving"]
    rungs = ", ".join(map(str, halving["rung_epochs"])) or "none (every trial trains to the end)"
    doc.paragraph(
        f"Budget: {any_selection['budget']} trials per variant (the same for every variant; a space larger "
        f"than the budget is sampled with draw seed {any_selection['draw_seed']}), each trained with seeds "
        f"{', '.join(map(str, any_selection['trial_seeds']))} and scored by the mean of its seeds' "
        f"{any_selection['metric']['label']} on the validation split. Successive halving: rungs at epochs "
        f"{rungs}, reduction factor {halving['reduction_factor']} ({halving['rule']}). A finished run still "
        f"improving at its cap continues from its checkpoint to {any_selection['extended_epochs']} epochs. "
        f"Rule: {any_selection['rule']}; {any_selection['tie_rule']}. Only the validation split is read."
    )
    doc.paragraph("Choices: " + " ".join(choice_sentence(selection) for selection in selections.values()))
    higher = any_selection["metric"]["higher_is_better"]
    rows = []
    for selection in selections.values():
        for index, trial in enumerate(selection["trials"]):
            first = trial["rungs"][0] if trial["rungs"] else None
            seeds = trial.get("seeds", {})
            rows.append(
                [
                    selection["label"],
                    point_label(trial["point"]),
                    _seed_scores(first["scores"], higher) if first else "–",
                    _seed_scores({s: r["score"] for s, r in seeds.items()}, higher) if seeds else "–",
                    _score(trial.get("score"), higher),
                    " / ".join(f"{r['best_epoch']}/{r['epochs']} (cap {r['max_epochs']})" for r in seeds.values()) or "–",
                    _status(selection, index),
                ]
            )
    epochs = halving["rung_epochs"][0] if halving["rung_epochs"] else None
    first_rung = f"after {epochs} epoch{'s' if epochs != 1 else ''}, per seed" if epochs else "first rung"
    doc.table(
        ["Variant", "trial", first_rung, "finished, per seed", "mean", "best / run epochs", ""],
        rows,
        caption=f"{any_selection['metric']['label']} on the validation split.",
    )
    if figure_dir is None:
        return {}
    plot_tuning_sensitivity(selections, Path(figure_dir) / SENSITIVITY_PNG)
    doc.image(
        f"{FIGURES_DIR}/{SENSITIVITY_PNG}",
        "Every trial's validation score: open markers after the first rung, filled ones finished (the line "
        "spans the trial seeds); the chosen trial ringed.",
    )
    return {"file": f"{FIGURES_DIR}/{SENSITIVITY_PNG}"}


def _capped_section(doc: Document, capped: list[dict[str, Any]]) -> None:
    doc.heading("Runs stopped by the epoch cap")
    if not capped:
        doc.paragraph(
            "None: every run's best epoch came before its last allowed epoch (under the tuned protocol, after "
            "continuing any capped run to the extended cap)."
        )
        return
    doc.paragraph(
        f"{len(capped)} run(s) had their best epoch at the last allowed epoch — still improving when stopped, "
        "so their numbers may understate the method (tuned runs: after their continuation to the extended cap):"
    )
    doc.table(
        ["Protocol", "Method", "seed", "settings", "best epoch / cap"],
        [
            [c["protocol"], c["label"], str(c["seed"]), point_label(c["settings"]) if "settings" in c else "", f"{c['best_epoch']}/{c['cap']}"]
            for c in capped
        ],
    )


def tuned_table_1_section(doc: Document, summary: dict[str, dict[str, Any]], selections: dict[str, dict[str, Any]]) -> None:
    """Table 1's rows of the tuned variants at their chosen settings (the shared rows are Table 1 itself)."""
    doc.heading("Table 1 under the tuned protocol")
    doc.table(
        [*N_WAY_COLUMNS, "chosen setting"],
        [
            [*row, point_label(selections[variant]["chosen_point"]) if variant in selections else ""]
            for variant, row in zip(summary, n_way_rows(summary), strict=True)
        ],
        caption="Each tuned variant trained with the report's seeds at the trial it chose on validation data.",
    )


