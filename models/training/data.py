"""What training and inference read: the pairs (image cache or cached trunk features, tokens, groups), sliced
into host batches, and the plan of one training step — the rows this process trains of a global batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from models.batching import Batch
from models.distributed import Distributed, can_shard, merge_shards, shard_batch
from models.encoders import resize_batch
from models.loader import HostBatch

#: the embeddings (image, text) of the validation positions, in their order -> named scores
ValidationScore = Callable[[np.ndarray, np.ndarray], dict[str, float]]


@dataclass
class PairData:
    """Everything the trainer and the inference path read, indexed by pair position."""

    images: np.ndarray  # uint8 [R, S, S, 3] image cache (may be a memmap)
    image_rows: np.ndarray  # [N] cache row of each pair
    tokens: np.ndarray  # int64 [N, L]
    lengths: np.ndarray  # int64 [N]
    group_ids: np.ndarray  # int64 [N]; pairs sharing an image/caption set share an id
    #: cached trunk features per image-cache row ([R, C] or [R, C, h, w]) for a frozen trunk, or a map per cached
    #: view ([R, V, C, h, w], :mod:`models.cached_views`); when given, image batches are these instead of pixels
    image_features: np.ndarray | None = None
    #: the view each image-cache row is read at ([R]; None: view 0, the image itself): a training epoch's draw
    image_views: np.ndarray | None = None

    @property
    def cached_view_count(self) -> int:
        """How many views of each image the cached features hold (1: the image itself only)."""
        return int(self.image_features.shape[1]) if self.image_features is not None and self.image_features.ndim == 5 else 1

    def with_views(self, views: np.ndarray | None) -> PairData:
        """The same pairs with each image read at ``views[cache row]`` (None: the image itself)."""
        if views is not None and self.cached_view_count == 1:
            raise ValueError("a view draw needs cached features with a view per image ([R, V, C, h, w])")
        return replace(self, image_views=views)

    @classmethod
    def of_pixels(cls, pixels: np.ndarray) -> PairData:
        """Images only (uint8 ``[N, S, S, 3]`` thumbnails, e.g. a gallery to index)."""
        n = len(pixels)
        empty = np.zeros((n, 0), dtype=np.int64)
        return cls(pixels, np.arange(n), empty, np.zeros(n, dtype=np.int64), np.arange(n))

    @classmethod
    def of_texts(cls, tokens: np.ndarray, lengths: np.ndarray) -> PairData:
        """Texts only (token ids ``[N, L]`` and lengths, e.g. a gallery's articles or a query)."""
        n = len(tokens)
        return cls(np.zeros((0, 1, 1, 3), dtype=np.uint8), np.zeros(n, dtype=np.int64), tokens, lengths, np.arange(n))

    def image_batch(self, positions: np.ndarray, size: int) -> Tensor:
        rows = self.image_rows[positions]
        if self.image_features is not None and self.cached_view_count > 1:
            views = 0 if self.image_views is None else self.image_views[rows]
            return torch.from_numpy(np.asarray(self.image_features[rows, views], dtype=np.float32))
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


@dataclass(frozen=True)
class TrainingData:
    """What one run trains and validates on: the pairs, the positions of its train and its validation pairs, each
    train pair's pool of semantic neighbors (row ``i``: positions into ``train_positions``; None for losses that
    sample none) and the function that scores the validation embeddings (None: selection by the validation loss)."""

    pairs: PairData
    train_positions: np.ndarray
    val_positions: np.ndarray
    neighbors: np.ndarray | None = None
    validation_score: ValidationScore | None = None


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


def plan_step(batch: Batch, data: PairData, distributed: Distributed) -> StepPlan | None:
    """This rank's part of a global batch; None when it cannot give every rank an anchor (skipped)."""
    world = distributed.world_size
    text_width = int(data.lengths[batch.rows].max())
    if world == 1:
        return StepPlan(batch, [batch], batch, None, 0, text_width)
    if not can_shard(batch, world):
        return None
    shards = [shard_batch(batch, rank, world) for rank in range(world)]
    merged, order = merge_shards(shards)
    offset = sum(len(shard.rows) for shard in shards[: distributed.rank])
    return StepPlan(shards[distributed.rank], shards, merged, order, offset, text_width)
