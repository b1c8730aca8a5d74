"""``crossmodal evaluate``'s ``report.md``: each bundle's scores with their intervals, the paired differences
from the first bundle, and what was rejected from the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import atomic_path
from evaluation.document import Document

#: after a recall that is 1 by construction (k at or above the worst possible rank), and an rsum holding one
TRIVIAL_MARK = " †"


def _cell(score: dict[str, Any]) -> str:
    if "median" in score:
        return f"{score['median']:g} [{score['ci_low']:g}, {score['ci_high']:g}]"
    value = score.get("mean", score.get("value"))
    digits = 2 if "value" in score else 4
    marked = TRIVIAL_MARK if "trivial" in score or "includes_trivial" in score else ""
    return f"{value:.{digits}f} [{score['ci_low']:.{digits}f}, {score['ci_high']:.{digits}f}]{marked}"


def report_document(payload: dict[str, Any]) -> Document:
    table, bundles = payload["table"], payload["bundles"]
    doc = Document(f"crossmodal evaluate — {Path(table['table']).name}")
    doc.paragraph(
        f"{table['n_kept']} pairs scored of {table['n_input']} in {table['table']} ({table['n_rejected']} rejected"
        + (f": {', '.join(f'{k} {v}' for k, v in table['rejects_by_reason'].items())}" if table["rejects_by_reason"] else "")
        + f"; every rejected row is in rejects.csv). Protocol: {bundles[0]['protocol']}. 95% intervals: "
        f"bootstrap over items ({payload['bootstrap_resamples']} resamples); n-way tasks with "
        f"{payload['redraws']} distractor redraws; device {payload['device']}."
    )
    metrics = list(dict.fromkeys(name for bundle in bundles for name in bundle["metrics"]))
    doc.heading("Scores")
    doc.table(
        ["Metric", *[b["name"] for b in bundles]],
        [[name, *[_cell(b["metrics"][name]) if name in b["metrics"] else "–" for b in bundles]] for name in metrics],
        caption="Mean (median for ranks) with its 95% interval. rsum: R@1 + R@5 + R@10 of both directions, in percent."
        + (
            f"{TRIVIAL_MARK}: k at or above the worst rank a correct item can have on this table, so the recall is 1 "
            "by construction (and an rsum marked so includes such recalls): not evidence about the model."
            if any("trivial_recalls" in b for b in bundles)
            else ""
        ),
    )
    for bundle in bundles:
        if "trivial_recalls" in bundle:
            doc.paragraph(
                f"{bundle['name']}: 1 by construction on this table ({table['n_kept']} pairs): "
                + "; ".join(f"{name} ({note})" for name, note in bundle["trivial_recalls"].items())
                + "."
            )
    for bundle in bundles:
        if "neighbor_preservation" in bundle:
            np_ = bundle["neighbor_preservation"]
            doc.paragraph(f"{bundle['name']}: neighbor preservation at k = {np_['k']}, chance {np_['chance']:.4f}.")
        elif "neighbor_preservation_skipped" in bundle:
            doc.paragraph(f"{bundle['name']}: neighbor preservation skipped: {bundle['neighbor_preservation_skipped']}.")
    first = bundles[0]
    for bundle in bundles[1:]:
        doc.heading(f"{bundle['name']} − {first['name']} (the first model)")
        doc.table(
            ["Metric", "Δ", "95% CI", "p"],
            [
                [name, f"{d['mean_difference']:+.4f}", f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]", f"{d['p_value']:.4f}"]
                for name, d in bundle["difference_from_first"].items()
            ],
            caption=f"Δ = {bundle['name']} minus {first['name']}: positive means higher for the model of this section "
            "(better for recalls and rsum, worse for ranks). Paired by item (the same pairs, the same distractors); "
            "an interval containing 0 is not resolved.",
        )
    if payload.get("clip_benchmark"):
        doc.paragraph(
            "CLIP_benchmark-shaped results (one JSON per model, `clip_benchmark build` merges them with other runs): "
            + ", ".join(f"`clip_benchmark/{name}`" for name in payload["clip_benchmark"])
            + "."
        )
    return doc


def write_report(payload: dict[str, Any], path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(report_document(payload).to_markdown())
