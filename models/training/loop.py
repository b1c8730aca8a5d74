"""The training loop (paper §3.3): epochs of steps, validation, plateau LR decay, early stopping and the best
model by validation, resumable from its checkpoints — composed from the modules of this package."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from models.cached_views import CachedViews
from models.distributed import SINGLE_PROCESS, Distributed
from models.loader import DeviceBatch, HostBatch
from models.losses import Loss
from models.losses.checks import value_checks
from models.settings import TrainSettings
from models.trained import read_model_checkpoint
from models.training.checkpoint import BEST_CHECKPOINT, Checkpoints, TrainingState, non_finite
from models.training.data import PairData, StepPlan, TrainingData, plan_step
from models.training.history import TensorBoardLog, TrainResult, write_history
from models.training.setup import build_setup
from models.training.static_step import static_step_for
from models.training.step import LogReading, StepLog, StepLosses, train_step
from models.training.validation import ValidationPass, validation_order, validation_pass


def cached_views_of(settings: TrainSettings, data: PairData) -> CachedViews | None:
    """The views a run's training epochs draw from (None: no augmented views), checked against the cache."""
    count = data.cached_view_count
    wanted = settings.trunk_views if settings.trunk_mode.trains_trunk and settings.trunk_mode.cached_features else 1
    if count != wanted:
        raise ValueError(f"train.trunk_views={wanted}, but the cached trunk features hold {count} view(s) per image")
    return CachedViews(count, settings.trunk_crop_scale) if count > 1 else None


