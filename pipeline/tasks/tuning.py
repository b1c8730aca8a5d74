"""The tuned protocol: every variant with a search space is given the same number of trials, chosen on the
validation split only, and its report seeds are then trained and evaluated at the chosen settings.

``Tune`` walks the successive-halving schedule of its variant (the decisions are
:mod:`pipeline.steps.tuning`): every trial trains the first rung's epochs with every trial seed, the best
share continues from its checkpoints rung by rung and then to the end, and a finished run that was still
improving at its cap continues to the extended cap. Each step's Trains are Luigi dynamic dependencies (which
trials continue is known only once the rung has run). ``selection.json`` holds every trial's settings, its
per-seed scores at every rung it reached, where it stopped, the choice, the runner-up and their paired
difference. ``TunedRuns`` trains the report's seeds at the choice (continuing a capped run the same way) and
asks for their Evaluate. A Train at settings some other task already trained is that task's output.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from luigi.freezing import recursively_unfreeze

from evaluation.selection_metrics import SELECTION_METRICS, ValidationRanking
from pipeline.config.variant_spec import SearchSpace, VariantError, merge_overrides
from pipeline.steps.selection import load_ranks
from pipeline.steps.tuning import (
    HALVING_RULE,
    SELECTION_RULE,
    TIE_RULE,
    RunKey,
    ScheduleState,
    TuningSettings,
    capped,
    choose,
    compare_trials,
    rung_plan,
    seed_mean,
    walk_schedule,
)
from pipeline.tasks.base import PipelineTask, VariantChoice
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.training import Train
from task_engine.outputs import write_json
from task_engine.task import HashedTask


def final_run(train: Train, tuning: TuningSettings) -> Train:
    """The run a report reads for ``train``: itself, or, when its best epoch was its cap, the same run continued
    to the extended cap; when it is warm-started, the trunk's run (never extended: it follows a fixed rule) from
    its parent so finished."""
    if (parent := train.parent()) is not None:
        return train.with_parent_point(final_run(parent, tuning))
    if not capped(train.meta()["summary"]):
        return train
    epochs = train.train_settings().epochs
    return train.with_epochs(tuning.extended_cap(epochs), continue_from_epochs=epochs)


def run_record(train: Train) -> dict[str, Any]:
    """What ``selection.json`` keeps of one trial seed's run."""
    summary = train.meta()["summary"]
    return {
        "score": float(summary["best_score"]),
        "best_epoch": int(summary["best_epoch"]),
        "epochs": int(summary["epochs"]),
        "max_epochs": int(summary["max_epochs"]),
        "capped": capped(summary),
        "val_rsum": summary.get("best_val_rsum"),
        "train": str(train.output_dir()),
    }


