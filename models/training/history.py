"""What a run records per epoch and what it decides from it: the result (history, best epoch), the
``history.csv`` and TensorBoard logs, and early stopping on a plateau."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from common.files import atomic_path
from common.run_folder import HISTORY_FILE
from evaluation.selection_metrics import SELECTION_METRICS


@dataclass
class TrainResult:
    """The epochs' rows and the best epoch by ``selection`` (a key of the rows, see
    ``evaluation.selection_metrics.SELECTION_METRICS``), with its value ``best_score``."""

    selection: str = "val_loss"
    history: list[dict] = field(default_factory=list)
    best_epoch: int = -1
    best_score: float | None = None
    resumed_from_epoch: int = 0
    #: the epoch after which early stopping ended training (None: ran every epoch)
    stopped_early_at: int | None = None

    def improves(self, value: float) -> bool:
        """Strictly better than the best so far (a tie keeps the earlier epoch)."""
        if self.best_score is None:
            return not math.isnan(value)
        return SELECTION_METRICS[self.selection].better(value, self.best_score)

    def record(self, row: dict) -> bool:
        """Append an epoch's row; whether its selection metric is a new best (then it becomes the best)."""
        self.history.append(row)
        if self.improves(row[self.selection]):
            self.best_score = row[self.selection]
            self.best_epoch = row["epoch"]
            return True
        return False

    def forget_best(self) -> None:
        self.best_epoch, self.best_score = -1, None

    def plateaued(self, last_epoch: int, patience: int | None) -> bool:
        """Early stopping: the selection metric has not improved for ``patience`` epochs (None: never)."""
        # best epoch 0: the starting weights of a warm-started run, which compete as epoch 0
        return patience is not None and self.best_epoch >= 0 and last_epoch - self.best_epoch >= patience

    @property
    def trained_rows(self) -> list[dict]:
        """The rows of the epochs that trained (not a warm start's epoch 0, which only validated)."""
        return [row for row in self.history if row["epoch"] > 0]


def write_history(work_dir: Path, history: list[dict]) -> None:
    """``history.csv``: one row per epoch, ``epoch`` first, the other columns sorted."""
    columns = sorted({key for row in history for key in row}, key=lambda c: (c != "epoch", c))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    with atomic_path(Path(work_dir) / HISTORY_FILE) as tmp:
        tmp.write_text(buffer.getvalue())


class TensorBoardLog:
    """Each epoch's row as scalars under ``<work_dir>/tensorboard`` (nothing when TensorBoard is missing)."""

    def __init__(self, work_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # TensorBoard is optional
            self.writer = None
        else:
            self.writer = SummaryWriter(log_dir=str(Path(work_dir) / "tensorboard"))

    def add(self, row: dict) -> None:
        if self.writer is not None:
            for name, value in row.items():
                if name != "epoch":
                    self.writer.add_scalar(name, value, row["epoch"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
