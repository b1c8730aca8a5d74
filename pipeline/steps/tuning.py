"""How a tuned variant's trials are compared, stopped early and one is chosen (the decisions; ``Tune`` reads
the runs and writes ``selection.json``).

* A trial's score is the mean over the trial seeds of the profile's selection metric at each run's selected
  checkpoint (validation split only).
* Successive halving (synchronous ASHA): at each rung every surviving trial has trained the same epochs; the
  best ``1 / reduction_factor`` of them, and never fewer than two, continue from their checkpoints.
* The choice is the best finished trial; the runner-up the second best. Their paired difference on the
  validation pairs (resampling pairs and trial seeds) says whether the choice is resolved; an interval that
  holds 0 makes it a tie, which the report names together with the rule that broke it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.settings import at_least, check_declared, each, increasing, one_of, setting
from evaluation.statistics import paired_bootstrap_items_and_seeds

PROTOCOLS = ("shared", "tuned", "both")


@dataclass(frozen=True)
class TuningSettings:
    """The tuned protocol (``Tune``): every variant with a search space (``pipeline/config/variants.py``) gets the
    same number of trials, each trained with every trial seed and scored by the profile's selection metric
    on the validation split; successive halving stops the weaker trials early; the best trial's settings
    are then trained with the report's seeds and evaluated on test (docs/protocols.md)."""

    protocol: str = setting(
        "shared",
        "what FullRun runs: shared (every variant at the profile's settings), tuned (the variants with a search "
        "space at their own selected settings) or both",
        one_of(*PROTOCOLS),
    )
    #: one number for every variant of a comparison (Musgrave et al. 2020)
    budget: int = setting(3, "trials per tuned variant, the same for every variant of a comparison", at_least(1))
    draw_seed: int = setting(0, "draws budget points from a search space larger than it", at_least(0))
    #: one seed's score moves by about as much as the settings differ (docs/protocols.md); the first ones are the
    #: report's first seeds, so a trial at the chosen (or the shared) settings is that run, trained once
    trial_seeds: tuple[int, ...] = setting(
        (0, 1),
        "each trial trains with every one of these seeds and is scored by their mean",
        each(at_least(0), "distinct seeds >= 0, at least one", distinct=True),
    )
    #: ASHA-style, synchronous: the best 1 / reduction_factor (at least two) continue from their checkpoints to
    #: the next rung, and after the last rung to the end
    rung_epochs: tuple[int, ...] = setting(
        (),
        "successive halving: every trial first trains this many epochs, then the best continue (empty: none)",
        increasing(at_least(1), "increasing epoch counts >= 1"),
    )
    reduction_factor: int = setting(3, "successive halving keeps the best 1 / reduction_factor at each rung", at_least(2))
    #: the same for every method
    extended_epochs: int | None = setting(
        None,
        "a tuned run whose best epoch is its last is continued to this many epochs (null: twice the epoch cap)",
        at_least(1, or_null=True),
    )
    bootstrap_resamples: int = setting(
        2000, "paired bootstrap resamples of the chosen trial against the runner-up (validation pairs, seeds)", at_least(1)
    )

    def __post_init__(self) -> None:
        check_declared(self)

    def extended_cap(self, epochs: int) -> int:
        """The second cap of a run whose first cap is ``epochs``."""
        return 2 * epochs if self.extended_epochs is None else self.extended_epochs


SELECTION_RULE = (
    "the finished trial with the best mean over the trial seeds of the selection metric (validation split, "
    "each run at its selected checkpoint)"
)
TIE_RULE = (
    "a tie (the chosen − runner-up 95% interval holds 0) is broken by the higher mean validation score; "
    "equal means: the trial listed first"
)
HALVING_RULE = (
    "at each rung every surviving trial has trained the rung's epochs with every trial seed; the best "
    "max(2, ceil(n / reduction_factor)) by mean validation score continue from their checkpoints"
)


def capped(summary: Mapping[str, Any]) -> bool:
    """Whether a run's best epoch was its last allowed one: still improving when the epoch cap stopped it."""
    return int(summary["best_epoch"]) >= int(summary["max_epochs"])


def seed_mean(scores: Mapping[int, float]) -> float:
    """A trial's score: the mean of its seeds' scores."""
    if not scores:
        raise ValueError("a trial needs at least one seed's score")
    return float(np.mean(list(scores.values())))


def _order(scores: Mapping[int, float], higher_is_better: bool) -> list[int]:
    """Trial indices best first; equal scores keep the trial listed first (the lower index)."""
    sign = -1.0 if higher_is_better else 1.0
    return sorted(scores, key=lambda index: (sign * scores[index], index))


def survivors(scores: Mapping[int, float], higher_is_better: bool, reduction_factor: int) -> list[int]:
    """The trials a rung keeps, in index order: the best ``max(2, ceil(n / reduction_factor))`` of the ``n``
    scored (all of them when that is n or more)."""
    if reduction_factor < 2:
        raise ValueError(f"reduction_factor must be >= 2, got {reduction_factor}")
    keep = min(len(scores), max(2, math.ceil(len(scores) / reduction_factor)))
    return sorted(_order(scores, higher_is_better)[:keep])


