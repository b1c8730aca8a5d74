"""Cross-modal training of one method variant with one seed (paper §3.2–3.3): the ``Train`` task's identity (its
parameters, a warm start's parent, epoch caps) and its dispatch (here or under torchrun, continuing a shorter run);
the run itself is built and finished by ``models.training.run`` from ``pipeline.tasks.train_inputs.training_run``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import luigi
from luigi.freezing import recursively_unfreeze

from common.files import atomic_path
from common.settings import significant
from models.distributed import SINGLE_PROCESS, Distributed, init_from_environment, launched_by_torchrun
from models.trained import RECORD_FILE
from models.training import BEST_CHECKPOINT, HISTORY_FILE, LAST_CHECKPOINT
from models.training.checkpoint import continue_run, continued_from
from models.training.run import finish_training_run
from pipeline.config.checks import RunConfigurationError
from pipeline.config.variant_spec import merge_overrides
from pipeline.steps.selection import save_ranks
from pipeline.tasks.base import IdentityIntParameter, PipelineTask, VariantChoice
from pipeline.tasks.data import check_split_fits
from pipeline.tasks.representations import NeighborTables
from pipeline.tasks.train_inputs import (
    VOCABULARY_FILE,
    epoch_cap_setting,
    pair_inputs,
    training_run,
    trunk_inputs,
    with_epoch_cap,
    without_train_setting,
)
from task_engine.task import HashedTask
from task_engine.torchrun import TorchrunJob, run_with_torchrun

#: the module torchrun runs in each process of a data-parallel Train (it rebuilds the Train from its parameters)
TORCHRUN_ENTRY_POINT = "pipeline.run.train_ddp"


class VariantParams(VariantChoice):
    seed = IdentityIntParameter(default=0, description="training seed (model init, batches, flips)")
    runs_network = True

    def check_identity(self) -> None:
        if self.seed < 0:
            raise RunConfigurationError(f"--seed {self.seed}: a seed is >= 0")
        super().check_identity()


class Train(VariantParams, PipelineTask):
    """Trains a variant; keeps the best checkpoint by the profile's selection metric (a validation retrieval
    metric, or the validation loss); resumes a killed run.

    ``continue_from_epochs``: the same run with that smaller epoch cap is continued from its last checkpoint
    instead of training from the first epoch (a tuning trial that survives a rung, a run stopped by its cap).
    Nothing in a run depends on its cap but where it stops, so the continued run equals an uninterrupted one
    (``tests/test_tuning_schedule.py``); the parameter is therefore no part of the output's identity."""

    continue_from_epochs = luigi.IntParameter(
        default=0,
        significant=False,
        description="continue the same run trained with this smaller epoch cap (0: train from the start)",
    )
    tokenizes = True
    resumable = True
    outputs = {
        "checkpoint": BEST_CHECKPOINT,
        "last_checkpoint": LAST_CHECKPOINT,
        # how to build the trained model without the profile or today's code (models.trained), and its words
        "model": RECORD_FILE,
        "vocab": VOCABULARY_FILE,
        "history": HISTORY_FILE,
        # per validation pair, how its positive ranks at the best checkpoint (selection by a retrieval metric)
        "validation_ranks": "validation_ranks.npz",
    }

    @property
    def resources(self) -> dict[str, int]:
        """A GPU for each process this Train runs on this host (``nproc_per_node``; see HashedTask.resources)."""
        return {"gpu": self.train_settings().nproc_per_node} if super().resources else {}

    def runs_in_own_process(self) -> bool:
        # a data-parallel Train starts torchrun, whose processes are new ones already
        return self.train_settings().world_size == 1 and super().runs_in_own_process()

    def requires(self) -> dict[str, HashedTask]:
        required = pair_inputs(self)
        source = self.variant_spec().neighbor_source
        if source:
            required["neighbors"] = self.clone(NeighborTables, space=source)
        required.update(trunk_inputs(self, self.train_settings()))
        if (parent := self.parent()) is not None:
            required["parent"] = parent
        return required

    def parent(self) -> Train | None:
        """The run a warm-started run starts from: this one with ``train.trunk=frozen`` (under which the trunk's own
        settings act no more, so it is the frozen-trunk profile's run at these settings, where there is one);
        None when this run is not warm-started."""
        t = self.train_settings()
        if not t.warm_started:
            return None
        # a frozen trunk trains on cached features, which are neither flipped nor cropped: a run on pixels with
        # flips or crops has a parent without them
        frozen = {
            "trunk": "frozen",
            **({"horizontal_flip": False} if t.horizontal_flip else {}),
            **({"random_resized_crop": None} if t.random_resized_crop is not None else {}),
        }
        return self.clone(Train, point=merge_overrides(self.overrides(), {"train": frozen}), continue_from_epochs=0)

    def with_parent_point(self, parent: Train) -> Train:
        """The warm-started run of this variant and seed whose parent is ``parent`` (a frozen run, e.g. one a
        tuned choice's run was continued to): ``parent``'s point with this run's trunk."""
        # parent() set train.trunk=frozen on top of the run's own point: take it off again, and put back a trunk
        # this run's own point names (none when the run's trunk is the plan's)
        point = parent.overrides()
        for name in ("trunk", "horizontal_flip", "random_resized_crop"):
            point = without_train_setting(point, name)
            if name in dict(self.overrides().get("train", {})):
                point = merge_overrides(point, {"train": {name: getattr(self.train_settings(), name)}})
        return self.clone(Train, seed=parent.seed, point=point, continue_from_epochs=0)

    def config(self) -> dict[str, Any]:
        spec = self.variant_spec()
        variant = spec.as_dict()
        variant.pop("label")  # presentation only
        return {
            "variant": variant,
            # speed-only settings (loader threads, pinning, layout) are left out: they never change the model
            "train": significant(self.train_settings()),
            "neighbor_sample_k": self.settings.neighbors.sample_k if spec.neighbor_source else None,
            "seed": self.seed,
        }

    def produce(self, work_dir: Path) -> dict[str, Any]:
        """Trains here, or with ``nproc_per_node * nnodes`` > 1 in processes torchrun starts
        (``pipeline.run.train_ddp``), rank 0 of which writes the files and the summary returned here."""
        t = self.train_settings()
        check_split_fits(self.requires()["split"])  # before any training
        continued = self.start_from_shorter_run(work_dir)
        if t.world_size > 1 and not launched_by_torchrun():
            summary = run_with_torchrun(self.torchrun_job(work_dir), work_dir)
        else:
            summary = self.train_in(work_dir, init_from_environment())
        return {**summary, "continued_from": continued}

    def torchrun_job(self, work_dir: Path) -> TorchrunJob:
        """This Train's processes under torchrun: each runs :data:`TORCHRUN_ENTRY_POINT` on its parameters."""
        t = self.train_settings()
        arguments = ("--task", json.dumps(self.process_params(), sort_keys=True), "--work-dir", str(Path(work_dir).resolve()))
        return TorchrunJob(TORCHRUN_ENTRY_POINT, arguments, t.nproc_per_node, t.nnodes, t.rdzv_endpoint, self.signature(), self.task_id)

    def epoch_cap(self) -> str:
        """The setting that caps this run's epochs (:func:`epoch_cap_setting`)."""
        return epoch_cap_setting(self.train_settings())

    def max_epochs(self) -> int:
        return int(getattr(self.train_settings(), self.epoch_cap()))

    def default_epoch_cap(self) -> int:
        """The epoch cap this variant has when the user's overrides do not set one."""
        cap = self.epoch_cap()
        return int(getattr(self.clone(Train, point=without_train_setting(self.overrides(), cap)).train_settings(), cap))

    def overrides(self) -> dict[str, Any]:
        """This run's point (a tuning trial's changes to the variant; the epoch cap of a continued run)."""
        return recursively_unfreeze(self.point)

    def with_epochs(self, epochs: int, continue_from_epochs: int = 0) -> Train:
        """This run with epoch cap ``epochs`` (continuing the run of ``continue_from_epochs`` when given)."""
        overrides = with_epoch_cap(self.overrides(), epochs, self.default_epoch_cap(), self.epoch_cap())
        return self.clone(Train, point=overrides, continue_from_epochs=continue_from_epochs)

    def shorter_run(self) -> Train:
        """This run with the epoch cap ``continue_from_epochs`` (what it continues)."""
        return self.with_epochs(self.continue_from_epochs)

    def start_from_shorter_run(self, work_dir: Path) -> str | None:
        """With ``continue_from_epochs`` and no checkpoint of this run yet, copy the shorter run's checkpoints
        and history into ``work_dir`` so the trainer resumes from them (:func:`continue_run`); the shorter run's
        folder, or None."""
        if (Path(work_dir) / LAST_CHECKPOINT).exists():
            return continued_from(work_dir)
        if not self.continue_from_epochs:
            return None
        if self.continue_from_epochs >= self.max_epochs():
            raise ValueError(
                f"continue_from_epochs={self.continue_from_epochs} must be below this run's epoch cap {self.max_epochs()}"
            )
        source = self.shorter_run()
        if not source.complete():
            return None  # trained from the first epoch: the same result, only slower
        continue_run(source.output_dir(), work_dir)
        return str(source.output_dir())

    def train_in(self, work_dir: Path, distributed: Distributed = SINGLE_PROCESS) -> dict[str, Any]:
        """Train into ``work_dir`` as this process's part of ``distributed`` (a single process by default): the
        run built from this Train's inputs (:func:`training_run`), fitted and finished (the record sealed beside
        the best checkpoint with the vocabulary, :func:`finish_training_run`); its summary."""
        run, scorer = training_run(self, work_dir, distributed)
        result = run.trainer.fit()
        summary = finish_training_run(
            run,
            result,
            vocabulary=self.requires()["words"].output_path("vocab"),
            selection=scorer.describe(run.settings.selection) if scorer is not None else {"metric": "val_loss"},
        )
        if scorer is not None and (Path(work_dir) / BEST_CHECKPOINT).exists():
            # the best checkpoint's per-pair validation ranks, for a paired comparison of runs (Tune)
            best_pass, _ = run.trainer.validate_best()
            if distributed.is_main:
                with atomic_path(self.work_path(work_dir, "validation_ranks")) as tmp, open(tmp, "wb") as handle:
                    save_ranks(handle, scorer.ranks(best_pass.image, best_pass.text))
        return summary
