"""The tuned protocol: every variant with a search space is given the same number of trials, chosen on the
validation split only, and its report seeds are then trained and evaluated at the chosen settings.

``Tune`` requires one ``Train`` per trial (the profile's trial seed; a trial at settings some other task
already trained is that task's output, by the output hash) and writes ``selection.json``. ``TunedRuns``
reads the choice and asks for the Evaluate of each report seed at it, as Luigi dynamic dependencies (the
settings are known only once Tune has run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from pipeline.base import HashedTask
from pipeline.io import write_json
from pipeline.steps.tuning import SELECTION_RULE, choose, trial_record
from pipeline.tasks.evaluation import Evaluate
from pipeline.tasks.params import DatasetParams, VariantChoice
from pipeline.tasks.training import Train
from pipeline.variant_spec import VariantError, merge_overrides


class Tune(VariantChoice, DatasetParams, HashedTask):
    """Trains the variant's trials (the profile's budget of points of its search space) and chooses the one
    with the highest validation rsum; ``selection.json`` holds every trial, the choice, the rule and the
    budget. Nothing here reads the test split: a trial's score is its Train's validation summary."""

    outputs = {"selection": "selection.json"}

    def trials(self) -> list[dict[str, Any]]:
        """The search-space points this variant is tried at (the space's own ``--variant-overrides`` shape)."""
        spec = self.variant_spec()
        if spec.search_space is None:
            raise VariantError(
                f"variant {self.variant!r} declares no search space (pipeline/variants.py), so it cannot be tuned"
            )
        tuning = self.settings.tuning
        return spec.search_space.trials(tuning.budget, tuning.draw_seed)

    def trial_overrides(self, trial: dict[str, Any]) -> dict[str, Any]:
        """The user's changes to the variant, with the trial's point on top."""
        return merge_overrides(recursively_unfreeze(self.variant_overrides), trial)

    def requires(self) -> dict[str, list[Train]]:
        seed = self.settings.tuning.trial_seed
        return {
            "trials": [
                self.clone(Train, seed=seed, variant_overrides=self.trial_overrides(trial)) for trial in self.trials()
            ]
        }

    def config(self) -> dict[str, Any]:
        tuning = self.settings.tuning
        return {
            "space": {path: list(values) for path, values in self.variant_spec().search_space.values.items()},
            "budget": tuning.budget,
            "draw_seed": tuning.draw_seed,
            "trial_seed": tuning.trial_seed,
            "rule": SELECTION_RULE,
        }

    def chosen_overrides(self) -> dict[str, Any]:
        """The user's changes with the chosen trial's point on top (after this task has run)."""
        selection = self.load("selection")
        return self.trial_overrides(selection["trials"][selection["chosen"]]["settings"])

    def produce(self, work_dir: Path) -> dict[str, Any]:
        trials = [
            trial_record(trial, train.meta()["summary"])
            for trial, train in zip(self.trials(), self.requires()["trials"], strict=True)
        ]
        chosen = choose(trials)
        selection = {
            "variant": self.variant,
            "label": self.variant_spec().label,
            **self.config(),
            "n_points": len(self.variant_spec().search_space.points()),
            "trials": trials,
            "chosen": chosen,
            "chosen_settings": trials[chosen]["settings"],
        }
        write_json(self.work_path(work_dir, "selection"), selection)
        return {"chosen": chosen, "chosen_settings": trials[chosen]["settings"], "val_rsum": trials[chosen]["val_rsum"]}


class TunedRuns(VariantChoice, DatasetParams, HashedTask):
    """The report seeds of one tuned variant, trained and evaluated on test at its chosen settings."""

    seeds = luigi.ListParameter(description="the report's training seeds of this variant")
    outputs = {"runs": "tuned_runs.json"}

    def requires(self) -> dict[str, Tune]:
        return {"tune": self.clone(Tune)}

    def config(self) -> dict[str, Any]:
        return {"seeds": [int(seed) for seed in self.seeds]}

    def evaluations(self) -> list[Evaluate]:
        """The Evaluate of each seed at the chosen settings (readable once Tune is complete)."""
        overrides = self.requires()["tune"].chosen_overrides()
        return [self.clone(Evaluate, seed=int(seed), variant_overrides=overrides) for seed in self.seeds]

    def run(self):  # noqa: ANN201 - a Luigi task with dynamic dependencies is a generator
        yield self.evaluations()
        super().run()

    def produce(self, work_dir: Path) -> dict[str, Any]:
        runs = {
            "variant": self.variant,
            "overrides": self.requires()["tune"].chosen_overrides(),
            "evaluations": {str(e.seed): str(e.output_dir()) for e in self.evaluations()},
        }
        write_json(self.work_path(work_dir, "runs"), runs)
        return runs
