"""One optimisation step, and the losses of every step kept on the device.

Why nothing here reads a value back to the host: a ``.item()`` or a ``bool(tensor)`` per step makes the
host wait for the GPU every step, which caps its speed however fast the kernels are. The step returns its
losses as device tensors; :class:`StepLog` adds them up on the device, together with the first step whose
loss was not finite, and the loop reads them once per logging interval (``TrainSettings.log_every_steps``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from models.acceleration import autocast
from models.distributed import Distributed, gather_outputs
from models.loader import DeviceBatch
from models.settings import TrainSettings
from models.training.augmentation import randomly_cropped
from models.training.data import StepPlan
from models.training.loss_inputs import batch_loss_inputs, compute_losses
from models.training.setup import TrainingSetup


@dataclass
class StepLosses:
    """A step's summed loss and its named parts, on the device."""

    total: Tensor
    parts: dict[str, Tensor]

    def values(self) -> Tensor:
        """``[1 + parts]``: the total, then each part, detached."""
        return torch.stack([self.total, *self.parts.values()]).detach()

    def names(self) -> list[str]:
        return ["loss", *self.parts]


def flipped(images: Tensor, plan: StepPlan, setup: TrainingSetup, settings: TrainSettings) -> Tensor:
    """Random horizontal flips, done on the device. The coins are tossed in this thread for the whole global
    batch in order (so any number of loader workers and ranks toss the same), a rank taking its rows'
    share; selecting flipped or original pixels is exact, so CPU runs are unchanged."""
    flip = flip_coins(images, plan, setup, settings)
    if flip is None:
        return images
    return torch.where(flip.to(images.device).view(-1, 1, 1, 1), images.flip(dims=[2]), images)


def flip_coins(images: Tensor, plan: StepPlan, setup: TrainingSetup, settings: TrainSettings) -> Tensor | None:
    """This rank's rows' coins (host bool ``[rows]``), or None when nothing is flipped."""
    if not settings.horizontal_flip or images.is_floating_point():  # cached trunk features are not flipped
        return None
    coins = torch.rand(len(plan.merged.rows), generator=setup.flip_generator) < 0.5
    return coins[plan.offset : plan.offset + len(plan.local.rows)]


def train_step(
    setup: TrainingSetup,
    settings: TrainSettings,
    distributed: Distributed,
    plan: StepPlan,
    loaded: DeviceBatch,
) -> StepLosses:
    """Forward (under autocast when mixed precision is on; losses always take fp32), the losses of the global
    batch, backward and the optimiser step — with no read-back to the host."""
    setup.train_model.train()
    images = randomly_cropped(flipped(loaded.images, plan, setup, settings), plan, setup, settings)
    with autocast(setup.amp_dtype, setup.device):
        outputs = setup.train_model(images, loaded.tokens, loaded.lengths)
    outputs = {key: value.float() for key, value in outputs.items()}
    if distributed.active:
        outputs = gather_outputs(outputs, plan.shards, plan.order)
    inputs = batch_loss_inputs(outputs, plan.merged, setup.group_ids, settings.mask_neighbor_pairs)
    parts = compute_losses(setup.losses, inputs)
    total = torch.stack(list(parts.values())).sum()
    setup.optimizer.zero_grad(set_to_none=True)
    if setup.scaler is None:
        total.backward()
        setup.optimizer.step()
    else:
        setup.scaler.scale(total).backward()
        setup.scaler.step(setup.optimizer)
        setup.scaler.update()
    return StepLosses(total, parts)


class StepLog:
    """The sums of every step's losses since the epoch began, on the device in float64 (the sums a Python
    loop over ``.item()`` values would give, to the bit), and the first step whose losses were not finite
    with its values; :meth:`read` brings them to the host in one transfer."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.steps = 0
        self._sums: Tensor | None = None
        self._first_bad: Tensor | None = None
        self._bad_values: Tensor | None = None

    def add(self, losses: StepLosses, step: int) -> None:
        """Add step number ``step`` (1-based in its epoch)."""
        values = losses.values()
        if self._sums is None:
            self.names = losses.names()
            self._sums = torch.zeros(len(values), dtype=torch.float64, device=values.device)
            self._first_bad = torch.zeros((), dtype=torch.float64, device=values.device)
            self._bad_values = torch.zeros(len(values), dtype=torch.float64, device=values.device)
        first = (~torch.isfinite(values).all()) & (self._first_bad == 0)
        self._first_bad = torch.where(first, float(step), self._first_bad)
        self._bad_values = torch.where(first, values.double(), self._bad_values)
        self._sums += values.double()
        self.steps += 1

    def read(self) -> LogReading:
        if self._sums is None:
            return LogReading({}, 0, None)
        host = torch.cat([self._sums, self._bad_values, self._first_bad.view(1)]).tolist()
        n = len(self.names)
        sums = dict(zip(self.names, host[:n], strict=True))
        bad_step = int(host[-1])
        bad = (bad_step, dict(zip(self.names, host[n : 2 * n], strict=True))) if bad_step else None
        return LogReading(sums, self.steps, bad)


@dataclass
class LogReading:
    """What a :class:`StepLog` held when read: loss sums, steps, and the first non-finite step (its number
    and its loss values) if there was one."""

    sums: dict[str, float]
    steps: int
    first_non_finite: tuple[int, dict[str, float]] | None

    def means(self) -> dict[str, float]:
        return {name: value / max(self.steps, 1) for name, value in self.sums.items()}

    def non_finite_message(self) -> str:
        step, values = self.first_non_finite
        parts = {name: value for name, value in values.items() if name != "loss"}
        return f"non-finite loss {values['loss']} (parts: {parts})"