class Tune(VariantChoice, PipelineTask):
    """Trains the variant's trials on the successive-halving schedule and chooses the one with the best mean
    validation score over the trial seeds; ``selection.json`` holds every trial, the rungs, the choice, the
    runner-up, their paired difference and the rules. Nothing here reads the test split: a trial's score is
    its Trains' validation summaries and per-pair validation ranks."""

    outputs = {"selection": "selection.json"}

    # ------------------------------------------------------------------ the trials
    def search_space(self) -> SearchSpace:
        spec = self.variant_spec()
        if spec.search_space is None:
            raise VariantError(
                f"variant {self.variant!r} declares no search space (pipeline/config/variants.py), so it cannot be tuned"
            )
        return spec.search_space

    def trials(self) -> list[dict[str, Any]]:
        """The search-space points this variant is tried at (flat ``{knob: value}``)."""
        tuning = self.settings.tuning
        return self.search_space().trials(tuning.budget, tuning.draw_seed)

    def trial_overrides(self, point: dict[str, Any]) -> dict[str, Any]:
        """This task's own point (none in a run: the user's changes are the plan's), the trial's on top."""
        return merge_overrides(recursively_unfreeze(self.point), SearchSpace.overrides(point))

    def trial_train(self, point: dict[str, Any], seed: int) -> Train:
        """The trial's run with ``seed`` at the variant's own epoch cap. When the trunk trains from a warm start,
        the trials are the frozen-trunk runs it starts from (its parents): the head and the method's knobs are
        tuned there, as the frozen profile tunes them, and the trunk's run follows at a fixed rule (``TunedRuns``)."""
        run = self.clone(Train, seed=seed, point=self.trial_overrides(point))
        return run.parent() or run

    def metric(self) -> tuple[str, bool]:
        """The selection metric's name and whether higher is better."""
        name = self.train_settings().selection
        return name, SELECTION_METRICS[name].higher_is_better

    def requires(self) -> dict[str, list[Train]]:
        """The first step of the schedule, which never depends on a result: every trial's first rung (its
        whole run without rungs), with every trial seed. The later steps are dynamic dependencies."""
        return {"first_step": self.first_step()}

    def first_step(self) -> list[Train]:
        rungs = rung_plan(self.settings.tuning.rung_epochs, self.cap())
        epochs = rungs[0] if rungs else self.cap()
        return [
            self.train_of(RunKey(trial, seed, epochs))
            for trial in range(len(self.trials()))
            for seed in self.settings.tuning.trial_seeds
        ]

    # ------------------------------------------------------------------ the schedule
    def cap(self) -> int:
        """The trials' own epoch cap (the variant's, with the user's overrides; a warm start's parents')."""
        return self.train_settings().epochs

    def train_of(self, key: RunKey) -> Train:
        """The Train a run of the schedule is."""
        run = self.trial_train(self.trials()[key.trial], key.seed)
        return run.with_epochs(key.epochs, key.continue_from)

    def schedule(self) -> ScheduleState:
        """Walk the schedule as far as the finished Trains allow (every decision made again, the same way)."""
        tuning = self.settings.tuning
        _, higher = self.metric()

        def summary_of(key: RunKey) -> dict[str, Any] | None:
            train = self.train_of(key)
            return train.meta()["summary"] if train.complete() else None

        return walk_schedule(
            len(self.trials()),
            tuning.trial_seeds,
            tuning.rung_epochs,
            self.cap(),
            tuning.extended_cap(self.cap()),
            tuning.reduction_factor,
            higher,
            summary_of,
        )

    def run(self) -> Iterator[list[Train]]:  # a Luigi task with dynamic dependencies is a generator
        while pending := self.schedule().pending:
            yield [self.train_of(key) for key in pending]
        super().run()

    # ------------------------------------------------------------------ the record
    def config(self) -> dict[str, Any]:
        tuning = self.settings.tuning
        name, higher = self.metric()
        return {
            "space": {knob: list(values) for knob, values in self.search_space().values.items()},
            "budget": tuning.budget,
            "draw_seed": tuning.draw_seed,
            "trial_seeds": list(tuning.trial_seeds),
            "metric": {"name": name, "higher_is_better": higher},
            "halving": {
                "rung_epochs": list(tuning.rung_epochs),
                "reduction_factor": tuning.reduction_factor,
                "rule": HALVING_RULE,
            },
            "extended_epochs": tuning.extended_cap(self.train_settings().epochs),
            "rule": SELECTION_RULE,
            "tie_rule": TIE_RULE,
            "bootstrap_resamples": tuning.bootstrap_resamples,
        }

    def chosen_overrides(self) -> dict[str, Any]:
        """The chosen trial's point (after this task has run)."""
        selection = self.load("selection")
        return self.trial_overrides(selection["trials"][selection["chosen"]]["point"])

    def produce(self, work_dir: Path) -> dict[str, Any]:
        state = self.schedule()
        if state.pending:
            raise RuntimeError(f"{self.task_id}: the schedule still waits for {len(state.pending)} Train(s)")
        selection = selection_record(self, state)
        write_json(self.work_path(work_dir, "selection"), selection)
        chosen = selection["trials"][selection["chosen"]]
        return {"chosen": selection["chosen"], "chosen_point": chosen["point"], "score": chosen["score"], "tie": selection["tie"]}


