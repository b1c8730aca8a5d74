"""Data-parallel training across processes (torchrun / DistributedDataParallel), one process per GPU.

The contract (the ``DistributedSampler`` one, through the project's own ``BatchSampler``): every rank runs
the same sampler with the same seed over *global* batches of ``batch_size * world_size`` pairs (reshuffled
every epoch as a single process does) and takes its share of each (:func:`shard_batch`); so every rank
knows the whole global batch — its rows, group ids and neighbor structure — without communicating.

Every loss sees the global batch: each rank encodes its share, the embeddings are gathered with an
autograd all-gather (:func:`gather_rows`, ``torch.distributed.nn.all_gather``, as open_clip's
``gather_features(gather_with_grad=True)``) and put in the order of the global :class:`Batch` that
:func:`merge_shards` builds, whose neighbor indices point at the gathered rows (a rank's rows offset by the
rows of the ranks before it). Group ids and neighbor indices need no gather: every rank derives them from
the global batch it knows.

Gradients: every rank computes the same global loss L. The all-gather's backward sums, over ranks, the
gradient each rank's L sends to a rank's rows (a reduce-scatter), so a rank's rows receive W * dL/dx, and
its parameters W * (its rows' share of dL/dtheta); DistributedDataParallel averages over the W ranks,
which leaves exactly dL/dtheta, the gradient of a single process on the concatenated batch
(``tests/test_ddp.py`` checks loss and every gradient to 1e-5).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from models.batching import Batch

#: the environment torchrun sets for each process it starts
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Distributed:
    """Where this process stands in a data-parallel run (``world_size == 1``: a plain single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, history and metadata."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


SINGLE_PROCESS = Distributed()


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARIABLES) and int(os.environ["WORLD_SIZE"]) > 1


def init_from_environment(backend: str | None = None) -> Distributed:
    """Join the process group torchrun describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``);
    NCCL on CUDA, gloo on CPU. Each process takes the GPU of its local rank. A single process without
    torchrun's variables gets :data:`SINGLE_PROCESS`."""
    if not launched_by_torchrun():
        return SINGLE_PROCESS
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"))
    return Distributed(rank, world_size, local_rank)


def shard_sizes(n_anchors: int, world_size: int) -> list[int]:
    """Anchors per rank: as even as possible, the first ranks one more when it does not divide."""
    return [len(chunk) for chunk in np.array_split(np.arange(n_anchors), world_size)]


def can_shard(batch: Batch, world_size: int) -> bool:
    """Whether every rank gets at least one anchor (an epoch's short last batch may not give them one)."""
    anchors = batch.n_main if batch.neighbor_rows is None else len(batch.neighbor_of)
    return anchors >= world_size


def shard_batch(batch: Batch, rank: int, world_size: int) -> Batch:
    """Rank ``rank``'s share of a global batch: a contiguous run of its anchors, each with its neighbor.

    Neighbor batches must have the sampler's layout (anchors ``0..n-1``, neighbor of anchor m at row
    ``n + m``; in ``in_batch`` mode both are main rows, in ``extra_rows`` mode the neighbors are extra rows),
    and a rank's share keeps it.
    """
    if world_size == 1:
        return batch
    if batch.neighbor_rows is None:
        start = sum(shard_sizes(batch.n_main, world_size)[:rank])
        size = shard_sizes(batch.n_main, world_size)[rank]
        return Batch(rows=batch.rows[start : start + size], n_main=size)
    n = len(batch.neighbor_of)
    if not (
        np.array_equal(batch.neighbor_of, np.arange(n))
        and np.array_equal(batch.neighbor_rows, np.arange(n, 2 * n))
    ):
        raise ValueError(
            "shard_batch needs the sampler's layout: anchors 0..n-1, the neighbor of anchor m at n + m"
        )
    in_batch = batch.n_main == 2 * n
    sizes = shard_sizes(n, world_size)
    start, size = sum(sizes[:rank]), sizes[rank]
    anchors = batch.rows[start : start + size]
    neighbors = batch.rows[n + start : n + start + size]
    return Batch(
        rows=np.concatenate([anchors, neighbors]),
        n_main=2 * size if in_batch else size,
        neighbor_rows=np.arange(size, 2 * size),
        neighbor_of=np.arange(size),
    )


def merge_shards(shards: list[Batch]) -> tuple[Batch, np.ndarray]:
    """The global batch the loss sees, and ``order``: row ``j`` of it is row ``order[j]`` of the gathered
    rows (every shard's rows, rank after rank). Main rows come first, as :func:`models.training.loss_inputs`
    expects; neighbor indices are offset by the rows of the ranks before."""
    offsets = np.cumsum([0] + [len(shard.rows) for shard in shards])[:-1]
    main = [offset + np.arange(shard.n_main) for shard, offset in zip(shards, offsets, strict=True)]
    extra = [
        offset + np.arange(shard.n_main, len(shard.rows))
        for shard, offset in zip(shards, offsets, strict=True)
    ]
    order = np.concatenate(main + extra).astype(np.int64)
    gathered_rows = np.concatenate([shard.rows for shard in shards])
    position = np.empty_like(order)
    position[order] = np.arange(len(order))  # gathered row -> row of the global batch
    n_main = sum(shard.n_main for shard in shards)
    if shards[0].neighbor_rows is None:
        return Batch(rows=gathered_rows[order], n_main=n_main), order
    neighbor_rows = np.concatenate(
        [position[offset + shard.neighbor_rows] for shard, offset in zip(shards, offsets, strict=True)]
    )
    neighbor_of = np.concatenate(
        [position[offset + shard.neighbor_of] for shard, offset in zip(shards, offsets, strict=True)]
    )
    return Batch(gathered_rows[order], n_main, neighbor_rows, neighbor_of), order


def gather_rows(tensor: Tensor, sizes: list[int]) -> Tensor:
    """Every rank's ``tensor`` ([sizes[rank], ...]) concatenated rank after rank, differentiably: the
    backward pass sends each rank the summed gradient of its rows. Ranks may hold different row counts
    (``sizes``, known to all): rows are padded to the largest for the collective and the padding dropped."""
    from torch.distributed.nn import all_gather  # the autograd-aware all-gather

    # torch 2.9+ marks it deprecated in favour of a private API (_functional_collectives); it works and is
    # what open_clip uses, so its warning is silenced rather than printed at every training step
    warnings.filterwarnings("ignore", message=".*all_gather is deprecated", category=FutureWarning)
    largest = max(sizes)
    padded = tensor
    if tensor.shape[0] < largest:
        padded = torch.cat([tensor, tensor.new_zeros((largest - tensor.shape[0], *tensor.shape[1:]))])
    pieces = all_gather(padded)
    return torch.cat([piece[:size] for piece, size in zip(pieces, sizes, strict=True)])


def gather_outputs(outputs: dict[str, Tensor], shards: list[Batch], order: np.ndarray) -> dict[str, Tensor]:
    """The model outputs of every rank's share, in the global batch's row order (see :func:`merge_shards`)."""
    sizes = [len(shard.rows) for shard in shards]
    index = torch.from_numpy(order).to(next(iter(outputs.values())).device)
    return {key: gather_rows(value, sizes).index_select(0, index) for key, value in outputs.items()}


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks of a few floats (validation totals)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast_from_main(value: object) -> object:
    """Rank 0's ``value`` on every rank (a small picklable object)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_objects(value: object) -> list[object]:
    """Every rank's ``value`` (a small picklable object, e.g. validation embeddings), in rank order."""
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered
