"""Checkpoints of a training run: written atomically at the end of each epoch (the last, the one before it and
the best by validation), verified before anything is restored, and resumed from after a kill.

What survives: a kill at any point leaves a loadable last checkpoint (temp file + rename, the previous one
hard-linked aside first); an unusable checkpoint (unreadable, not this model, non-finite) is set aside with a
warning, never loaded, and resume falls back to the previous one or restarts; a best model from a trajectory
being redone is set aside so the file and the recorded best epoch always agree.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from common.files import atomic_path
from models.batching import BatchSampler
from models.distributed import Distributed, broadcast_from_main
from models.trained import read_model_checkpoint
from models.training.history import HISTORY_FILE, TrainResult

LAST_CHECKPOINT = "checkpoint_last.pt"
#: the checkpoint before the last one: what resume falls back to when the last one is unusable
PREV_CHECKPOINT = "checkpoint_prev.pt"
BEST_CHECKPOINT = "model_best.pt"
#: in a continued run's folder: the folder of the shorter run it continued
CONTINUED_FROM = "continued_from.txt"
#: what a resumable checkpoint must hold
CHECKPOINT_KEYS = frozenset(
    "epoch model optimizer scheduler sampler flip_generator torch_rng numpy_rng python_rng history "
    "best_epoch best_score".split()
)


@dataclass
class TrainingState:
    """Everything a checkpoint saves and restores, besides the result's history and best epoch."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau
    sampler: BatchSampler
    flip_generator: torch.Generator
    scaler: torch.amp.GradScaler | None = None


class Checkpoints:
    """The checkpoint files of one run in ``work_dir`` (rank 0 writes them; every rank resumes)."""

    def __init__(self, work_dir: Path, state: TrainingState, distributed: Distributed) -> None:
        self.work_dir = Path(work_dir)
        self.state = state
        self.distributed = distributed

    # ------------------------------------------------------------------ writing
    def save_best(self, epoch: int) -> None:
        self._save(self.work_dir / BEST_CHECKPOINT, {"epoch": epoch, "model": self.state.model.state_dict()})

    def save_last(self, epoch: int, result: TrainResult) -> None:
        """The resumable checkpoint of ``epoch`` (the previous one kept as ``checkpoint_prev.pt``)."""
        self._keep_previous()
        s = self.state
        self._save(
            self.work_dir / LAST_CHECKPOINT,
            {
                "epoch": epoch,
                "model": s.model.state_dict(),
                "optimizer": s.optimizer.state_dict(),
                "scheduler": s.scheduler.state_dict(),
                "sampler": s.sampler.state(),
                "flip_generator": s.flip_generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state(),
                "python_rng": random.getstate(),
                "history": result.history,
                "best_epoch": result.best_epoch,
                "best_score": result.best_score,
                # fp16 loss scale, so a resumed mixed-precision run scales as the uninterrupted one
                **({"grad_scaler": s.scaler.state_dict()} if s.scaler is not None else {}),
            },
        )

    def _save(self, path: Path, payload: dict) -> None:
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        with atomic_path(path) as tmp:
            tmp.write_bytes(buffer.getvalue())

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

    # ----------------------------------------------------------------- resuming
    def resume(self, result: TrainResult) -> int:
        """Restore the newest usable checkpoint and return its epoch (0: none); see :meth:`_resume_from_files`.

        In a data-parallel run rank 0 alone inspects, sets aside and chooses files; the others then load the
        checkpoint it chose and take its best-model record, so every rank continues from the same state.
        """
        if self.distributed.is_main:
            loaded = self._resume_from_files(result)
        if not self.distributed.active:
            return result.resumed_from_epoch
        loaded, best = broadcast_from_main(
            (loaded, (result.best_epoch, result.best_score)) if self.distributed.is_main else None
        )
        if not self.distributed.is_main and loaded is not None:
            self._restore(torch.load(self.work_dir / loaded, map_location="cpu", weights_only=False), result)
        result.best_epoch, result.best_score = best
        return result.resumed_from_epoch

    def _read(self, path: Path) -> tuple[dict | None, str]:
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
        expected = self.state.model.state_dict()
        weights = state["model"]
        if not isinstance(weights, dict) or weights.keys() != expected.keys():
            return None, "its model weights do not name this model's parameters"
        if mismatched := [k for k, v in expected.items() if getattr(weights[k], "shape", None) != v.shape]:
            return None, f"its weights {mismatched[:5]} do not have this model's shapes"
        if bad := non_finite({"model": weights, "optimizer": state["optimizer"]}):
            return None, f"it holds non-finite values in {bad[:5]}"
        return state, ""

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
            state, problem = self._read(path)
            if state is not None:
                break
            aside = set_aside(path, "corrupt")
            warnings.warn(
                f"checkpoint {path} is unusable: {problem}; moved to {aside.name}", RuntimeWarning, stacklevel=2
            )
        else:
            # a run killed before its first checkpoint may hold only the best of epoch 0 (its starting weights,
            # validated when they compete): the restart validates them again and writes the same file, so it stays
            self._check_best(-1, result, redone=0)
            return None
        self._restore(state, result)
        # a kill between writing model_best.pt and checkpoint_last.pt leaves the best of the very next epoch:
        # the resumed run redoes that epoch exactly and writes the same file again, so it is kept as it is
        self._check_best(state["best_epoch"], result, redone=state["epoch"] + 1 if name == LAST_CHECKPOINT else None)
        return name

    def _restore(self, saved: dict, result: TrainResult) -> None:
        """Apply a checked checkpoint: weights, optimiser, schedules, every random state, the history."""
        s = self.state
        s.model.load_state_dict(saved["model"])
        load_optimizer_state(s.optimizer, saved["optimizer"])
        s.scheduler.load_state_dict(saved["scheduler"])
        s.sampler.load_state(saved["sampler"])
        s.flip_generator.set_state(saved["flip_generator"])
        torch.set_rng_state(saved["torch_rng"])
        np.random.set_state(saved["numpy_rng"])
        random.setstate(saved["python_rng"])
        result.history = saved["history"]
        result.best_epoch = saved["best_epoch"]
        result.best_score = saved["best_score"]
        result.resumed_from_epoch = saved["epoch"]
        if s.scaler is not None and "grad_scaler" in saved:
            s.scaler.load_state_dict(saved["grad_scaler"])

    def _best_epoch_on_disk(self) -> int | None:
        """The epoch ``model_best.pt`` holds; -1 without one, None when it cannot be read."""
        try:
            return read_model_checkpoint(self.work_dir / BEST_CHECKPOINT)["epoch"]
        except FileNotFoundError:
            return -1
        except Exception:  # noqa: BLE001 - unreadable: certainly not a usable best
            return None

    def _check_best(self, best_epoch: int, result: TrainResult, redone: int | None = None) -> None:
        """Keep ``model_best.pt`` only if it holds the resumed run's ``best_epoch``, or ``redone``: the epoch the
        resumed run does next, which writes the same file again (its best is then tracked as it is).

        After a fallback (to prev, or to a restart), or a kill between writing the best and the last
        checkpoint, it may come from an epoch beyond the resumed one, of a trajectory now being redone. It is
        then renamed to ``model_best.pt.stale-<n>`` and best tracking restarts with the next epoch, so the
        file and the reported ``best_epoch`` always agree. With fixed seeds the redone epochs repeat the lost
        ones, so the run still ends with the same best as an uninterrupted one.
        """
        path = self.work_dir / BEST_CHECKPOINT
        held = self._best_epoch_on_disk()
        if held == best_epoch or (redone is not None and held == redone):
            return
        if held != -1:
            aside = set_aside(path, "stale")
            warnings.warn(
                f"{path} holds {'an unreadable model' if held is None else f'epoch {held}'}, not the resumed "
                f"best epoch {best_epoch}; moved to {aside.name}, best model tracked again from here",
                RuntimeWarning,
                stacklevel=3,
            )
        result.forget_best()


