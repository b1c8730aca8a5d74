"""The training loop: batches -> model embeddings -> summed named sub-losses, with plateau LR decay,
best-by-validation checkpointing and resumable, atomically written checkpoints (paper §3.3).
"""

from __future__ import annotations

import csv
import io
import math
import os
import random
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from common.files import atomic_path
from models.acceleration import amp_dtype, autocast, gradient_scaler, prepare_for_device
from models.batching import Batch, BatchSampler
from models.distributed import (
    SINGLE_PROCESS,
    Distributed,
    all_reduce_sum,
    broadcast_from_main,
    can_shard,
    gather_outputs,
    merge_shards,
    shard_batch,
)
from models.encoders import resize_batch
from models.loader import BatchLoader, DeviceBatch, HostBatch, LoaderSettings
from models.losses import Loss
from models.settings import TrainSettings

LAST_CHECKPOINT = "checkpoint_last.pt"
#: the checkpoint before the last one: what resume falls back to when the last one is unusable
PREV_CHECKPOINT = "checkpoint_prev.pt"
BEST_CHECKPOINT = "model_best.pt"
HISTORY_FILE = "history.csv"
#: what a resumable checkpoint must hold
CHECKPOINT_KEYS = frozenset(
    "epoch model optimizer scheduler sampler flip_generator torch_rng numpy_rng python_rng history "
    "best_epoch best_val_loss".split()
)


@dataclass
class PairData:
    """Everything the trainer reads, indexed by pair position."""

    images: np.ndarray  # uint8 [R, S, S, 3] image cache (may be a memmap)
    image_rows: np.ndarray  # [N] cache row of each pair
    tokens: np.ndarray  # int64 [N, L]
    lengths: np.ndarray  # int64 [N]
    group_ids: np.ndarray  # int64 [N]; pairs sharing an image/caption set share an id
    #: cached trunk features per image-cache row ([R, C] or [R, C, h, w]) for a frozen trunk; when given,
    #: image batches are these features instead of pixels
    image_features: np.ndarray | None = None

    def image_batch(self, positions: np.ndarray, size: int) -> Tensor:
        rows = self.image_rows[positions]
        if self.image_features is not None:
            return torch.from_numpy(np.asarray(self.image_features[rows], dtype=np.float32))
        return resize_batch(torch.from_numpy(np.ascontiguousarray(self.images[rows])), size)

    def text_batch(self, positions: np.ndarray, width: int | None = None) -> tuple[Tensor, Tensor]:
        """Tokens padded to ``width`` (default: the longest of ``positions``; a data-parallel rank pads to the
        global batch's longest, so every rank's outputs have one shape to gather), and the lengths."""
        lengths = self.lengths[positions]
        width = int(lengths.max()) if width is None else width
        return torch.from_numpy(self.tokens[positions, :width]), torch.from_numpy(lengths)

    def host_batch(self, positions: np.ndarray, size: int, width: int | None = None) -> HostBatch:
        """Images (pixels or cached features), tokens and lengths of ``positions``, on the host."""
        return HostBatch(self.image_batch(positions, size), *self.text_batch(positions, width))


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)
    best_epoch: int = -1
    best_val_loss: float = math.inf
    resumed_from_epoch: int = 0
    #: the epoch after which early stopping ended training (None: ran every epoch)
    stopped_early_at: int | None = None


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class StepPlan:
    """One global batch from the sampler as this process trains it: its own share (``local``, all of it in
    a single process), the batch the loss sees (``merged``: every rank's share; ``order`` maps the gathered
    rows to it) and where this rank's rows start among the gathered ones."""

    local: Batch
    shards: list[Batch]
    merged: Batch
    order: np.ndarray | None
    offset: int
    text_width: int


