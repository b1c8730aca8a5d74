"""What the report is built from: the evaluated runs and the data, split and run metadata around them.

Why a module of its own: the Report task fills these from its inputs' files and every section reads them,
so they are the one contract between the pipeline and the report; nothing here computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: default variants of the headline comparison and the significance table (ReportInputs can name others)
BASELINE_VARIANT = "ang_np_sym"
OURS_VARIANT = "ours"
#: resamples of the headline bootstrap when ReportInputs does not say (the profiles' bootstrap_resamples)
DEFAULT_BOOTSTRAP_RESAMPLES = 2000
#: the folder of every PNG, relative to the report (sections reference their figures under it)
FIGURES_DIR = "figures"


@dataclass
class VariantRun:
    """One trained and evaluated (variant, seed)."""

    variant: str
    label: str
    seed: int
    metrics: dict[str, Any]
    training: dict[str, Any]
    hits: dict[str, np.ndarray]  # "i2t_hits"/"t2i_hits": [redraws, n_queries] 0/1
    #: Evaluate's curves.npz: "pr_precision", "pr_recall", "score_bin_centres", "score_counts", ...
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    #: registry names of the variant's losses, e.g. ["angular", "within_modality"]
    loss_names: list[str] = field(default_factory=list)
    #: per-sample neighbor preservation at the headline k (metrics["neighbor_preservation_at_k"]
    #: ["headline_k"]): "image" / "text" -> float [n_test]; empty for an evaluation that did not save it
    preservation: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ShownItem:
    """How a test pair is shown in the galleries: a text snippet and its image thumbnail (report-relative)."""

    text: str
    thumbnail: str | None = None


@dataclass
class Qualitative:
    """Figs. 5 and 6 of Thomas & Kovashka for one seed: our model against the baseline.

    ``proximity`` is :func:`evaluation.gallery.proximity_study` output, ``examples`` is
    :func:`evaluation.gallery.retrieval_examples` output; both name test positions, which ``items`` maps
    to what is shown.
    """

    seed: int
    ours_label: str
    baseline_label: str
    items: dict[int, ShownItem]
    proximity: dict[str, Any] | None = None
    examples: dict[str, list[dict[str, Any]]] | None = None


@dataclass
class ReportInputs:
    """Everything one report shows: the runs, the data, split and neighbor-table reports, the tasks' metadata,
    COCOS results, the qualitative figures, and which variants the headline compares."""

    title: str
    runs: list[VariantRun]
    dataset: dict[str, Any] = field(default_factory=dict)
    dedup: dict[str, Any] = field(default_factory=dict)
    splits: dict[str, Any] = field(default_factory=dict)
    #: per split, how much of its texts the train vocabulary covers (``TrainWordVectors``' coverage.json)
    coverage: dict[str, dict[str, Any]] = field(default_factory=dict)
    neighbor_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    run_info: dict[str, Any] = field(default_factory=dict)
    #: one entry per (variant, seed): {"variant", "label", "seed", "eps", "batch_size", "losses": {...}}
    cocos: list[dict[str, Any]] = field(default_factory=list)
    qualitative: Qualitative | None = None
    #: the headline compares ``method`` against ``baseline`` (variant names); the significance table and
    #: the note on Figs. 5–6 name them too
    baseline: str = BASELINE_VARIANT
    method: str = OURS_VARIANT
    #: resamples of the headline's bootstrap over test items and seeds
    bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES
    #: which protocols ran: "shared" (``runs``: every variant at the profile's settings) and/or "tuned"
    #: (``tuned_runs``: the variants with a search space at their selected settings)
    protocols: tuple[str, ...] = ("shared",)
    tuned_runs: list[VariantRun] = field(default_factory=list)
    #: each tuned variant's ``selection.json`` (Tune): trials, their validation scores, the choice
    selections: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: a tuned variant whose choice was a tie: its report seeds trained at the runner-up's setting too (the
    #: report reads each comparison under both choices)
    runner_up_runs: list[VariantRun] = field(default_factory=list)
    #: a learning tower that started from a frozen-trunk run (a warm start): each tuned variant's report seeds'
    #: frozen runs it started from, evaluated on test (the report pairs the two towers)
    frozen_start_runs: list[VariantRun] = field(default_factory=list)