def non_finite(tree: object, prefix: str = "") -> list[str]:
    """Dotted names of the floating-point tensors holding NaN or inf in nested dicts/lists of tensors."""
    if isinstance(tree, Tensor):
        return [prefix] if tree.is_floating_point() and not bool(torch.isfinite(tree).all()) else []
    items = (
        tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list | tuple) else []
    )
    return [bad for key, value in items for bad in non_finite(value, f"{prefix}.{key}" if prefix else str(key))]


def set_aside(path: Path, tag: str) -> Path:
    """Rename ``path`` to the first free ``<name>.<tag>-<n>``: out of the way, but nothing lost."""
    n = 1
    while (aside := path.with_name(f"{path.name}.{tag}-{n}")).exists():
        n += 1
    path.replace(aside)
    return aside


#: Adam's options of how it runs, not what it computes
_RUN_OPTIONS = ("capturable", "fused", "foreach", "differentiable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """``optimizer.load_state_dict(saved)``, keeping this run's own options: a checkpoint's param groups carry
    those of the run that saved it (a CUDA-graph run's ``capturable``, its learning rate as a device
    tensor), and a run resumed on another device or path must not take them. The learning rate comes back
    as a float; a CUDA-graph step makes it a device tensor again when it captures."""
    options = [{key: group[key] for key in _RUN_OPTIONS if key in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, own in zip(optimizer.param_groups, options, strict=True):
        group.update(own)
        if isinstance(group["lr"], Tensor):
            group["lr"] = float(group["lr"])
        if not (group.get("fused") or group.get("capturable")):
            continue
        # fused and capturable Adam keep each parameter's step count on its device (a plain run on the host)
        for param in group["params"]:
            step = optimizer.state.get(param, {}).get("step")
            if isinstance(step, Tensor) and step.device != param.device:
                optimizer.state[param]["step"] = step.to(param.device, torch.float32)


def continue_run(source: Path, work_dir: Path) -> None:
    """Copy a shorter run's checkpoints and history from ``source`` into ``work_dir``, so a run of the same model
    with a larger epoch cap resumes where it stopped. ``checkpoint_last.pt`` is copied last: it is what resume
    starts from, so a kill during the copy leaves no last checkpoint and the rerun copies again. A marker keeps
    the source for a resumed rerun (:func:`continued_from`)."""
    source, work_dir = Path(source), Path(work_dir)
    with atomic_path(work_dir / CONTINUED_FROM) as tmp:
        tmp.write_text(str(source))
    for name in (PREV_CHECKPOINT, BEST_CHECKPOINT, HISTORY_FILE, LAST_CHECKPOINT):
        if (source / name).exists():
            with atomic_path(work_dir / name) as tmp:
                tmp.write_bytes((source / name).read_bytes())


def continued_from(work_dir: Path) -> str | None:
    """The folder whose run ``work_dir``'s run continued (:func:`continue_run`), or None."""
    marker = Path(work_dir) / CONTINUED_FROM
    return marker.read_text() if marker.exists() else None
