"""Everything a training run is built from, checked before any work: the model on its device (wrapped for
data-parallel ranks), mixed precision, the losses, the batch sampler, the optimiser and its plateau schedule,
and the loader that feeds the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.acceleration import amp_dtype, gradient_scaler, prepare_for_device
from models.batching import BatchSampler
from models.devices import pick_device
from models.distributed import Distributed
from models.loader import BatchLoader, LoaderSettings
from models.losses import Loss
from models.settings import TrainSettings
from models.training.data import PairData


def check_training_inputs(
    losses: Sequence[Loss],
    data: PairData,
    train_positions: np.ndarray,
    neighbors: np.ndarray | None,
    settings: TrainSettings,
) -> None:
    """Refuse, before any work, a run whose losses, data and settings cannot train together."""
    needs_neighbors = [loss.name for loss in losses if loss.needs_neighbors]
    needs_groups = [loss.name for loss in losses if "group_mates" in loss.needs]
    group_ids = np.asarray(data.group_ids, dtype=np.int64)
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
    if settings.trunk_mode.cached_features and data.image_features is None:
        raise ValueError(
            f"trunk={settings.trunk!r} trains on cached trunk features, but the pair data holds none: pass "
            "PairData(image_features=...) (the TrunkFeatures task's output)"
        )
    if settings.trunk_mode.cached_features and settings.horizontal_flip:
        raise ValueError(
            f"horizontal_flip needs pixels, but trunk={settings.trunk!r} trains on cached features: set "
            "horizontal_flip=False (VSE++ and PVSE do not flip precomputed features either)"
        )
    if not [loss for loss in losses if not loss.needs_neighbors]:
        raise ValueError(
            f"every loss of {[loss.name for loss in losses]} needs sampled neighbors, so no validation loss "
            "can be computed: add a cross-modal loss (e.g. angular), as Eq. 8 does"
        )


def parameter_groups(model: nn.Module, settings: TrainSettings) -> list[dict] | list[nn.Parameter]:
    """What Adam trains: every parameter at ``learning_rate``, or, with ``trunk_learning_rate_scale`` other than
    1, the trained trunk part's parameters in a group of their own at the scaled rate (the plateau decay scales
    both groups alike)."""
    if settings.trunk_learning_rate_scale == 1.0:
        return list(model.parameters())
    trunk = {id(p) for module in model.modules() if hasattr(module, "trunk_parameters") for p in module.trunk_parameters()}
    rest = [p for p in model.parameters() if id(p) not in trunk]
    scaled = [p for p in model.parameters() if id(p) in trunk]
    return [
        {"params": rest, "lr": settings.learning_rate},
        {"params": scaled, "lr": settings.learning_rate * settings.trunk_learning_rate_scale},
    ]


def build_optimizer(model: nn.Module, settings: TrainSettings, device: torch.device) -> torch.optim.Adam:
    """Adam (§3.3). On CUDA one fused kernel (``fused_adam``) and, for a CUDA-graph step, its state steps on
    the device (``capturable``); on the CPU PyTorch's default, as always."""
    options: dict[str, bool] = {}
    if device.type == "cuda":
        if settings.fused_adam:
            options["fused"] = True
        if settings.cuda_graphs:
            options["capturable"] = True
    return torch.optim.Adam(
        parameter_groups(model, settings), lr=settings.learning_rate, weight_decay=settings.weight_decay, **options
    )


@dataclass
class TrainingSetup:
    """The parts of one run, on its device."""

    device: torch.device
    model: nn.Module
    #: what the training forward pass runs: the model itself, or its DistributedDataParallel wrapper, whose
    #: backward averages the gradients over ranks (checkpoints always hold the bare model's weights)
    train_model: nn.Module
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None
    loader: BatchLoader
    losses: list[Loss]
    #: the validation loss: the neighbor-free parts, which every variant shares, so variants compare
    val_losses: list[Loss]
    sampler: BatchSampler
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau
    flip_generator: torch.Generator
    group_ids: torch.Tensor


def build_setup(
    model: nn.Module,
    losses: Sequence[Loss],
    data: PairData,
    train_positions: np.ndarray,
    settings: TrainSettings,
    seed: int,
    neighbors: np.ndarray | None,
    device: torch.device | None,
    distributed: Distributed,
) -> TrainingSetup:
    check_training_inputs(losses, data, train_positions, neighbors, settings)
    device = device or pick_device()
    if distributed.active and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", distributed.local_rank)  # one GPU per process
    model = prepare_for_device(model, device, settings.channels_last, settings.cudnn_benchmark)
    dtype = amp_dtype(settings.amp, device)
    train_model = model
    if distributed.active:
        # static graph: every step uses the same parameters, and some never (the trunk's ImageNet head stays
        # in the model untrained): DDP learns that once instead of searching the graph every step
        on_cuda = device.type == "cuda"
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if on_cuda else None, static_graph=True
        )
    moved = [loss.to(device) for loss in losses]
    group_ids = np.array(data.group_ids, dtype=np.int64)
    train_positions = np.asarray(train_positions)
    needs_groups = any("group_mates" in loss.needs for loss in losses)
    optimizer = build_optimizer(model, settings, device)
    return TrainingSetup(
        device=device,
        model=model,
        train_model=train_model,
        amp_dtype=dtype,
        scaler=gradient_scaler(dtype, device),
        loader=BatchLoader(
            device,
            LoaderSettings.for_device(device, settings.num_workers, settings.prefetch_batches, settings.pin_memory),
        ),
        losses=moved,
        val_losses=[loss for loss in moved if not loss.needs_neighbors],
        # every rank samples the same global batches (same seed) and trains its share of each
        sampler=BatchSampler(
            train_positions,
            settings.batch_size * distributed.world_size,
            np.random.default_rng(seed),
            neighbors if any(loss.needs_neighbors for loss in losses) else None,
            settings.neighbor_mode,
            group_ids=group_ids[train_positions] if needs_groups else None,
        ),
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=settings.lr_factor, patience=settings.lr_patience
        ),
        flip_generator=torch.Generator().manual_seed(seed),
        group_ids=torch.from_numpy(group_ids),
    )