def loss_inputs(outputs: dict[str, Tensor], batch: Batch, group_ids: Tensor) -> dict[str, Tensor]:
    """Slice model outputs into the keywords of ``models.losses.base``: main rows and neighbor rows."""
    inputs = {key: value[: batch.n_main] for key, value in outputs.items()}
    inputs["group_ids"] = group_ids[: batch.n_main]
    if batch.neighbor_rows is not None:
        index = torch.from_numpy(batch.neighbor_rows).to(group_ids.device)
        for key, value in outputs.items():
            inputs[f"neighbor_{key}"] = value.index_select(0, index)
        inputs["neighbor_of"] = torch.from_numpy(batch.neighbor_of).to(group_ids.device)
        inputs["neighbor_group_ids"] = group_ids.index_select(0, index)
    return inputs


def cross_modal_group_ids(group_ids: np.ndarray, batch: Batch) -> np.ndarray:
    """Group ids of the batch rows with each in-batch anchor and its sampled neighbor merged into one group.

    In the ``in_batch`` layout the neighbor pair i' is a row of the cross-modal batch; left as is, image_i
    vs text_i' and image_i' vs text_i would be negatives, so L_sym would push apart the pairs L_text and
    L_img pull together. Rows of one group are never negatives of each other (``models.losses.base``), so
    merging the groups masks exactly those cross pairs (and keeps any group the rows already shared).
    """
    merged = np.array(group_ids, dtype=np.int64, copy=True)
    if batch.neighbor_rows is None:
        return merged
    for anchor, neighbor in zip(batch.neighbor_of, batch.neighbor_rows, strict=True):
        if neighbor >= batch.n_main:
            continue  # an extra row: outside the cross-modal pool
        keep, drop = merged[anchor], merged[neighbor]
        if keep != drop:
            merged[merged == drop] = keep
    return merged


def batch_loss_inputs(
    outputs: dict[str, Tensor], batch: Batch, group_ids: Tensor, mask_neighbor_pairs: bool
) -> dict[str, Tensor]:
    """The loss keywords of one training batch: ``group_ids`` (of every pair) taken at the batch's rows, an
    in-batch anchor and its neighbor merged into one group when ``mask_neighbor_pairs``."""
    batch_groups = group_ids[batch.rows].numpy()
    if mask_neighbor_pairs:
        batch_groups = cross_modal_group_ids(batch_groups, batch)
    device = next(iter(outputs.values())).device
    return loss_inputs(outputs, batch, torch.from_numpy(batch_groups).to(device))


