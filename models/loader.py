"""Host-side batch preparation for training and encoding: the rows a batch names are sliced from the uint8
image cache (or the cached trunk features) and the token table, optionally by background threads ahead of
the step that needs them, into page-locked memory, then copied to the device without blocking.

Augmentation and normalisation happen on the device (``Trainer`` flips, the image tower normalises), so
what a worker does is pure: the batches, and the random flips drawn in the training thread in batch order,
are the same whatever the number of workers (``tests/test_loader.py``).

Threads rather than processes: the work is NumPy fancy indexing of a memory map and torch resizing, which
release the GIL, and a thread shares the memory-mapped cache without pickling or re-opening it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

Item = TypeVar("Item")


@dataclass
class HostBatch:
    """The tensors of one batch on the host (pinned when asked for); a batch of one modality leaves the
    other's fields None."""

    images: Tensor | None  # uint8 [B, S, S, 3] pixels, or float32 cached trunk features
    tokens: Tensor | None  # int64 [B, L]
    lengths: Tensor | None  # int64 [B]; stays on the host (pack_padded_sequence wants CPU lengths)

    def pinned(self) -> HostBatch:
        return HostBatch(_pin(self.images), _pin(self.tokens), self.lengths)


def _pin(tensor: Tensor | None) -> Tensor | None:
    return None if tensor is None else tensor.pin_memory()


@dataclass
class DeviceBatch:
    images: Tensor | None
    tokens: Tensor | None
    lengths: Tensor | None


@dataclass(frozen=True)
class LoaderSettings:
    """How batches reach the device; resolved for one device by :meth:`for_device`."""

    num_workers: int = 0
    prefetch_batches: int = 4
    pin_memory: bool = False

    @classmethod
    def for_device(
        cls, device: torch.device, num_workers: int | None, prefetch_batches: int, pin_memory: bool
    ) -> LoaderSettings:
        """``num_workers=None`` is 4 threads on CUDA and none on CPU (where the cores train); pinning only
        helps a copy to a GPU."""
        on_cuda = device.type == "cuda"
        workers = (4 if on_cuda else 0) if num_workers is None else num_workers
        if workers < 0 or prefetch_batches < 1:
            raise ValueError(
                f"num_workers must be >= 0 and prefetch_batches >= 1, got {workers}, {prefetch_batches}"
            )
        return cls(workers, prefetch_batches, pin_memory and on_cuda)


def prefetched(
    items: Iterable[Item], prepare: Callable[[Item], object], workers: int, depth: int
) -> Iterator:
    """``(item, prepare(item))`` in the order of ``items``, with up to ``depth`` prepared ahead by ``workers``
    threads (``workers=0``: each prepared when it is needed, in this thread).

    ``items`` is read in this thread only, so a generator with random state (the batch sampler) advances in
    exactly the order it would without prefetching; it is never read past its end. Abandoning the iterator
    (an exception in the consumer) cancels what is queued and waits for the threads.
    """
    if workers == 0:
        for item in items:
            yield item, prepare(item)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch-loader")
    queue: deque[tuple[Item, Future]] = deque()
    source = iter(items)
    try:
        for item in source:
            queue.append((item, pool.submit(prepare, item)))
            if len(queue) >= depth:
                break
        while queue:
            item, future = queue.popleft()
            next_item = next(source, _END)
            if next_item is not _END:
                queue.append((next_item, pool.submit(prepare, next_item)))
            yield item, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_END = object()


class BatchLoader:
    """Prepares host batches (``prepare(item) -> HostBatch``) with :func:`prefetched` and moves them to
    ``device``: a non-blocking copy from pinned memory on CUDA, a plain (no-op) ``to`` on CPU."""

    def __init__(self, device: torch.device, settings: LoaderSettings) -> None:
        self.device = device
        self.settings = settings

    def to_device(self, batch: HostBatch) -> DeviceBatch:
        return DeviceBatch(self._moved(batch.images), self._moved(batch.tokens), batch.lengths)

    def _moved(self, tensor: Tensor | None) -> Tensor | None:
        return None if tensor is None else tensor.to(self.device, non_blocking=self.settings.pin_memory)

    def __call__(
        self, items: Iterable[Item], prepare: Callable[[Item], HostBatch]
    ) -> Iterator[tuple[Item, DeviceBatch]]:
        def host(item: Item) -> HostBatch:
            batch = prepare(item)
            return batch.pinned() if self.settings.pin_memory else batch

        for item, batch in prefetched(items, host, self.settings.num_workers, self.settings.prefetch_batches):
            yield item, self.to_device(batch)
