"""The COCOS section (Bleeker & de Rijke §4–5): how many candidates contribute to the gradient, per run,
loss and direction, from the per-batch summaries of ``evaluation.statistics.cocos_summary``.
"""

from __future__ import annotations

from typing import Any

from evaluation.document import Document

#: COCOS quantities (Bleeker & de Rijke §4) by the suffix of a loss's diagnostic key, and the statistic shown
COCOS_COLUMNS = (
    ("contributing_negatives", "C^q", "per_query"),
    ("contributing_triplets", "C^q", "per_query"),
    ("contributing_negatives", "C^B", "per_batch_sum"),
    ("contributing_triplets", "C^B", "per_batch_sum"),
    ("no_gradient", "C^0", "per_batch_sum"),
    ("negative_weight", "W^q−", "per_query"),
    ("positive_weight", "W^q+", "per_query"),
)


def cocos_rows(cocos: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per (run, loss, direction) — e.g. ``image_to_text`` — with the COCOS quantities it reports.

    Returns the quantity names that occur (column order) and rows ``{"label", "seed", "loss", "direction",
    "values": {quantity: {"mean", "std"}}, "n_batches", "other_keys"}``; keys of unknown form are listed
    in ``other_keys`` (their numbers stay in the JSON).
    """
    suffixes = sorted({suffix for suffix, _, _ in COCOS_COLUMNS}, key=len, reverse=True)
    rows: list[dict[str, Any]] = []
    for entry in cocos:
        for loss, keys in entry["losses"].items():
            by_direction: dict[str, dict[str, Any]] = {}
            for key, stats in keys.items():
                suffix = next((x for x in suffixes if key.endswith("_" + x)), None)
                direction = key[: -len(suffix) - 1] if suffix else ""
                row = by_direction.setdefault(
                    direction,
                    {
                        "label": entry["label"],
                        "seed": entry["seed"],
                        "loss": loss,
                        "direction": direction,
                        "values": {},
                        "n_batches": stats["n_batches"],
                        "other_keys": [],
                    },
                )
                if suffix is None:
                    row["other_keys"].append(key)
                    continue
                for column_suffix, quantity, statistic in COCOS_COLUMNS:
                    if column_suffix == suffix:
                        row["values"][quantity] = {
                            "mean": stats[f"{statistic}_mean"],
                            "std": stats[f"{statistic}_std"],
                        }
            rows += [row for row in by_direction.values() if row["values"]]
    present = {quantity for row in rows for quantity in row["values"]}
    quantities = list(dict.fromkeys(q for _, q, _ in COCOS_COLUMNS if q in present))
    return quantities, rows


def cocos_section(doc: Document, cocos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The COCOS table of every run, loss and direction (nothing without COCOS results); returns its rows
    for the JSON."""
    if not cocos:
        return []
    quantities, rows = cocos_rows(cocos)
    doc.heading("COCOS — candidates contributing to the gradient at the best checkpoint")
    table = []
    for row in rows:
        cells = []
        for quantity in quantities:
            value = row["values"].get(quantity)
            digits = 2 if quantity in ("C^B", "C^0") else 3
            cells.append(f"{value['mean']:.{digits}f} ± {value['std']:.{digits}f}" if value else "")
        table.append(
            [row["label"], str(row["seed"]), row["loss"], row["direction"], *cells, str(row["n_batches"])]
        )
    eps = sorted({entry["eps"] for entry in cocos})
    batch_sizes = sorted({entry["batch_size"] for entry in cocos})
    others = sorted({key for row in rows for key in row["other_keys"]})
    doc.table(
        ["Method", "seed", "loss", "direction", *quantities, "batches"],
        table,
        caption=(
            f"Bleeker & de Rijke §4–5: frozen best checkpoint, one pass over the training set in batches of "
            f"{', '.join(map(str, batch_sizes))} (neighbors sampled as in training), eps = "
            f"{', '.join(map(str, eps))}; mean ± sd over batches. C^q: candidates contributing to a query's "
            "gradient; C^B: their sum over a batch; C^0: queries per batch with no gradient; W^q−, W^q+: "
            "gradient weight of the contributing negatives and of the positive, per query."
            + (f" Other diagnostics (in report.json): {', '.join(others)}." if others else "")
        ),
    )
    return rows