def compute_losses(losses: Sequence[Loss], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every loss's named sub-losses, keyed ``<loss name>.<sub-loss>``."""
    parts: dict[str, Tensor] = {}
    for loss in losses:
        for part, value in loss(**inputs).items():
            parts[f"{loss.name}.{part}"] = value
    return parts


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        losses: Sequence[Loss],
        data: PairData,
        train_positions: np.ndarray,
        val_positions: np.ndarray,
        settings: TrainSettings,
        seed: int,
        work_dir: Path,
        neighbors: np.ndarray | None = None,
        device: torch.device | None = None,
        progress: bool | None = None,
        distributed: Distributed = SINGLE_PROCESS,
    ) -> None:
        needs_neighbors = [loss.name for loss in losses if loss.needs_neighbors]
        needs_groups = [loss.name for loss in losses if "group_mates" in loss.needs]
        group_ids = np.array(data.group_ids, dtype=np.int64)
        if needs_groups and np.bincount(group_ids[np.asarray(train_positions)]).max() < 2:
            raise ValueError(
                f"losses {needs_groups} need several pairs per group (e.g. the 5 captions of a COCO image), "
                "but every train group has one pair: use a dataset with group_id, or another loss"
            )
        if needs_neighbors and neighbors is None:
            raise ValueError(
                f"losses {needs_neighbors} need sampled semantic neighbors but no neighbor table was given: "
                "set the variant's neighbor_source to 'text' or 'image'"
            )
        if settings.trunk == "frozen" and data.image_features is None:
            raise ValueError(
                "trunk='frozen' trains on cached trunk features, but the pair data holds none: pass "
                "PairData(image_features=...) (the TrunkFeatures task's output)"
            )
        if settings.trunk == "frozen" and settings.horizontal_flip:
            raise ValueError(
                "horizontal_flip needs pixels, but a frozen trunk trains on cached features: set "
                "horizontal_flip=False (VSE++ and PVSE do not flip precomputed features either)"
            )
        self.distributed = distributed
        self.device = device or pick_device()
        if distributed.active and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", distributed.local_rank)  # one GPU per process
        self.model = prepare_for_device(model, self.device, settings.channels_last, settings.cudnn_benchmark)
        self.amp_dtype = amp_dtype(settings.amp, self.device)
        self.scaler = gradient_scaler(self.amp_dtype)
        #: what the training forward pass runs: the model itself, or its DistributedDataParallel wrapper,
        #: whose backward averages the gradients over ranks (checkpoints always hold the bare model's weights)
        self.train_model = self.model
        if distributed.active:
            on_cuda = self.device.type == "cuda"
            # static graph: every step uses the same parameters, and some never (the trunk's ImageNet head
            # stays in the model untrained): DDP learns that once instead of searching the graph every step
            self.train_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if on_cuda else None, static_graph=True
            )
        self.loader = BatchLoader(
            self.device,
            LoaderSettings.for_device(
                self.device, settings.num_workers, settings.prefetch_batches, settings.pin_memory
            ),
        )
        self.losses = [loss.to(self.device) for loss in losses]
        # validation loss: the neighbor-free parts, which every variant shares, so variants are comparable
        self.val_losses = [loss for loss in self.losses if not loss.needs_neighbors]
        if not self.val_losses:
            raise ValueError(
                f"every loss of {[loss.name for loss in losses]} needs sampled neighbors, so no validation loss "
                "can be computed: add a cross-modal loss (e.g. angular), as Eq. 8 does"
            )
        self.data = data
        # group members adjacent, so validation batches hold group mates too
        self.val_positions = np.asarray(val_positions)[np.argsort(group_ids[val_positions], kind="stable")]
        self.settings = settings
        self.seed = seed
        self.work_dir = Path(work_dir)
        self.progress = progress
        self.group_ids = torch.from_numpy(group_ids)
        self.mask_neighbor_pairs = settings.mask_neighbor_pairs
        # every rank samples the same global batches (same seed) and trains its share of each
        self.sampler = BatchSampler(
            np.asarray(train_positions),
            settings.batch_size * distributed.world_size,
            np.random.default_rng(seed),
            neighbors if needs_neighbors else None,
            settings.neighbor_mode,
            group_ids=group_ids[np.asarray(train_positions)] if needs_groups else None,
        )
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, mode="min", factor=settings.lr_factor, patience=settings.lr_patience
        )
        self.flip_generator = torch.Generator().manual_seed(seed)

    # ----------------------------------------------------------------- steps
    def _plan_batch(self, plan: StepPlan) -> HostBatch:
        """What a loader worker prepares for a training step: this rank's rows on the host."""
        return self.data.host_batch(plan.local.rows, self.settings.image_size, plan.text_width)

    def _plan(self, batch: Batch) -> StepPlan | None:
        """This rank's part of a global batch; None when it cannot give every rank an anchor (skipped)."""
        world = self.distributed.world_size
        if world == 1:
            return StepPlan(batch, [batch], batch, None, 0, int(self.data.lengths[batch.rows].max()))
        if not can_shard(batch, world):
            return None
        shards = [shard_batch(batch, rank, world) for rank in range(world)]
        merged, order = merge_shards(shards)
        rank = self.distributed.rank
        offset = sum(len(shard.rows) for shard in shards[:rank])
        return StepPlan(shards[rank], shards, merged, order, offset, int(self.data.lengths[batch.rows].max()))

    def _epoch_plans(self):
        for batch in self.sampler.epoch():
            if (plan := self._plan(batch)) is not None:
                yield plan

    def _flipped(self, images: Tensor, plan: StepPlan) -> Tensor:
        """Random horizontal flips, done on the device. The coins are tossed in this thread for the whole
        global batch in order (so any number of loader workers and ranks toss the same), a rank taking its
        rows' share; selecting flipped or original pixels is exact, so CPU runs are unchanged."""
        if not self.settings.horizontal_flip or self.data.image_features is not None:
            return images
        coins = torch.rand(len(plan.merged.rows), generator=self.flip_generator) < 0.5
        flip = coins[plan.offset : plan.offset + len(plan.local.rows)].to(images.device)
        return torch.where(flip.view(-1, 1, 1, 1), images.flip(dims=[2]), images)

    def _forward(self, model: nn.Module, loaded: DeviceBatch, images: Tensor) -> dict[str, Tensor]:
        """The model's outputs, under autocast when mixed precision is on; losses always take fp32."""
        with autocast(self.amp_dtype, self.device):
            outputs = model(images, loaded.tokens, loaded.lengths)
        return {key: value.float() for key, value in outputs.items()}

    def train_step(self, plan: StepPlan, loaded: DeviceBatch) -> dict[str, float]:
        self.train_model.train()
        outputs = self._forward(self.train_model, loaded, self._flipped(loaded.images, plan))
        if self.distributed.active:
            outputs = gather_outputs(outputs, plan.shards, plan.order)
        inputs = batch_loss_inputs(outputs, plan.merged, self.group_ids, self.mask_neighbor_pairs)
        parts = compute_losses(self.losses, inputs)
        total = torch.stack(list(parts.values())).sum()
        if not torch.isfinite(total):
            raise FloatingPointError(
                f"non-finite loss {total.item()} (parts: { {k: v.item() for k, v in parts.items()} })"
            )
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            total.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(total).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return {"loss": total.item(), **{name: value.item() for name, value in parts.items()}}

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean neighbor-free loss over validation batches of the global batch size (a loss over in-batch
        negatives depends on it); ranks take every world_size-th batch and the sums are added up."""
        self.model.eval()
        positions = self.val_positions
        batch_size = self.settings.batch_size * self.distributed.world_size
        batches = []
        for start in range(0, len(positions), batch_size):
            rows = positions[start : start + batch_size]
            if len(rows) < 2 or not bool((self.group_ids[rows] != self.group_ids[rows[0]]).any()):
                continue  # no in-batch negative
            batches.append(rows)
        mine = batches[self.distributed.rank :: self.distributed.world_size]
        totals, weights = 0.0, 0
        size = self.settings.image_size
        for rows, loaded in self.loader(mine, lambda rows: self.data.host_batch(rows, size)):
            batch = Batch(rows=rows, n_main=len(rows))
            outputs = self._forward(self.model, loaded, loaded.images)
            inputs = loss_inputs(outputs, batch, self.group_ids[rows].to(self.device))
            parts = compute_losses(self.val_losses, inputs)
            totals += float(torch.stack(list(parts.values())).sum()) * len(rows)
            weights += len(rows)
        if self.distributed.active:
            totals, weights = all_reduce_sum([totals, weights], self.device)
        if weights == 0:
            raise ValueError(
                "the validation split has fewer than 2 pairs: validation loss cannot be computed"
            )
        return totals / weights

    # ------------------------------------------------------------ checkpoints
    def _save(self, path: Path, payload: dict) -> None:
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        with atomic_path(path) as tmp:
            tmp.write_bytes(buffer.getvalue())

    def _checkpoint(self, epoch: int, result: TrainResult) -> None:
        self._keep_previous()
        self._save(
            self.work_dir / LAST_CHECKPOINT,
            {
                "epoch": epoch,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "sampler": self.sampler.state(),
                "flip_generator": self.flip_generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state(),
                "python_rng": random.getstate(),
                "history": result.history,
                "best_epoch": result.best_epoch,
                "best_val_loss": result.best_val_loss,
                # fp16 loss scale, so a resumed mixed-precision run scales as the uninterrupted one
                **({"grad_scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
            },
        )

    def _keep_previous(self) -> None:
        """Publish the current last checkpoint as ``checkpoint_prev.pt`` before it is replaced, so that a last
        checkpoint found unusable on resume still has a predecessor to fall back to.

        A hard link (a copy where the filesystem has none) rather than a rename: ``checkpoint_last.pt`` stays
        in place until its successor is complete, so a kill at any point leaves a loadable last checkpoint.
        """
        last = self.work_dir / LAST_CHECKPOINT
        if not last.exists():
            return
        with atomic_path(self.work_dir / PREV_CHECKPOINT) as tmp:
            tmp.unlink()
            try:
                os.link(last, tmp)
            except OSError:  # no hard links here
                shutil.copyfile(last, tmp)

    def _read_checkpoint(self, path: Path) -> tuple[dict | None, str]:
        """The checkpoint at ``path`` if it is safe to resume from, else ``None`` and why not.

        Checked before anything is applied, so a bad file can never leave the trainer half restored. Loaded
        to the CPU: the RNG states must be CPU tensors, and ``load_state_dict`` moves the rest to the model.
        """
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:  # truncated zip, random bytes, bad pickle: all mean "unreadable"
            return None, f"it cannot be loaded ({type(error).__name__}: {error})"
        if not isinstance(state, dict) or not CHECKPOINT_KEYS <= state.keys():
            found = sorted(state) if isinstance(state, dict) else type(state).__name__
            return None, f"it lacks checkpoint keys (has {found})"
        expected = self.model.state_dict()
        weights = state["model"]
        if not isinstance(weights, dict) or weights.keys() != expected.keys():
            return None, "its model weights do not name this model's parameters"
        if mismatched := [k for k, v in expected.items() if getattr(weights[k], "shape", None) != v.shape]:
            return None, f"its weights {mismatched[:5]} do not have this model's shapes"
        if bad := _non_finite({"model": weights, "optimizer": state["optimizer"]}):
            return None, f"it holds non-finite values in {bad[:5]}"
        return state, ""

    def _resume(self, result: TrainResult) -> int:
        """Restore the newest usable checkpoint and return its epoch (0: none); see :meth:`_resume_from_files`.

        In a data-parallel run rank 0 alone inspects, sets aside and chooses files; the others then load the
        checkpoint it chose and take its best-model record, so every rank continues from the same state.
        """
        if self.distributed.is_main:
            loaded = self._resume_from_files(result)
        if not self.distributed.active:
            return result.resumed_from_epoch
        loaded, best = broadcast_from_main(
            (loaded, (result.best_epoch, result.best_val_loss)) if self.distributed.is_main else None
        )
        if not self.distributed.is_main and loaded is not None:
            self._restore(torch.load(self.work_dir / loaded, map_location="cpu", weights_only=False), result)
        result.best_epoch, result.best_val_loss = best
        return result.resumed_from_epoch

    def _resume_from_files(self, result: TrainResult) -> str | None:
        """Restore the newest usable checkpoint (last, else prev); the name of the file restored, or None.

        An unusable checkpoint (unreadable, keys missing, not this model's shapes, non-finite weights) is never
        loaded: a ``RuntimeWarning`` names it and why, and it is renamed to ``<name>.corrupt-<n>`` (kept for
        inspection, nothing deleted) before the next one is tried. With neither usable, training restarts
        from epoch 0 with the trainer as constructed, which is what a fresh run with the same seeds does.
        Resuming from prev redoes the epochs after it; the RNG states it holds make them repeat exactly.
        """
        for name in (LAST_CHECKPOINT, PREV_CHECKPOINT):
            path = self.work_dir / name
            if not path.exists():
                continue
            state, problem = self._read_checkpoint(path)
            if state is not None:
                break
            aside = _set_aside(path, "corrupt")
            warnings.warn(
                f"checkpoint {path} is unusable: {problem}; moved to {aside.name}",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            self._check_best(-1, result)
            return None
        self._restore(state, result)
        # a kill between writing model_best.pt and checkpoint_last.pt leaves the best of the very next epoch:
        # the resumed run redoes that epoch exactly and writes the same file again, so it is kept as it is
        redone_next = name == LAST_CHECKPOINT and self._best_epoch_on_disk() == state["epoch"] + 1
        if not redone_next:
            self._check_best(state["best_epoch"], result)
        return name

    def _restore(self, state: dict, result: TrainResult) -> None:
        """Apply a checked checkpoint: weights, optimiser, schedules, every random state, the history."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state(state["sampler"])
        self.flip_generator.set_state(state["flip_generator"])
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        result.history = state["history"]
        result.best_epoch = state["best_epoch"]
        result.best_val_loss = state["best_val_loss"]
        result.resumed_from_epoch = state["epoch"]
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])

    def _best_epoch_on_disk(self) -> int | None:
        """The epoch ``model_best.pt`` holds; -1 without one, None when it cannot be read."""
        try:
            return torch.load(self.work_dir / BEST_CHECKPOINT, map_location="cpu", weights_only=True)["epoch"]
        except FileNotFoundError:
            return -1
        except Exception:  # noqa: BLE001 - unreadable: certainly not a usable best
            return None

    def _check_best(self, best_epoch: int, result: TrainResult) -> None:
        """Keep ``model_best.pt`` only if it holds the resumed run's ``best_epoch``.

        After a fallback (to prev, or to a restart), or a kill between writing the best and the last
        checkpoint, it may come from an epoch beyond the resumed one, of a trajectory now being redone. It is
        then renamed to ``model_best.pt.stale-<n>`` and best tracking restarts with the next epoch, so the
        file and the reported ``best_epoch`` always agree. With fixed seeds the redone epochs repeat the lost
        ones, so the run still ends with the same best as an uninterrupted one.
        """
        path = self.work_dir / BEST_CHECKPOINT
        held = self._best_epoch_on_disk()
        if held == best_epoch:
            return
        if held != -1:
            aside = _set_aside(path, "stale")
            warnings.warn(
                f"{path} holds {'an unreadable model' if held is None else f'epoch {held}'}, not the resumed "
                f"best epoch {best_epoch}; moved to {aside.name}, best model tracked again from here",
                RuntimeWarning,
                stacklevel=3,
            )
        result.best_epoch, result.best_val_loss = -1, math.inf

    def _write_history(self, history: list[dict]) -> None:
        columns = sorted({key for row in history for key in row}, key=lambda c: (c != "epoch", c))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns)
        writer.writeheader()
        writer.writerows(history)
        with atomic_path(self.work_dir / HISTORY_FILE) as tmp:
            tmp.write_text(buffer.getvalue())

    # ------------------------------------------------------------------ loop
    def _kept(self, epoch: int) -> str:
        """What a failed epoch leaves: nothing is written before an epoch ends, so the files of ``epoch``."""
        if epoch < 1:
            return f"no epoch had been checkpointed in {self.work_dir} yet"
        return f"the last good checkpoint (epoch {epoch}) is kept in {self.work_dir}"

    def _plateaued(self, result: TrainResult, last_epoch: int) -> bool:
        """Early stopping: the validation loss has not improved for ``early_stopping_patience`` epochs."""
        patience = self.settings.early_stopping_patience
        return patience is not None and result.best_epoch > 0 and last_epoch - result.best_epoch >= patience

    def fit(self) -> TrainResult:
        result = TrainResult()
        start_epoch = self._resume(result)
        main = self.distributed.is_main  # rank 0 alone writes files
        writer = _tensorboard_writer(self.work_dir) if main else None
        for epoch in range(start_epoch + 1, self.settings.epochs + 1):
            if self._plateaued(result, epoch - 1):
                result.stopped_early_at = epoch - 1
                break
            started = time.time()
            sums: dict[str, float] = {}
            n_batches = 0
            rows_seen = 0
            bar = tqdm(
                self.loader(self._epoch_plans(), self._plan_batch),
                total=self.sampler.batches_per_epoch,
                desc=f"epoch {epoch}/{self.settings.epochs}",
                disable=True if self.progress is False or not main else None,  # None: only on a terminal
                leave=False,
            )
            for index, (plan, loaded) in enumerate(bar):
                try:
                    logged = self.train_step(plan, loaded)
                except FloatingPointError as error:
                    where = f"at epoch {epoch}, batch {index + 1}/{self.sampler.batches_per_epoch}"
                    raise FloatingPointError(f"{error} {where}; {self._kept(epoch - 1)}") from error
                for name, value in logged.items():
                    sums[name] = sums.get(name, 0.0) + value
                n_batches += 1
                rows_seen += len(plan.merged.rows)
                bar.set_postfix(loss=f"{logged['loss']:.4f}")
            train_seconds = time.time() - started
            if bad := _non_finite(self.model.state_dict()):  # a finite loss can still step to inf weights
                raise FloatingPointError(
                    f"non-finite weights {bad[:5]} after epoch {epoch}; {self._kept(epoch - 1)}"
                )
            val_loss = self.validation_loss()
            self.scheduler.step(val_loss)
            row = {
                "epoch": epoch,
                "val_loss": val_loss,
                "lr": self.optimizer.param_groups[0]["lr"],
                "train_seconds": train_seconds,
                "rows_per_second": rows_seen / max(train_seconds, 1e-9),
                **{f"train_{name}": value / max(n_batches, 1) for name, value in sums.items()},
            }
            result.history.append(row)
            if val_loss < result.best_val_loss:
                result.best_val_loss = val_loss
                result.best_epoch = epoch
                if main:
                    self._save(
                        self.work_dir / BEST_CHECKPOINT, {"epoch": epoch, "model": self.model.state_dict()}
                    )
            if writer is not None:
                for name, value in row.items():
                    if name != "epoch":
                        writer.add_scalar(name, value, epoch)
            if main:
                self._write_history(result.history)
                self._checkpoint(epoch, result)
            # no rank starts an epoch before rank 0 has checkpointed the last one: a kill at any point then
            # resumes every rank from the same epoch
            self.distributed.barrier()
        if writer is not None:
            writer.close()
        return result