def selection_record(task: Tune, state: ScheduleState) -> dict[str, Any]:
    """``selection.json``: the configuration, every trial and the choice with its paired comparison."""
    name, higher = task.metric()
    points = task.trials()
    finished = {
        trial: {seed: task.train_of(key) for seed, key in runs.items()} for trial, runs in state.finished.items()
    }
    finished_scores = {
        i: seed_mean({seed: run_record(run)["score"] for seed, run in runs.items()}) for i, runs in finished.items()
    }
    chosen, runner_up = choose(finished_scores, higher)
    trials = []
    for i, point in enumerate(points):
        trial: dict[str, Any] = {
            "point": point,
            "settings": SearchSpace.overrides(point),
            "rungs": [
                {"epochs": rung["epochs"], "scores": {str(s): v for s, v in rung["scores"][i].items()}, "mean": rung["means"][i]}
                for rung in state.rungs
                if i in rung["scores"]
            ],
            "stopped_at_rung": state.stopped_at.get(i),
        }
        if i in finished:
            seeds = {str(seed): run_record(run) for seed, run in finished[i].items()}
            trial.update(
                {
                    "score": finished_scores[i],
                    "seeds": seeds,
                    "val_rsum": float(np.mean([r["val_rsum"] for r in seeds.values() if r["val_rsum"] is not None] or [np.nan])),
                    "capped": any(r["capped"] for r in seeds.values()),
                    "extended": any(r["max_epochs"] > task.cap() for r in seeds.values()),
                }
            )
        trials.append(trial)
    metric, n_way = SELECTION_METRICS[name], task.train_settings().selection_n_way
    comparison, why_not = None, None
    if runner_up is None:
        why_not = "the only finished trial"
    else:
        comparison, why_not = paired_comparison(task, {seed: finished[chosen][seed] for seed in finished[chosen]}, finished[runner_up], higher)
    tie = None if comparison is None else not comparison["resolved"]
    decided_by = why_not or (TIE_RULE if tie else "a resolved difference")
    # a trial the halving stopped at a rung was never trained further, so a tie with it cannot be read at the
    # report's seeds: each one is compared with the chosen trial at the rung it stopped at (both trained the same
    # epochs there), and the report names every one not resolved below the choice as a tie not tested
    rung_comparisons = {}
    for index, rung in sorted(state.stopped_at.items()):
        epochs = state.rungs[rung]["epochs"]
        runs_at = {trial: {seed: task.train_of(RunKey(trial, seed, epochs)) for seed in task.settings.tuning.trial_seeds} for trial in (chosen, index)}
        at_rung, why = paired_comparison(task, runs_at[chosen], runs_at[index], higher)
        rung_comparisons[str(index)] = {"rung": rung, "epochs": epochs, **(at_rung or {"why_not": why})}
    rung_ties = sorted(int(i) for i, c in rung_comparisons.items() if "resolved" in c and not c["resolved"])
    return {
        "variant": task.variant,
        "label": task.variant_spec().label,
        **task.config(),
        "metric": {"name": name, "label": metric.label_for(n_way), "higher_is_better": higher},
        "n_points": len(task.search_space().grid()),
        "trials": trials,
        "chosen": chosen,
        "runner_up": runner_up,
        "chosen_point": points[chosen],
        "chosen_settings": SearchSpace.overrides(points[chosen]),
        "comparison": comparison,
        "tie": tie,
        "decided_by": decided_by,
        "rung_comparisons": rung_comparisons,
        # trials stopped at a rung whose runs there were not resolved below the chosen trial's: ties not tested
        "rung_ties": rung_ties,
    }


def paired_comparison(
    task: Tune, chosen: dict[int, Train], other: dict[int, Train], higher: bool
) -> tuple[dict[str, Any] | None, str | None]:
    """The chosen runs against another trial's (per trial seed), paired by validation pair and seed, or None and
    why not."""
    name = task.train_settings().selection
    metric, n_way = SELECTION_METRICS[name], task.train_settings().selection_n_way
    if metric.per_query is None:
        return None, f"no paired comparison: {name} has no per-pair values"
    outcomes = {
        key: {seed: metric.per_query(ValidationRanking(load_ranks(run.output_path("validation_ranks")), n_way)) for seed, run in runs.items()}
        for key, runs in (("chosen", chosen), ("other", other))
    }
    # the per-pair values must average to the scores the choice was made on (not so for the layout-aware rsum of
    # several captions per image, whose per-pair values rank differently)
    reproduced = all(
        abs(values.mean() - run_record(runs[seed])["score"]) < 1e-9
        for key, runs in (("chosen", chosen), ("other", other))
        for seed, values in outcomes[key].items()
    )
    if not reproduced:
        return None, f"no paired comparison: the per-pair values of {name} do not reproduce its scores here"
    return compare_trials(outcomes["chosen"], outcomes["other"], higher, task.settings.tuning.bootstrap_resamples), None


