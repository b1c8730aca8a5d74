"""The retrieval scores of one model's embeddings of a labelled image–text table, with 95% bootstrap
intervals over its items, and the paired difference between two models on the same table
(``crossmodal evaluate``).

Why here and not in the command: these are the pipeline's own metric functions — n-way Recall@1 with the
fixed protocol (:data:`evaluation.protocol.EVAL_SEED`, Thomas & Kovashka §4.3) and the full ranking over
the distinct items (:func:`evaluation.protocol.full_ranking`) — so a table scored here gets exactly the
numbers ``Evaluate`` writes for the same embeddings (``tests/test_evaluate_command.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evaluation.embeddings import group_codes
from evaluation.evaluate import HEADLINE_PRESERVATION, preservation_at_ks
from evaluation.protocol import EVAL_SEED, full_ranking, retrieval_layout
from evaluation.retrieval import n_way_recall_at_1
from evaluation.statistics import paired_bootstrap

#: the n of the n-way tasks a table is scored on, where it has enough items (the paper: 5 for Politics and
#: GoodNews, 20 for Conceptual Captions, 100 for COCO)
N_WAYS = (5, 20, 100)
RECALL_KS = (1, 5, 10)
#: neighbor preservation's k on a new table (with its chance level k / (n - 1))
NP_K = 10
#: interval resamples and their seed (fixed: the same embeddings always give the same intervals)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def usable_n_ways(group_ids: np.ndarray, n_ways: Sequence[int] = N_WAYS) -> list[int]:
    """The n-way tasks every query of the table can be given ``n - 1`` distractors outside its group for."""
    groups = group_codes(group_ids, len(group_ids))
    fewest_outside = int((len(groups) - np.bincount(groups)[groups]).min()) if len(groups) else 0
    return [n for n in n_ways if n - 1 <= fewest_outside]


def per_query_outcomes(
    image: np.ndarray,
    text: np.ndarray,
    group_ids: np.ndarray,
    image_ids: np.ndarray,
    texts: np.ndarray,
    redraws: int,
    n_ways: Sequence[int] = N_WAYS,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every outcome as one value per query (``"5-way R@1 I→T"`` -> hits averaged over the distractor
    redraws; ``"R@5 T→I"`` -> 0/1; ``"rank I→T"``), and the full-ranking summary (``full_ranking["all"]``:
    medR, rsum, ...) with its protocol."""
    outcomes: dict[str, np.ndarray] = {}
    for n in usable_n_ways(group_ids, n_ways):
        result = n_way_recall_at_1(image, text, n, EVAL_SEED, redraws, group_ids=group_ids, return_hits=True)
        for direction, arrow in (("i2t", "I→T"), ("t2i", "T→I")):
            outcomes[f"{n}-way R@1 {arrow}"] = result[f"{direction}_hits"].mean(axis=0)
    ranked = full_ranking(image, text, retrieval_layout(group_ids, image_ids, texts), return_ranks=True)
    for direction, arrow in (("i2t", "I→T"), ("t2i", "T→I")):
        ranks = ranked["all"].pop(f"{direction}_ranks")
        for k in RECALL_KS:
            outcomes[f"R@{k} {arrow}"] = (ranks <= k).astype(np.float64)
        outcomes[f"rank {arrow}"] = ranks.astype(np.float64)
    return outcomes, ranked


def interval(values: np.ndarray, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """Mean and 95% percentile bootstrap interval over the items."""
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_resamples, len(values)))].mean(axis=1)
    return {"mean": float(values.mean()), "ci_low": float(np.percentile(means, 2.5)), "ci_high": float(np.percentile(means, 97.5))}


def median_interval(ranks: np.ndarray, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    ranks = np.asarray(ranks, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(ranks[rng.integers(0, len(ranks), size=(n_resamples, len(ranks)))], axis=1)
    return {"median": float(np.median(ranks)), "ci_low": float(np.percentile(medians, 2.5)), "ci_high": float(np.percentile(medians, 97.5))}


def rsum_interval(
    i2t_ranks: np.ndarray, t2i_ranks: np.ndarray, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> dict[str, float]:
    """rsum (R@1 + R@5 + R@10 of both directions, in percent) and its interval, each direction's queries
    resampled (they are different items when images hold several captions)."""
    rng = np.random.default_rng(seed)
    totals = np.zeros(n_resamples)
    value = 0.0
    for ranks in (np.asarray(i2t_ranks), np.asarray(t2i_ranks)):
        resampled = ranks[rng.integers(0, len(ranks), size=(n_resamples, len(ranks)))]
        for k in RECALL_KS:
            totals += 100.0 * (resampled <= k).mean(axis=1)
            value += 100.0 * float((ranks <= k).mean())
    return {"value": value, "ci_low": float(np.percentile(totals, 2.5)), "ci_high": float(np.percentile(totals, 97.5))}


def score_table(
    image: np.ndarray,
    text: np.ndarray,
    group_ids: np.ndarray,
    image_ids: np.ndarray,
    texts: np.ndarray,
    redraws: int = 5,
    doc_vectors: np.ndarray | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One model's scores on a table: each outcome's mean with its interval, median ranks, rsum (the sum of
    R@1/5/10 both ways, in percent, with an interval over the items of both directions' resamples) and,
    with ``doc_vectors`` (the bundle's Doc2Vec inferred for the table's texts), neighbor preservation at
    k = 10 with its chance level. Returns the JSON-able scores and the per-query outcomes (for pairing)."""
    outcomes, ranked = per_query_outcomes(image, text, group_ids, image_ids, texts, redraws)
    scores: dict[str, Any] = {"protocol": ranked["protocol"], "n_pairs": int(len(image)), "metrics": {}}
    for name, values in outcomes.items():
        if name.startswith("rank"):
            scores["metrics"][name.replace("rank", "median rank")] = median_interval(values)
        else:
            scores["metrics"][name] = interval(values)
    scores["metrics"]["rsum"] = rsum_interval(outcomes["rank I→T"], outcomes["rank T→I"])
    if doc_vectors is not None and len(image) > NP_K:
        _, at_k, arrays = preservation_at_ks(image, text, doc_vectors, NP_K, (NP_K,), NP_K / (len(image) - 1))
        scores["neighbor_preservation"] = {"k": NP_K, "chance": at_k["ks"][str(NP_K)]["chance"]}
        for modality, name in HEADLINE_PRESERVATION.items():
            outcomes[f"NP {modality} @{NP_K}"] = arrays[name]
            scores["metrics"][f"NP {modality} @{NP_K}"] = interval(arrays[name])
    return scores, outcomes


def paired_differences(outcomes: dict[str, np.ndarray], first: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Each outcome of one model minus the first model's, paired by item (median ranks left out: a
    difference of medians is not a mean of per-item differences)."""
    return {
        name: paired_bootstrap(values, first[name], BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
        for name, values in outcomes.items()
        if name in first and not name.startswith("rank")
    }
