"""How well deduplication found the duplicates a dataset planted: pairwise precision and recall of the found
clusters against ground-truth duplicate clusters."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def _pairs_within(groups: Sequence[Sequence[str]]) -> set[tuple[str, str]]:
    pairs = set()
    for group in groups:
        members = sorted(set(group))
        pairs.update(
            (members[i], members[j]) for i in range(len(members)) for j in range(i + 1, len(members))
        )
    return pairs


def dedup_precision_recall(clusters: Sequence[Sequence[str]], ground_truth: pd.DataFrame) -> dict:
    """Pairwise precision and recall of found duplicate pairs against injected duplicate clusters.

    A pair counts when both ids sit in one found cluster; it is correct when both also share a
    ``dup_cluster`` label (NaN / None = not injected). Precision is 1.0 when nothing was found and
    recall is 1.0 when nothing was injected (no claim is wrong, no duplicate is missed).
    """
    if "dup_cluster" not in ground_truth.columns:
        raise ValueError("ground_truth needs a dup_cluster column (NaN/None for pairs never duplicated)")
    ids = ground_truth["pair_id"] if "pair_id" in ground_truth.columns else ground_truth.index.to_series()
    labelled = pd.DataFrame(
        {"pair_id": ids.astype(str).to_numpy(), "dup_cluster": ground_truth["dup_cluster"].to_numpy()}
    )
    labelled = labelled[labelled["dup_cluster"].notna()]
    true_groups = [group["pair_id"].tolist() for _, group in labelled.groupby("dup_cluster", sort=True)]
    found_pairs = _pairs_within([[str(p) for p in cluster] for cluster in clusters])
    true_pairs = _pairs_within(true_groups)
    correct = len(found_pairs & true_pairs)
    precision = correct / len(found_pairs) if found_pairs else 1.0
    recall = correct / len(true_pairs) if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_found_pairs": len(found_pairs),
        "n_true_pairs": len(true_pairs),
        "n_correct_pairs": correct,
    }