class Trainer:
    """Trains ``model`` with ``losses`` on ``data``'s train positions, validating on its val positions after
    every epoch, into ``work_dir`` (checkpoints, ``history.csv``); :meth:`fit` runs (or resumes) it. A run is
    assembled by :func:`models.training.run.build_training_run` (the model from its record, the warm start)."""

    def __init__(
        self,
        model: nn.Module,
        losses: Sequence[Loss],
        data: TrainingData,
        settings: TrainSettings,
        *,
        seed: int,
        work_dir: Path,
        device: torch.device | None = None,
        progress: bool | None = None,
        distributed: Distributed = SINGLE_PROCESS,
        static_step: bool = False,
        starting_weights_compete: bool = False,
    ) -> None:
        """``static_step`` (tests only): run the fixed-shape step of ``static_step.py`` even where it is not
        captured (the CPU), to compare it with the plain step; on CUDA ``settings.cuda_graphs`` chooses.
        ``starting_weights_compete``: the model as given is validated before the first epoch and competes for the
        best checkpoint as epoch 0 (a warm start: its parent's model), so a run that learns nothing on validation
        keeps what it started from."""
        if settings.selection_metric.ranks_pairs and data.validation_score is None:
            raise ValueError(
                f"selection {settings.selection!r} needs validation_score, the function that scores the "
                "validation embeddings (pipeline.tasks.training builds it from evaluation.protocol), or set "
                "selection='val_loss'"
            )
        self.validation_score = data.validation_score
        self.setup = build_setup(
            model, losses, data.pairs, data.train_positions, settings, seed, data.neighbors, device, distributed
        )
        self.data = data.pairs
        self.settings = settings
        self.seed = seed
        self.work_dir = Path(work_dir)
        self.progress = progress
        self.distributed = distributed
        self.val_positions = validation_order(data.val_positions, data.pairs.group_ids)
        self.starting_weights_compete = starting_weights_compete
        #: the cached views of each image and the pairs a training epoch reads (a view drawn per image)
        self.views = cached_views_of(settings, data.pairs)
        self.epoch_data = data.pairs
        #: the fixed-shape (CUDA-graph) step, or None: the plain step
        self.static_step = static_step_for(self.setup, settings, distributed, force=static_step)
        #: whether this run's losses have checked their inputs' values yet (on the first step only)
        self._inputs_checked = False
        s = self.setup
        self.checkpoints = Checkpoints(
            self.work_dir,
            TrainingState(s.model, s.optimizer, s.scheduler, s.sampler, s.flip_generator, s.scaler),
            distributed,
        )

    # the parts callers and tests reach for
    @property
    def model(self) -> nn.Module:
        return self.setup.model

    @property
    def device(self) -> torch.device:
        return self.setup.device

    @property
    def sampler(self):
        return self.setup.sampler

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.setup.optimizer

    @property
    def loader(self):
        return self.setup.loader

    # ------------------------------------------------------------------ steps
    def epoch_plans(self) -> Iterator[StepPlan]:
        """This process's share of each of the epoch's global batches (batches no rank can share skipped)."""
        for batch in self.sampler.epoch():
            if (plan := plan_step(batch, self.data, self.distributed)) is not None:
                yield plan

    def host_batch(self, plan: StepPlan) -> HostBatch:
        """What a loader worker prepares for a training step: this rank's rows on the host."""
        # the static step takes every text at the table's full width, so every batch has one shape
        width = self.data.tokens.shape[1] if self.static_step is not None else plan.text_width
        return self.epoch_data.host_batch(plan.local.rows, self.settings.image_size, width)

    def train_step(self, plan: StepPlan, loaded: DeviceBatch) -> StepLosses:
        if self.static_step is not None and self.static_step.accepts(plan, loaded):
            return self.static_step(plan, loaded)
        return train_step(self.setup, self.settings, self.distributed, plan, loaded)

    def validate(self) -> tuple[ValidationPass, dict[str, float]]:
        """One pass over the validation split: its loss, embeddings (when scored) and named scores."""
        scored = self.validation_score is not None
        result = validation_pass(
            self.setup,
            self.data,
            self.val_positions,
            self.settings.batch_size,
            self.settings.image_size,
            self.distributed,
            keep_embeddings=scored,
        )
        scores = {"val_loss": result.loss}
        if scored:
            scores.update(self.validation_score(result.image, result.text))
        return result, scores

    def validate_best(self) -> tuple[ValidationPass, dict[str, float]]:
        """:meth:`validate` of the best checkpoint (``model_best.pt``, loaded into the model): the validation
        embeddings and scores a comparison of runs reads, the same pass that selected it."""
        state = read_model_checkpoint(self.work_dir / BEST_CHECKPOINT)
        self.model.load_state_dict(state["model"])
        return self.validate()

    # ------------------------------------------------------------------ loop
    def _kept(self, epoch: int) -> str:
        """What a failed epoch leaves: nothing is written before an epoch ends, so the files of ``epoch``."""
        if epoch < 1:
            return f"no epoch had been checkpointed in {self.work_dir} yet"
        return f"the last good checkpoint (epoch {epoch}) is kept in {self.work_dir}"

    def _train_epoch(self, epoch: int) -> tuple[LogReading, int]:
        """One epoch of steps; its loss sums and the rows it trained. A non-finite loss is found when the
        losses are read (every ``log_every_steps`` steps and at the end): the model and optimiser are then
        put back to their state at the start of the epoch, the last checkpointed one, and the error names
        the epoch and the first bad batch. Nothing is written during an epoch, so no file ever holds it."""
        start_state = copy.deepcopy((self.model.state_dict(), self.optimizer.state_dict()))
        draw = self.views.epoch_draw(self.seed, epoch, len(self.data.image_features)) if self.views is not None else None
        self.epoch_data = self.data.with_views(draw)
        log, rows_seen = StepLog(), 0
        per_epoch = self.sampler.batches_per_epoch
        bar = tqdm(
            self.loader(self.epoch_plans(), self.host_batch),
            total=per_epoch,
            desc=f"epoch {epoch}/{self.settings.epochs}",
            disable=True if self.progress is False or not self.distributed.is_main else None,  # None: a terminal
            leave=False,
        )
        for index, (plan, loaded) in enumerate(bar):
            # the losses' input checks read values back: once per run is enough (the model is the same)
            with value_checks(not self._inputs_checked):
                log.add(self.train_step(plan, loaded), index + 1)
            self._inputs_checked = True
            rows_seen += len(plan.merged.rows)
            if (index + 1) % self.settings.log_every_steps == 0 or index + 1 == per_epoch:
                self._check_finite(log.read(), epoch, start_state, bar)
        reading = log.read()
        self._check_finite(reading, epoch, start_state, bar)
        return reading, rows_seen

    def _check_finite(self, reading: LogReading, epoch: int, start_state: tuple, bar: tqdm) -> None:
        if reading.first_non_finite is not None:
            self.model.load_state_dict(start_state[0])
            self.optimizer.load_state_dict(start_state[1])
            where = f"at epoch {epoch}, batch {reading.first_non_finite[0]}/{self.sampler.batches_per_epoch}"
            raise FloatingPointError(f"{reading.non_finite_message()} {where}; {self._kept(epoch - 1)}")
        if reading.steps:
            bar.set_postfix(loss=f"{reading.means()['loss']:.4f}")

    def fit(self) -> TrainResult:
        result = TrainResult(selection=self.settings.selection)
        start_epoch = self.checkpoints.resume(result)
        main = self.distributed.is_main  # rank 0 alone writes files
        board = TensorBoardLog(self.work_dir) if main else None
        if start_epoch == 0 and self.starting_weights_compete:
            # not checkpointed: a run killed before its first epoch ends validates its starting weights again
            _, scores = self.validate()
            row = {"epoch": 0, **scores, "lr": float(self.optimizer.param_groups[0]["lr"]), "train_seconds": 0.0}
            if result.record(row) and main:
                self.checkpoints.save_best(0)
            if main:
                write_history(self.work_dir, result.history)
        for epoch in range(start_epoch + 1, self.settings.epochs + 1):
            if result.plateaued(epoch - 1, self.settings.early_stopping_patience):
                result.stopped_early_at = epoch - 1
                break
            started = time.time()
            reading, rows_seen = self._train_epoch(epoch)
            train_seconds = time.time() - started
            if bad := non_finite(self.model.state_dict()):  # a finite loss can still step to inf weights
                raise FloatingPointError(f"non-finite weights {bad[:5]} after epoch {epoch}; {self._kept(epoch - 1)}")
            _, scores = self.validate()
            self.setup.scheduler.step(scores["val_loss"])  # the plateau decay follows the loss (§3.3)
            row = {
                "epoch": epoch,
                **scores,
                "lr": float(self.optimizer.param_groups[0]["lr"]),  # a device tensor in a CUDA-graph run
                "train_seconds": train_seconds,
                "rows_per_second": rows_seen / max(train_seconds, 1e-9),
                **{f"train_{name}": value for name, value in reading.means().items()},
            }
            if result.record(row) and main:
                self.checkpoints.save_best(epoch)
            if board is not None:
                board.add(row)
            if main:
                write_history(self.work_dir, result.history)
                self.checkpoints.save_last(epoch, result)
            # no rank starts an epoch before rank 0 has checkpointed the last one: a kill at any point then
            # resumes every rank from the same epoch
            self.distributed.barrier()
        if board is not None:
            board.close()
        return result