def _non_finite(tree: object, prefix: str = "") -> list[str]:
    """Dotted names of the floating-point tensors holding NaN or inf in nested dicts/lists of tensors."""
    if isinstance(tree, Tensor):
        return [prefix] if tree.is_floating_point() and not bool(torch.isfinite(tree).all()) else []
    items = (
        tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list | tuple) else []
    )
    return [
        bad for key, value in items for bad in _non_finite(value, f"{prefix}.{key}" if prefix else str(key))
    ]


def _set_aside(path: Path, tag: str) -> Path:
    """Rename ``path`` to the first free ``<name>.<tag>-<n>``: out of the way, but nothing lost."""
    n = 1
    while (aside := path.with_name(f"{path.name}.{tag}-{n}")).exists():
        n += 1
    path.replace(aside)
    return aside


def _tensorboard_writer(work_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # TensorBoard is optional
        return None
    return SummaryWriter(log_dir=str(work_dir / "tensorboard"))


@torch.no_grad()
def encode_pairs(
    model: nn.Module,
    data: PairData,
    positions: np.ndarray,
    image_size: int,
    batch_size: int = 256,
    device: torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings of ``positions`` (images, texts), in order; eval mode, no augmentation."""
    device = device or next(model.parameters()).device
    model.eval()
    # on CUDA, batches are prepared ahead by threads into pinned memory (on CPU: one at a time, as always)
    loader = BatchLoader(device, LoaderSettings.for_device(device, None, 4, True))
    chunks = [positions[start : start + batch_size] for start in range(0, len(positions), batch_size)]
    images, texts = [], []
    for _, loaded in loader(chunks, lambda rows: data.host_batch(rows, image_size)):
        images.append(model.encode_image(loaded.images).cpu().numpy())
        texts.append(model.encode_text(loaded.tokens, loaded.lengths).cpu().numpy())
    return np.concatenate(images), np.concatenate(texts)
