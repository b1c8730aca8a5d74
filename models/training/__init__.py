"""Cross-modal training, one job per module:

- ``data``: the pairs (:class:`PairData`) and the plan of one step (this rank's rows of a global batch);
- ``loss_inputs``: model outputs -> the keywords every loss takes, anchor/neighbor groups merged;
- ``setup``: the model on its device, DDP, mixed precision, sampler, optimiser and schedule, checked first;
- ``step``: one optimisation step, its losses kept on the device (:class:`StepLog`);
- ``validation``: the validation score after each epoch;
- ``checkpoint``: atomic checkpoints, verified resume;
- ``history``: the epoch rows, ``history.csv``, early stopping;
- ``loop``: the :class:`Trainer` that composes them;
- ``run``: one run assembled (record, data, settings, losses -> a ready Trainer) and finished (the record sealed,
  the summary), for the pipeline's Train, the benchmarks and the tests alike.

Embedding pairs outside a training step is :mod:`models.inference`.
"""

from models.training.checkpoint import BEST_CHECKPOINT, CHECKPOINT_KEYS, LAST_CHECKPOINT, PREV_CHECKPOINT
from models.training.data import PairData, StepPlan, TrainingData
from models.training.history import HISTORY_FILE, TrainResult
from models.training.loop import Trainer
from models.training.loss_inputs import batch_loss_inputs, compute_losses, cross_modal_group_ids, loss_inputs
from models.training.setup import pick_device

__all__ = [
    "BEST_CHECKPOINT",
    "CHECKPOINT_KEYS",
    "HISTORY_FILE",
    "LAST_CHECKPOINT",
    "PREV_CHECKPOINT",
    "PairData",
    "StepPlan",
    "TrainResult",
    "TrainingData",
    "Trainer",
    "batch_loss_inputs",
    "compute_losses",
    "cross_modal_group_ids",
    "loss_inputs",
    "pick_device",
]
