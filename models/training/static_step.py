"""The training step at fixed shapes, captured once as a CUDA graph and replayed (``TrainSettings.cuda_graphs``).

Why: at the paper's batch (64 pairs, 224 px) the plain step is bound by the host. It launches every
kernel of the step one by one (ResNet-50 forward and backward, the GRU, the losses' small ones, Adam), and
launching them takes longer than the GPU takes to run them (docs/gpu.md). A CUDA graph launches the whole
recorded step at once. What a graph needs, and how this step provides it:

- **the same shapes every step**: every batch of an epoch but the last has the same rows; the text is
  taken at the table's full width (``max_text_tokens``) rather than the batch's longest, and the GRU's
  final states are gathered at each text's length on the device (``models.recurrent.fixed_width_text``)
  rather than packed, since packing reads the lengths on the host;
- **inputs at fixed addresses**: pixels, tokens and every index tensor of the loss (the lengths, the flip
  coins, the group ids after anchor-neighbor merging, the neighbor rows and ``neighbor_of``) are copied
  into static device buffers before each replay, the index tensors in one non-blocking copy from pinned
  memory; they are computed on the host from the batch plan, as the plain step computes them;
- **no read-back inside the step**: the losses' value checks are off in the graph (a run's first step
  checks them, eagerly); the losses used here are marked ``graph_safe``;
- **an optimiser the graph can replay**: Adam with ``capturable=True`` (its step counts on the device),
  fused on CUDA, and its learning rate as a device tensor, so ReduceLROnPlateau still changes it between
  epochs (the scheduler fills the tensor in place).

The first :data:`WARMUP_STEPS` steps run eagerly on a side stream (cuDNN's algorithm search, Adam's state,
the allocator), with their real batches: they are training steps like the others. The next step is
captured and replayed; every later step of that shape replays. **The last short batch of an epoch** (and
any batch of another shape) runs the plain step: padding it would change the loss's means and negatives.

Why ``torch.cuda.graphs`` rather than ``torch.compile(mode="reduce-overhead")``: the step is one fixed
sequence of kernels, which is exactly what a graph records, with no compiler in the loop (the issue
measured 77-112 s of compiling for no gain in default mode), no recompilation when the last batch or
validation changes the shapes, and the optimiser inside the graph. The same code without the capture runs
eagerly when forced (``force=True`` on the CPU): the tests compare it with the plain step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from models.acceleration import autocast
from models.distributed import Distributed
from models.loader import DeviceBatch
from models.losses.checks import value_checks
from models.recurrent import fixed_width_text
from models.settings import TrainSettings
from models.training.data import StepPlan
from models.training.loss_inputs import batch_group_ids, compute_losses, indexed_loss_inputs
from models.training.setup import TrainingSetup
from models.training.step import StepLosses, flip_coins

logger = logging.getLogger(__name__)

#: eager steps before the capture (cuDNN's search, Adam's lazily built state, the allocator's pools)
WARMUP_STEPS = 3


@dataclass(frozen=True)
class StepShape:
    """What must not change between two replays of one graph."""

    rows: int
    n_main: int
    neighbors: int
    image_shape: tuple[int, ...]
    image_dtype: torch.dtype
    text_width: int


def step_shape(plan: StepPlan, loaded: DeviceBatch) -> StepShape:
    batch = plan.merged
    neighbors = 0 if batch.neighbor_rows is None else len(batch.neighbor_rows)
    return StepShape(
        len(batch.rows), batch.n_main, neighbors, tuple(loaded.images.shape), loaded.images.dtype,
        loaded.tokens.shape[1],
    )


def why_not_static(setup: TrainingSetup, distributed: Distributed, settings: TrainSettings | None = None) -> str | None:
    """Why this run cannot take the static step, or None."""
    if settings is not None and settings.random_resized_crop is not None:
        return "random resized crops (the captured step has no crop of its own)"
    if distributed.active:
        return "a data-parallel run (the step of one process is captured)"
    if setup.scaler is not None:
        return "fp16 with a gradient scaler (its overflow check reads back every step): use amp=bf16 or off"
    unsafe = [loss.name for loss in setup.losses if not loss.graph_safe]
    if unsafe:
        return f"losses {unsafe} read values back to the host"
    return None


class StaticStep:
    """The fixed-shape step of one run: static buffers, the eager warm-up, the capture and its replays
    (``capture``: CUDA), or the same computation eagerly every step (no capture: the CPU tests)."""

    def __init__(self, setup: TrainingSetup, settings: TrainSettings, capture: bool) -> None:
        self.setup = setup
        self.settings = settings
        self.capture = capture
        self.shape: StepShape | None = None
        self.steps = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._names: list[str] = []
        self._values: Tensor | None = None  # [1 + parts], written by every replay
        self._images = self._tokens = self._indices = None

    def accepts(self, plan: StepPlan, loaded: DeviceBatch) -> bool:
        """Whether this batch has the static shape (the first batch's; later ones of another shape, such as
        an epoch's last short batch, run the plain step)."""
        return self.shape is None or step_shape(plan, loaded) == self.shape

    def __call__(self, plan: StepPlan, loaded: DeviceBatch) -> StepLosses:
        if self.shape is None:
            self._allocate(plan, loaded)
        self._fill(plan, loaded)
        self.steps += 1
        if not self.capture:
            return self._eager_step()
        if self.steps <= WARMUP_STEPS:
            return self._warmup_step()
        if self.graph is None:
            self._capture()
        self.graph.replay()
        values = self._values.clone()  # the next replay overwrites the static one
        return StepLosses(values[0], dict(zip(self._names, values[1:], strict=True)))

    # ------------------------------------------------------------------ buffers
    def _allocate(self, plan: StepPlan, loaded: DeviceBatch) -> None:
        self.shape = shape = step_shape(plan, loaded)
        device = self.setup.device
        self._images = torch.empty(shape.image_shape, dtype=shape.image_dtype, device=device)
        self._tokens = torch.empty((shape.rows, shape.text_width), dtype=loaded.tokens.dtype, device=device)
        self._indices = torch.empty(3 * shape.rows + 2 * shape.neighbors, dtype=torch.int64, device=device)

    def _views(self) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """lengths, flip coins, row group ids, neighbor rows, neighbor_of: views of the one index buffer."""
        r, m = self.shape.rows, self.shape.neighbors
        lengths, flips, groups, rows, of = self._indices.split([r, r, r, m, m])
        return lengths, flips, groups, (rows if m else None), (of if m else None)

    def host_indices(self, plan: StepPlan, loaded: DeviceBatch) -> Tensor:
        """The step's index tensors in the buffer's layout, on the host, computed as the plain step does
        (the flip coins drawn from the run's generator in batch order, the groups merged the same way)."""
        batch = plan.merged
        coins = flip_coins(loaded.images, plan, self.setup, self.settings)
        parts = [
            loaded.lengths.numpy(),
            np.zeros(len(batch.rows), dtype=np.int64) if coins is None else coins.numpy(),
            batch_group_ids(batch, self.setup.group_ids, self.settings.mask_neighbor_pairs),
        ]
        if batch.neighbor_rows is not None:
            parts += [batch.neighbor_rows, batch.neighbor_of]
        host = torch.from_numpy(np.concatenate([np.asarray(part, dtype=np.int64) for part in parts]))
        return host.pin_memory() if self.setup.device.type == "cuda" else host

    def _fill(self, plan: StepPlan, loaded: DeviceBatch) -> None:
        # a fresh pinned tensor each step (the caching host allocator reuses it once its copy is done), so
        # the non-blocking copy never reads memory the next step is writing
        on_cuda = self.setup.device.type == "cuda"
        self._indices.copy_(self.host_indices(plan, loaded), non_blocking=on_cuda)
        self._images.copy_(loaded.images)
        self._tokens.copy_(loaded.tokens)

    # --------------------------------------------------------------------- step
    def losses_and_backward(self) -> StepLosses:
        """Forward at fixed shapes, the losses from the static index buffers, backward: nothing here reads a
        value back to the host (``tests/test_static_step.py`` runs it under a guard that fails if it does)."""
        setup = self.setup
        lengths, flips, groups, neighbor_rows, neighbor_of = self._views()
        setup.train_model.train()
        images = self._images
        if self.settings.horizontal_flip and not images.is_floating_point():
            images = torch.where((flips != 0).view(-1, 1, 1, 1), images.flip(dims=[2]), images)
        with fixed_width_text(setup.model), autocast(setup.amp_dtype, setup.device):
            outputs = setup.train_model(images, self._tokens, lengths)
        outputs = {key: value.float() for key, value in outputs.items()}
        inputs = indexed_loss_inputs(outputs, self.shape.n_main, groups, neighbor_rows, neighbor_of)
        parts = compute_losses(setup.losses, inputs)
        total = torch.stack(list(parts.values())).sum()
        total.backward()
        return StepLosses(total, parts)

    def _eager_step(self) -> StepLosses:
        self.setup.optimizer.zero_grad(set_to_none=True)
        losses = self.losses_and_backward()
        self.setup.optimizer.step()
        return losses

    def _warmup_step(self) -> StepLosses:
        current = torch.cuda.current_stream(self.setup.device)
        side = torch.cuda.Stream(self.setup.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            losses = self._eager_step()
        current.wait_stream(side)
        for value in (losses.total, *losses.parts.values()):
            value.record_stream(current)  # read on the current stream: not reused before it has
        return losses

    def _capture(self) -> None:
        optimizer = self.setup.optimizer
        for group in optimizer.param_groups:
            group["capturable"] = True
            if not isinstance(group["lr"], Tensor):  # a device tensor the scheduler fills in place
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.setup.device)
        optimizer.zero_grad(set_to_none=True)  # the graph's backward writes the gradients, never adds
        graph = torch.cuda.CUDAGraph()
        # thread_local: the loader's threads may pin memory while this thread captures
        with value_checks(False), torch.cuda.graph(graph, capture_error_mode="thread_local"):
            losses = self.losses_and_backward()
            optimizer.step()
            self._values = losses.values()
        self._names = list(losses.parts)
        self.graph = graph
        logger.info("training step captured as a CUDA graph (%s)", self.shape)


def static_step_for(
    setup: TrainingSetup, settings: TrainSettings, distributed: Distributed, force: bool = False
) -> StaticStep | None:
    """The run's static step: captured on CUDA when ``cuda_graphs``; eager (no capture) when ``force`` (the
    tests, on the CPU); None otherwise, and with a warning when ``cuda_graphs`` asks for one this run
    cannot have (``force`` raises instead)."""
    on_cuda = setup.device.type == "cuda"
    wanted = settings.cuda_graphs and on_cuda
    if not (wanted or force):
        return None
    reason = why_not_static(setup, distributed, settings)
    if reason is not None:
        if force:
            raise ValueError(f"the static step cannot run here: {reason}")
        logger.warning("cuda_graphs is on but this run takes the plain step: %s", reason)
        return None
    return StaticStep(setup, settings, capture=wanted)
