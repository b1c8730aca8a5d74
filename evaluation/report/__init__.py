"""The run report: first a headline comparison of the method against its baseline (paired-bootstrap
intervals over test items and seeds, and the smallest difference the run could detect), then Thomas &
Kovashka's Tables 1–4 and Figs. 5–6 with neighbor preservation against k and its chance level, full-ranking
retrieval (Bleeker & de Rijke §3), PR curve, PR-AUC and score distributions (Veit & Wilber §4.3, §4.5), COCOS
(Bleeker & de Rijke §4–5), significance against the baseline, dataset, dedup and neighbor-table statistics,
and run metadata — as Markdown, HTML and JSON from one model, with PNG figures beside them.

Why a package: each section lives with its subject in a module of its own; this module re-exports what
callers use (the Report task, tests) so ``from evaluation.report import build_report`` keeps working.
"""

from __future__ import annotations

from evaluation.report.assemble import (
    QUALITATIVE,
    QualitativeComparison,
    common_seed,
    compare_qualitatively,
    qualitative_inputs,
)
from evaluation.report.build import build_report
from evaluation.report.cocos_table import COCOS_COLUMNS, cocos_rows
from evaluation.report.headline import HEADLINE_BOOTSTRAP_SEED, headline_comparison
from evaluation.report.inputs import (
    BASELINE_VARIANT,
    DEFAULT_BOOTSTRAP_RESAMPLES,
    FIGURES_DIR,
    OURS_VARIANT,
    Qualitative,
    ReportInputs,
    ShownItem,
    VariantRun,
)
from evaluation.report.retrieval_tables import OWN_TABLE_ONLY, ablation_rows, significance_against_baseline
from evaluation.report.summary import summarise_variants

__all__ = [
    "BASELINE_VARIANT",
    "COCOS_COLUMNS",
    "DEFAULT_BOOTSTRAP_RESAMPLES",
    "FIGURES_DIR",
    "HEADLINE_BOOTSTRAP_SEED",
    "OURS_VARIANT",
    "OWN_TABLE_ONLY",
    "QUALITATIVE",
    "Qualitative",
    "QualitativeComparison",
    "ReportInputs",
    "ShownItem",
    "VariantRun",
    "ablation_rows",
    "build_report",
    "cocos_rows",
    "common_seed",
    "compare_qualitatively",
    "headline_comparison",
    "qualitative_inputs",
    "significance_against_baseline",
    "summarise_variants",
]
