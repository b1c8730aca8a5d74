"""``build_report``: the sections in reading order, and the JSON payload of every number they show.

Why thin: each section lives with its subject (:mod:`evaluation.report.headline`, ``retrieval_tables``,
``full_ranking``, ``calibration``, ``preservation``, ``qualitative``, ``cocos_table``, ``metadata``); this
module only fixes their order and collects what they return, so the Markdown, HTML and JSON come from one
pass over one model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.document import Document
from evaluation.report.calibration import calibration_section
from evaluation.report.cocos_table import cocos_section
from evaluation.report.frozen_start import compare_with_frozen_start, frozen_start_section
from evaluation.report.full_ranking import full_ranking_section
from evaluation.report.inputs import FIGURES_DIR, ReportInputs
from evaluation.report.learned import against_chance, chance_table_section, learned_section
from evaluation.report.metadata import run_intro, run_metadata_section, training_and_data_section
from evaluation.report.paper_section import compare_with_paper, paper_effect_section
from evaluation.report.preservation import (
    preservation_against_k_section,
    table_3_section,
    topic_precision_section,
)
from evaluation.report.protocols import protocol_comparisons, protocols_section, tuned_table_1_section
from evaluation.report.qualitative import qualitative_section
from evaluation.report.retrieval_tables import (
    ablation_rows,
    significance_against_baseline,
    table_1_section,
    table_2_section,
    table_4_section,
)
from evaluation.report.summary import summarise_variants


def build_report(inputs: ReportInputs, output_dir: Path | None = None) -> tuple[Document, dict[str, Any]]:
    """The report document and its JSON payload (every number the document shows).

    With ``output_dir``, figures are drawn as PNGs into ``output_dir/figures`` and referenced by relative
    paths, so the Markdown and HTML written into ``output_dir`` show them; without it, no figure is drawn.
    The headline, the significance table and Figs. 5–6 compare ``inputs.method`` with ``inputs.baseline``.
    """
    figure_dir = Path(output_dir) / FIGURES_DIR if output_dir is not None else None
    # the tables show the shared protocol's runs; without it, every variant's one run (tuned or not)
    runs = inputs.runs if "shared" in inputs.protocols else inputs.runs + inputs.tuned_runs
    summary = summarise_variants(runs)
    significance = significance_against_baseline(runs, inputs.baseline)
    comparisons = protocol_comparisons(inputs)
    paper = {
        protocol: compare_with_paper(inputs, protocol)
        for protocol in ("tuned", "shared")
        if protocol in inputs.protocols
    }
    doc = Document(inputs.title)
    run_intro(doc, inputs.run_info)
    paper_effect_section(doc, paper, comparisons["fair"])
    frozen_start = compare_with_frozen_start(inputs)
    frozen_start_section(doc, frozen_start)
    chance = {
        protocol: against_chance(protocol_runs, inputs.bootstrap_resamples)
        for protocol, protocol_runs in (("tuned", inputs.tuned_runs), ("shared", inputs.runs))
        if protocol in inputs.protocols and protocol_runs
    }
    learned_section(doc, chance)

    tuning_figure = protocols_section(doc, inputs, comparisons, figure_dir)
    chance_table_section(doc, chance)
    table_1_section(doc, summary, significance, inputs.baseline)
    if "shared" in inputs.protocols and inputs.tuned_runs:
        tuned_table_1_section(doc, summarise_variants(inputs.tuned_runs), inputs.selections)
    table_2 = table_2_section(doc, summary)
    full_ranking_section(doc, summary)
    figures = calibration_section(doc, inputs, summary, figure_dir)
    if tuning_figure:
        figures["tuning_sensitivity"] = tuning_figure
    table_3_section(doc, summary)
    preservation_figure = preservation_against_k_section(doc, summary, figure_dir)
    if preservation_figure:
        figures["preservation_against_k"] = preservation_figure
    ablation = ablation_rows(summary)
    table_4_section(doc, ablation)
    topic_precision_section(doc, summary)
    qualitative = qualitative_section(doc, inputs, figure_dir)
    cocos_table = cocos_section(doc, inputs.cocos)
    training_and_data_section(doc, inputs, summary, runs)
    run_metadata_section(doc, inputs)

    payload = {
        "title": inputs.title,
        "run": inputs.run_info,
        # Ours − Ang+NP+Sym under the tuned protocol (the one to read), the shared one's when only it ran
        "headline": next(
            (h for h in comparisons["headlines"].values() if h["available"]), next(iter(comparisons["headlines"].values()))
        ),
        "chance": chance,
        # each headline comparison against the paper's Table 1 and 3 effects, with its tie and power readings
        "paper_effect": paper,
        # a learning tower against the frozen-trunk runs it started from (empty without a warm start)
        "frozen_start": frozen_start,
        "protocols": comparisons,
        "variants": summary,
        "significance": significance,
        "table_2": table_2,
        "ablation": ablation,
        "figures": figures,
        "qualitative": qualitative,
        "cocos": inputs.cocos,
        "cocos_table": cocos_table,
        "per_run": [
            {"variant": r.variant, "seed": r.seed, "metrics": r.metrics, "training": r.training}
            for r in inputs.runs
        ],
        "dataset": inputs.dataset,
        "dedup": inputs.dedup,
        "splits": inputs.splits,
        "coverage": inputs.coverage,
        "neighbor_tables": inputs.neighbor_tables,
        "tasks": inputs.tasks,
    }
    return doc, payload
