"""How pairs and their semantic neighbors (Eq. 5) are put into training batches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.registry import Registry


@dataclass(frozen=True)
class NeighborMode:
    """How the sampled neighbor i' of Eq. 5 reaches a batch (``TrainSettings.neighbor_mode``)."""

    name: str
    #: the neighbors are half of the cross-modal batch (in-batch negatives of the other rows, as many rows
    #: encoded as the baseline's); else they are encoded as extra rows beside ``batch_size`` anchors
    shares_batch: bool

    def anchors(self, batch_size: int) -> int:
        return batch_size // 2 if self.shares_batch else batch_size

    def main_rows(self, anchors: int) -> int:
        """The rows of the cross-modal batch: anchors and, sharing it, their neighbors."""
        return 2 * anchors if self.shares_batch else anchors

    @property
    def min_batch_size(self) -> int:
        """Two anchors, and two neighbors where they share the batch."""
        return 4 if self.shares_batch else 2


NEIGHBOR_MODES: Registry[NeighborMode] = Registry("neighbor mode")
NEIGHBOR_MODES.add("in_batch", NeighborMode("in_batch", shares_batch=True))
NEIGHBOR_MODES.add("extra_rows", NeighborMode("extra_rows", shares_batch=False))


@dataclass
class Batch:
    """Rows to encode, and how they map to the loss keywords.

    ``rows`` are pair positions; the first ``n_main`` encoded rows form the cross-modal batch. Row
    ``neighbor_rows[m]`` of the encoded rows is the sampled neighbor i' of main row ``neighbor_of[m]``.
    """

    rows: np.ndarray
    n_main: int
    neighbor_rows: np.ndarray | None = None
    neighbor_of: np.ndarray | None = None


class BatchSampler:
    """Shuffled batches of train pairs, optionally with one sampled semantic neighbor per anchor.

    Modes (``neighbor_mode``):

    * no table: plain batches of ``batch_size`` pairs, each train pair once per epoch;
    * ``"in_batch"``: each batch holds ``batch_size // 2`` anchors and one neighbor of each, drawn
      uniformly from the anchor's k nearest train neighbors (Eq. 5); neighbors double as in-batch
      negatives of the other rows, so a batch encodes exactly as many rows as the baseline's. Anchors are
      taken from a running permutation, so every pair is an anchor once every two epochs;
    * ``"extra_rows"``: batches of ``batch_size`` anchors plus their neighbors encoded as extra rows
      (twice the encoder work of the baseline).

    With ``group_ids`` (and no neighbor table) batches are filled group by group — every member of a
    group, then the next group, in a shuffled group order — so losses that need several positives per
    query (SmoothAP, Struc with ground-truth groups) see them; each pair still comes once per epoch.

    Every mode yields ``ceil(n_train / batch_size)`` batches per epoch, so epochs are comparable.
    """

    def __init__(
        self,
        train_positions: np.ndarray,
        batch_size: int,
        rng: np.random.Generator,
        neighbors: np.ndarray | None = None,
        neighbor_mode: str | None = None,
        group_ids: np.ndarray | None = None,
    ) -> None:
        if batch_size < 2:
            raise ValueError(f"batch_size must be at least 2 for in-batch negatives, got {batch_size}")
        #: with a neighbor table, how its neighbors reach a batch (``TrainSettings.neighbor_mode``)
        self.neighbor_mode: NeighborMode | None = None
        if neighbors is not None:
            if len(neighbors) != len(train_positions):
                raise ValueError("the neighbor table must have one row per train pair")
            if neighbor_mode not in NEIGHBOR_MODES:
                raise ValueError(NEIGHBOR_MODES.unknown_message(str(neighbor_mode)))
            self.neighbor_mode = NEIGHBOR_MODES.get(neighbor_mode)
            if batch_size < self.neighbor_mode.min_batch_size:
                raise ValueError(f"{neighbor_mode} neighbor sampling needs batch_size >= 4 (2 anchors + 2 neighbors)")
        self.train_positions = np.asarray(train_positions)
        self.batch_size = batch_size
        self.rng = rng
        self.neighbors = neighbors
        self.group_ids = None if group_ids is None else np.asarray(group_ids)
        if self.group_ids is not None and len(self.group_ids) != len(self.train_positions):
            raise ValueError("group_ids must give one group per train pair")
        self._order = np.empty(0, dtype=np.int64)
        self._cursor = 0

    @property
    def batches_per_epoch(self) -> int:
        return -(-len(self.train_positions) // self.batch_size)

    def state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "order": self._order.tolist(), "cursor": self._cursor}

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._order = np.asarray(state["order"], dtype=np.int64)
        self._cursor = int(state["cursor"])

    def _take(self, count: int) -> np.ndarray:
        """Next ``count`` train indices of a running permutation (reshuffled when used up)."""
        taken = []
        while count > 0:
            if self._cursor >= len(self._order):
                self._order = self.rng.permutation(len(self.train_positions))
                self._cursor = 0
            chunk = self._order[self._cursor : self._cursor + count]
            self._cursor += len(chunk)
            count -= len(chunk)
            taken.append(chunk)
        return np.concatenate(taken)

    def _group_order(self) -> np.ndarray:
        """Train indices, members of one group adjacent, groups and members in shuffled order."""
        shuffled = self.rng.permutation(len(self.group_ids))
        group_rank = self.rng.permutation(int(self.group_ids.max()) + 1)
        return shuffled[np.argsort(group_rank[self.group_ids[shuffled]], kind="stable")]

    def _sample_neighbors(self, anchors: np.ndarray, taken: set[int]) -> np.ndarray:
        """One uniformly drawn table neighbor per anchor, re-drawn (a few times) if already in the batch."""
        k = self.neighbors.shape[1]
        chosen = self.neighbors[anchors, self.rng.integers(0, k, size=len(anchors))]
        for slot in range(len(anchors)):
            for _ in range(3):
                if int(chosen[slot]) not in taken:
                    break
                chosen[slot] = self.neighbors[anchors[slot], self.rng.integers(0, k)]
            taken.add(int(chosen[slot]))
        return chosen

    def epoch(self) -> Iterator[Batch]:
        n = len(self.train_positions)
        if self.neighbors is None:
            self._order = self.rng.permutation(n) if self.group_ids is None else self._group_order()
            self._cursor = n
            for start in range(0, n, self.batch_size):
                chunk = self._order[start : start + self.batch_size]
                # a batch of one group has no negatives (e.g. the last few captions of one image): skip it
                if len(chunk) >= 2 and (self.group_ids is None or np.ptp(self.group_ids[chunk]) > 0):
                    yield Batch(rows=self.train_positions[chunk], n_main=len(chunk))
            return
        n_anchors = self.neighbor_mode.anchors(self.batch_size)
        for _ in range(self.batches_per_epoch):
            anchors = self._take(n_anchors)
            neighbors = self._sample_neighbors(anchors, set(anchors.tolist()))
            rows = self.train_positions[np.concatenate([anchors, neighbors])]
            neighbor_rows = np.arange(n_anchors, 2 * n_anchors)
            n_main = self.neighbor_mode.main_rows(n_anchors)
            yield Batch(
                rows=rows, n_main=n_main, neighbor_rows=neighbor_rows, neighbor_of=np.arange(n_anchors)
            )