def choose(scores: Mapping[int, float], higher_is_better: bool) -> tuple[int, int | None]:
    """The best finished trial and the runner-up (None with a single trial)."""
    if not scores:
        raise ValueError("no trial to choose from: the tuning budget must be at least 1")
    ranked = _order(scores, higher_is_better)
    return ranked[0], (ranked[1] if len(ranked) > 1 else None)


def compare_trials(
    chosen: Mapping[int, np.ndarray],
    runner_up: Mapping[int, np.ndarray],
    higher_is_better: bool,
    n_resamples: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The chosen trial's per-pair validation outcomes (one array per trial seed) against the runner-up's,
    paired by validation pair and seed: the difference in the metric's better direction (positive: the
    chosen one is better), its 95% interval, and whether it is ``resolved`` (the interval lies above 0: the
    chosen trial is better; the choice is the higher mean, so the difference is never below 0)."""
    result = paired_bootstrap_items_and_seeds(chosen, runner_up, n_resamples=n_resamples, seed=seed)
    if not higher_is_better:  # e.g. a rank: lower is better, so report runner-up − chosen
        result = {
            **result,
            "difference": -result["difference"],
            "ci_low": -result["ci_high"],
            "ci_high": -result["ci_low"],
        }
    result["resolved"] = bool(result["ci_low"] > 0)
    return result


def rung_plan(rung_epochs: Sequence[int], cap: int) -> list[int]:
    """The rungs a run with epoch cap ``cap`` stops at (rungs at or beyond the cap are no rungs)."""
    return [epochs for epochs in rung_epochs if epochs < cap]


@dataclass(frozen=True)
class RunKey:
    """One run of the schedule: a trial (index) with a trial seed, trained to ``epochs``, continuing the same
    run trained to ``continue_from`` epochs (0: from the start)."""

    trial: int
    seed: int
    epochs: int
    continue_from: int = 0


@dataclass
class ScheduleState:
    """How far the schedule has got: the runs it waits for (``pending``), or, once all are done, every rung's
    decision and the finished runs."""

    pending: list[RunKey] = field(default_factory=list)
    #: per rung: its epochs, per trial per seed the score, per trial the mean, and the trials kept
    rungs: list[dict[str, Any]] = field(default_factory=list)
    #: per finished trial, per seed: the run whose score counts (the extended one when it was capped)
    finished: dict[int, dict[int, RunKey]] = field(default_factory=dict)
    #: per trial stopped by a rung, that rung's index
    stopped_at: dict[int, int] = field(default_factory=dict)
    #: every run the schedule has asked for so far, in order
    visited: list[RunKey] = field(default_factory=list)


def walk_schedule(
    n_trials: int,
    seeds: Sequence[int],
    rung_epochs: Sequence[int],
    cap: int,
    extended_cap: int,
    reduction_factor: int,
    higher_is_better: bool,
    summary_of: Callable[[RunKey], Mapping[str, Any] | None],
) -> ScheduleState:
    """Successive halving then continuation, as far as the finished runs allow. ``summary_of`` gives a
    finished run's summary (``best_score``, ``best_epoch``, ``max_epochs``) or None when it has not run: the
    walk then stops with the step's unfinished runs as ``pending``. Every decision is made again from the
    summaries, the same way, each time the walk is repeated."""
    state = ScheduleState()
    alive, previous = list(range(n_trials)), 0

    def step(keys: list[RunKey]) -> dict[RunKey, Mapping[str, Any]] | None:
        state.visited.extend(keys)
        summaries = {key: summary_of(key) for key in keys}
        state.pending = [key for key, summary in summaries.items() if summary is None]
        return None if state.pending else summaries

    for rung, epochs in enumerate(rung_plan(rung_epochs, cap)):
        keys = [RunKey(trial, seed, epochs, previous) for trial in alive for seed in seeds]
        if (summaries := step(keys)) is None:
            return state
        per_seed = {t: {k.seed: float(summaries[k]["best_score"]) for k in keys if k.trial == t} for t in alive}
        means = {trial: seed_mean(scores) for trial, scores in per_seed.items()}
        kept = survivors(means, higher_is_better, reduction_factor)
        state.rungs.append({"rung": rung, "epochs": epochs, "scores": per_seed, "means": means, "kept": kept})
        state.stopped_at.update({trial: rung for trial in alive if trial not in kept})
        alive, previous = kept, epochs
    full = [RunKey(trial, seed, cap, previous) for trial in alive for seed in seeds]
    if (summaries := step(full)) is None:
        return state
    final = [RunKey(k.trial, k.seed, extended_cap, cap) if capped(summaries[k]) else k for k in full]
    if step([key for key in final if key not in summaries]) is None:
        return state
    for key in final:
        state.finished.setdefault(key.trial, {})[key.seed] = key
    return state
