"""The report's figures as PNG files: global precision-recall curves (Veit & Wilber Fig. 4 left), per-query
score distributions (their Fig. 4 right), the proximity-ratio histogram (Thomas & Kovashka Fig. 5) and
neighbor preservation against k with its chance level (their Table 3, at every k).

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas, never through pyplot, so
nothing depends on a display or on global pyplot state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from evaluation.labels import point_label

DPI = 100
#: score-distribution panels per row, so many methods wrap instead of shrinking
PANELS_PER_ROW = 3
# fixed PNG metadata, so the same numbers give the same bytes whatever matplotlib version draws them
_PNG_METADATA = {"Software": None}


def _save(figure: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(path, format="png", dpi=DPI, metadata=_PNG_METADATA)
    return path


def plot_pr_curves(curves: Mapping[str, Mapping[str, np.ndarray | float]], path: Path) -> Path:
    """One precision-recall curve per method on shared axes (Veit & Wilber Sec. 4.3, Fig. 4 left).

    ``curves`` maps a method label to ``{"recall": [...], "precision": [...], "pr_auc": float}`` as
    :func:`evaluation.calibration.precision_recall` returns them; the legend carries each PR-AUC.
    """
    if not curves:
        raise ValueError("plot_pr_curves needs at least one method's curve")
    figure = Figure(figsize=(6.0, 4.5))
    axes = figure.subplots()
    for label, curve in curves.items():
        recall = np.asarray(curve["recall"], dtype=np.float64)
        precision = np.asarray(curve["precision"], dtype=np.float64)
        if recall.shape != precision.shape or recall.ndim != 1 or recall.size == 0:
            raise ValueError(
                f"curve {label!r}: recall and precision must be equal-length non-empty 1-D arrays"
            )
        # the curve starts at recall 0 with the first threshold's precision, as the step-wise AP assumes
        axes.step(
            np.r_[0.0, recall],
            np.r_[precision[0], precision],
            where="pre",
            label=f"{label} (PR-AUC {float(curve['pr_auc']):.3f})",
        )
    axes.set_xlabel("recall")
    axes.set_ylabel("precision")
    axes.set_xlim(0.0, 1.0)
    axes.set_ylim(0.0, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
    axes.set_title("Global precision-recall over all test image-text scores", fontsize="medium")
    figure.tight_layout()
    return _save(figure, path)


def plot_score_distributions(
    distributions: Mapping[str, Mapping[str, np.ndarray]], path: Path, max_lines: int = 1000
) -> Path:
    """Per method, one line per sampled query: gallery items per similarity bin (Veit & Wilber Fig. 4 right).

    ``distributions`` maps a method label to :func:`evaluation.calibration.score_distribution` output
    (``bin_centres``, ``counts`` ``[n_queries, n_bins]``, ``p5``, ``p95``). Query lines are blue and
    translucent; the 5th / 95th percentiles over queries are orange. Panels share both axes.
    """
    if not distributions:
        raise ValueError("plot_score_distributions needs at least one method's distribution")
    n_columns = min(len(distributions), PANELS_PER_ROW)
    n_rows = -(-len(distributions) // n_columns)
    figure = Figure(figsize=(4.0 * n_columns, 3.4 * n_rows))
    grid = np.atleast_1d(figure.subplots(n_rows, n_columns, sharex=True, sharey=True)).reshape(-1)
    for unused in grid[len(distributions) :]:
        unused.set_visible(False)
    panels = grid[: len(distributions)]
    occupied_low, occupied_high = np.inf, -np.inf
    for index, (axes, (label, result)) in enumerate(zip(panels, distributions.items(), strict=True)):
        centres = np.asarray(result["bin_centres"], dtype=np.float64)
        counts = np.asarray(result["counts"], dtype=np.float64)
        if counts.ndim != 2 or counts.shape[1] != centres.size:
            raise ValueError(f"distribution {label!r}: counts must be [n_queries, {centres.size} bins]")
        lines = [np.column_stack([centres, row]) for row in counts[:max_lines]]
        alpha = float(np.clip(8.0 / max(len(lines), 1), 0.03, 0.6))
        axes.add_collection(LineCollection(lines, colors="tab:blue", linewidths=0.6, alpha=alpha))
        axes.plot(centres, result["p5"], color="tab:orange", linewidth=1.5, label="5th / 95th percentile")
        axes.plot(centres, result["p95"], color="tab:orange", linewidth=1.5)
        axes.set_title(f"{label} ({counts.shape[0]} queries)", fontsize="medium")
        axes.set_xlabel("similarity to the query")
        axes.tick_params(labelbottom=True)
        if index % n_columns == 0:
            axes.set_ylabel("gallery items in bin")
        axes.grid(alpha=0.3)
        axes.autoscale_view()
        used = np.flatnonzero(counts.sum(axis=0) > 0)
        if used.size:
            step = centres[1] - centres[0] if centres.size > 1 else 0.1
            occupied_low = min(occupied_low, centres[used[0]] - step)
            occupied_high = max(occupied_high, centres[used[-1]] + step)
    if np.isfinite(occupied_low):
        # similarities rarely span [-1, 1]; zoom on the bins any method uses
        panels[0].set_xlim(occupied_low, occupied_high)
    panels[0].legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    return _save(figure, path)


def plot_proximity_ratios(
    ratios: Mapping[str, np.ndarray], path: Path, bins: int = 40, method_label: str = "Ours"
) -> Path:
    """Histogram of log2(d_ours / d_baseline) per modality over the sampled Doc2Vec-neighbor pairs (Fig. 5).

    Left of the dashed zero line our model keeps the pair closer than the baseline does. ``method_label``
    names the compared method on the axis (the report passes the label of the variant it compares).
    """
    finite = {name: np.log2(r[np.isfinite(r) & (r > 0)]) for name, r in ratios.items()}
    finite = {name: values for name, values in finite.items() if values.size}
    if not finite:
        raise ValueError("plot_proximity_ratios needs at least one finite positive ratio")
    figure = Figure(figsize=(6.0, 3.6))
    axes = figure.subplots()
    edges = np.histogram_bin_edges(np.concatenate(list(finite.values())), bins=bins)
    for name, values in finite.items():
        axes.hist(
            values, bins=edges, histtype="step", linewidth=1.5, label=f"{name}–{name} ({values.size} pairs)"
        )
    axes.axvline(0.0, color="black", linestyle="--", linewidth=1)
    axes.set_xlabel(f"log2( distance under {method_label} / distance under the baseline )")
    axes.set_ylabel("neighbor pairs")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    return _save(figure, path)


def plot_preservation_against_k(
    curves: Mapping[str, Mapping[str, Sequence[float] | np.ndarray]],
    chance: Mapping[str, Sequence[float] | np.ndarray],
    path: Path,
) -> Path:
    """Neighbor preservation against k, one line per method, one panel per modality, over the chance line.

    ``curves`` maps a method label to ``{"ks": [...], "image": [...], "text": [...]}`` (mean over seeds at
    each k); ``chance`` is ``{"ks": [...], "chance": [...]}``, the expected preservation ``k / (n - 1)`` of a
    random embedding. A single k hides how far above chance a method is; the gap at every k shows it. The
    k axis is logarithmic (the profile's ks span 5 to 200).
    """
    if not curves:
        raise ValueError("plot_preservation_against_k needs at least one method's curve")
    chance_ks = np.asarray(chance["ks"], dtype=np.float64)
    chance_values = np.asarray(chance["chance"], dtype=np.float64)
    if chance_ks.shape != chance_values.shape or chance_ks.ndim != 1 or chance_ks.size == 0:
        raise ValueError("chance: ks and chance must be equal-length non-empty 1-D arrays")
    figure = Figure(figsize=(9.0, 3.8))
    panels = figure.subplots(1, 2, sharey=True)
    for axes, modality in zip(panels, ("image", "text"), strict=True):
        for label, curve in curves.items():
            ks = np.asarray(curve["ks"], dtype=np.float64)
            values = np.asarray(curve[modality], dtype=np.float64)
            if ks.shape != values.shape or ks.ndim != 1 or ks.size == 0:
                raise ValueError(
                    f"curve {label!r}: ks and {modality} must be equal-length non-empty 1-D arrays"
                )
            axes.plot(ks, values, marker="o", markersize=3, linewidth=1.3, label=label)
        axes.plot(
            chance_ks, chance_values, color="black", linestyle="--", linewidth=1, label="chance k/(n−1)"
        )
        axes.set_xscale("log")
        # the measured ks as plain numbers rather than powers of ten
        axes.set_xticks(chance_ks, labels=[f"{k:g}" for k in chance_ks])
        axes.minorticks_off()
        axes.set_xlabel("k (nearest neighbors)")
        axes.set_title(f"{modality}–{modality} neighbors", fontsize="medium")
        axes.grid(alpha=0.3)
    panels[0].set_ylabel("share of Doc2Vec k-NN kept")
    panels[0].set_ylim(bottom=0.0)
    panels[1].legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    return _save(figure, path)


def plot_tuning_sensitivity(selections: Mapping[str, Mapping], path: Path) -> Path:
    """Every tuning trial's validation score, one panel per tuned variant: an open marker at its first rung
    (mean over trial seeds), a filled one when it finished, a line across its trial seeds' finished scores,
    the chosen trial ringed — how far apart the settings are, against the seeds' spread. ``selections`` maps
    a variant to its ``selection.json``."""
    if not selections:
        raise ValueError("plot_tuning_sensitivity needs at least one variant's selection")
    n = len(selections)
    figure = Figure(figsize=(6.4, 1.2 + 0.45 * sum(len(s["trials"]) for s in selections.values())))
    heights = [len(s["trials"]) for s in selections.values()]
    panels = figure.subplots(n, 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for axes, selection in zip(panels, selections.values(), strict=True):
        trials = selection["trials"]
        ys = np.arange(len(trials))
        for y, trial in zip(ys, trials, strict=True):
            if trial["rungs"]:
                axes.scatter([trial["rungs"][0]["mean"]], [y], marker="o", facecolors="none", edgecolors="C0")
            if "score" in trial:
                seeds = [record["score"] for record in trial["seeds"].values()]
                axes.plot([min(seeds), max(seeds)], [y, y], color="C1", linewidth=1.5)
                axes.scatter([trial["score"]], [y], marker="o", color="C1")
        chosen = trials[selection["chosen"]]
        axes.scatter([chosen["score"]], [selection["chosen"]], s=180, facecolors="none", edgecolors="k", linewidths=1.5)
        axes.set_yticks(ys, [point_label(trial["point"]) for trial in trials], fontsize="x-small")
        axes.invert_yaxis()
        axes.set_title(selection["label"], fontsize="small", loc="left")
        axes.grid(alpha=0.3, axis="x")
    panels[-1].set_xlabel(f"validation {next(iter(selections.values()))['metric']['label']}")
    figure.tight_layout()
    return _save(figure, path)


def plot_tradeoff(result: Mapping, path: Path) -> Path:
    """The within-modality trade-off (``pipeline.tasks.tradeoff``): each headline metric's mean over seeds
    against the weight scale, n-way R@1 on the left, neighbor preservation on the right; the bars are each
    point's 95% interval of its difference from scale 0 (paired), drawn around the point."""
    rows = [{**row, "value": row["scale"]} for row in result["rows"]]
    return plot_against_setting(rows, "within-modality weight scale (1 = the paper's α, β)", result["label"], path)


def plot_against_setting(rows: Sequence[Mapping], setting: str, title: str, path: Path) -> Path:
    """Each headline metric's mean over seeds against one setting's ``value`` (numbers on a numeric axis,
    anything else in the given order), n-way R@1 on the left, neighbor preservation on the right; bars: each
    point's 95% interval of its difference from the reference value (none where ``ci_low`` is None)."""
    values = [row["value"] for row in rows]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    xs = np.array(values, dtype=float) if numeric else np.arange(len(values), dtype=float)
    keys = list(rows[0]["metrics"])
    figure = Figure(figsize=(9.0, 3.6))
    panels = figure.subplots(1, 2)
    for key in keys:
        axes = panels[1] if key.startswith("preservation") else panels[0]
        metric = [row["metrics"][key] for row in rows]
        means = np.array([m["method_mean"] for m in metric])
        low = [m.get("ci_low") for m in metric]
        below = np.array([0.0 if low[i] is None else m["difference"] - m["ci_low"] for i, m in enumerate(metric)])
        above = np.array([0.0 if low[i] is None else m["ci_high"] - m["difference"] for i, m in enumerate(metric)])
        axes.errorbar(xs, means, yerr=[below, above], marker="o", capsize=3, label=metric[0]["metric"])
    panels[0].set_ylabel("n-way R@1 (test)")
    panels[1].set_ylabel("neighbor preservation (test)")
    for axes in panels:
        axes.set_xlabel(setting)
        if not numeric:
            axes.set_xticks(xs, [str(v) for v in values])
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(title, fontsize="small")
    figure.tight_layout()
    return _save(figure, path)