class TunedRuns(VariantChoice, PipelineTask):
    """The report seeds of one tuned variant, trained and evaluated on test at its chosen settings; a run
    whose best epoch is its cap is continued to the extended cap first (the rule of the trials). When the choice
    was a tie, the report seeds are trained and evaluated at the runner-up's settings too, so the report can say
    whether each conclusion holds under both tied choices (issue 45)."""

    outputs = {"runs": "tuned_runs.json"}

    def report_seeds(self) -> list[int]:
        return list(self.run_plan.seeds_for(self.variant))

    def requires(self) -> dict[str, Tune]:
        return {"tune": self.clone(Tune)}

    def config(self) -> dict[str, Any]:
        # its evaluations are dynamic dependencies (chosen once Tune has run), so what they hash besides the chosen
        # Trains is hashed here: their settings and their other inputs. Two runs that differ there (eval.*,
        # doc2vec.*) get an output each instead of rewriting one in place
        evaluate = self.clone(Evaluate, seed=self.report_seeds()[0])
        inputs = sorted(task.signature() for task in evaluate.upstream() if not isinstance(task, Train))
        return {"seeds": self.report_seeds(), "evaluations": {"config": evaluate.config(), "inputs": inputs}}

    def choices(self) -> dict[str, dict[str, Any]]:
        """The settings the report seeds train at: the choice, and the runner-up's when the choice was a tie."""
        tune = self.requires()["tune"]
        selection = tune.load("selection")
        choices = {"chosen": tune.chosen_overrides()}
        if selection.get("tie") and selection.get("runner_up") is not None:
            choices["runner_up"] = tune.trial_overrides(selection["trials"][selection["runner_up"]]["point"])
        return choices

    def trains(self, choice: str = "chosen") -> list[Train]:
        """The report seeds' runs at a choice's settings and the variant's own epoch cap (with a warm start: the
        frozen-trunk runs the trunk's runs start from, as the trials were)."""
        overrides = self.choices()[choice]
        runs = [self.clone(Train, seed=seed, point=overrides) for seed in self.report_seeds()]
        return [run.parent() or run for run in runs]

    def extended_trains(self, choice: str = "chosen") -> list[Train]:
        """Each seed's run of :meth:`trains`, continued to the extended cap when it was capped (readable once
        trains() ran)."""
        return [final_run(train, self.settings.tuning) for train in self.trains(choice)]

    def final_trains(self, choice: str = "chosen") -> list[Train]:
        """The runs the report reads: each report seed's run at the choice as :func:`final_run` finishes it (with a
        warm start, the trunk's run from each of :meth:`extended_trains`)."""
        overrides = self.choices()[choice]
        return [final_run(self.clone(Train, seed=seed, point=overrides), self.settings.tuning) for seed in self.report_seeds()]

    def evaluations(self, choice: str = "chosen") -> list[Evaluate]:
        """The Evaluate of each seed's final run (readable once final_trains() ran)."""
        return [
            self.clone(Evaluate, seed=train.seed, point=train.overrides()) for train in self.final_trains(choice)
        ]

    def frozen_start_evaluations(self) -> list[Evaluate]:
        """With a warm start, the Evaluate of each report seed's frozen-trunk run at the choice (the learning
        tower's start, the frozen profile's run where there is one): the report pairs the two towers by seed and
        test item. None otherwise."""
        if not self.train_settings().warm_started:
            return []
        return [self.clone(Evaluate, seed=train.seed, point=train.overrides()) for train in self.extended_trains()]

    def runner_up_evaluations(self) -> list[Evaluate]:
        """The report seeds' evaluations at the runner-up's settings (none unless the choice was a tie)."""
        return self.evaluations("runner_up") if "runner_up" in self.choices() else []

    def dynamic_upstream(self) -> list[HashedTask]:
        """The report seeds' runs and evaluations at each choice's settings (readable once Tune has run)."""
        return [
            task
            for choice in self.choices()
            for task in [*self.trains(choice), *self.extended_trains(choice), *self.final_trains(choice), *self.evaluations(choice)]
        ] + self.frozen_start_evaluations()

    def run(self) -> Iterator[list[HashedTask]]:  # a Luigi task with dynamic dependencies is a generator
        choices = list(self.choices())
        yield [train for choice in choices for train in self.trains(choice)]
        yield [train for choice in choices for train in self.extended_trains(choice)]
        yield [train for choice in choices for train in self.final_trains(choice)]
        yield [evaluation for choice in choices for evaluation in self.evaluations(choice)] + self.frozen_start_evaluations()
        super().run()

    def produce(self, work_dir: Path) -> dict[str, Any]:
        choices = self.choices()
        runs = {
            "variant": self.variant,
            "overrides": choices["chosen"],
            "evaluations": {str(e.seed): str(e.output_dir()) for e in self.evaluations()},
            "extended": [train.seed for train in self.extended_trains() if train.continue_from_epochs],
        }
        if self.train_settings().warm_started:
            runs["frozen_start"] = {"evaluations": {str(e.seed): str(e.output_dir()) for e in self.frozen_start_evaluations()}}
        if "runner_up" in choices:
            runs["runner_up"] = {
                "overrides": choices["runner_up"],
                "evaluations": {str(e.seed): str(e.output_dir()) for e in self.runner_up_evaluations()},
                "extended": [train.seed for train in self.extended_trains("runner_up") if train.continue_from_epochs],
            }
        write_json(self.work_path(work_dir, "runs"), runs)
        return runs
