"""Training settings, declared once (:mod:`common.settings`: each field's default, range or choices, whether it
changes what is computed, and what it means), with the BatchNorm modes they name (the trunk modes and the
model config whose declarations they share: models/config.py); profiles
(pipeline/config/profiles.py) state what differs from these defaults."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from common.registry import Registry
from common.settings import (
    Limit,
    above,
    at_least,
    between,
    check_declared,
    named,
    operational_names,
    redeclared,
    setting,
)
from evaluation.selection_metrics import SELECTION_METRICS, SelectionMetric
from models.acceleration import AMP_MODES
from models.batching import NEIGHBOR_MODES, NeighborMode
from models.config import ModelConfig, TrunkMode, trunk_mode


@dataclass(frozen=True)
class BatchNormMode:
    """What the BatchNorm layers of a trained trunk part do in training (evaluation always uses their running
    statistics)."""

    name: str
    #: normalise by each training batch's statistics and update the running ones (PyTorch's default, and what
    #: the paper's fine-tuned ResNet-50 did); False: keep the running (ImageNet) statistics, train the scale
    #: and shift only
    batch_statistics: bool


#: ``train.trunk_batchnorm``
BATCHNORM_MODES: Registry[BatchNormMode] = Registry("trunk batchnorm mode")
BATCHNORM_MODES.add("batch", BatchNormMode("batch", batch_statistics=True))
BATCHNORM_MODES.add("frozen", BatchNormMode("frozen", batch_statistics=False))


def _registry_choice(registry: Registry) -> Limit:
    return named(registry.names, registry.unknown_message)


def _trunk_trains(t: TrainSettings) -> bool:
    return t.trunk_mode.trains_trunk


def _warm_started(t: TrainSettings) -> bool:
    return t.warm_started


def _trains_cached_map(t: TrainSettings) -> bool:
    return t.trunk_mode.trains_trunk and t.trunk_mode.cached_features


def _crops_cached_views(t: TrainSettings) -> bool:
    return _trains_cached_map(t) and t.trunk_views > 1


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation of §3.3: Adam 1e-4, weight decay 1e-5, batch 64, plateau decay x0.1 after 5 epochs."""

    # the model config's (models.config.ModelConfig): one declaration each, shared
    backbone: str = redeclared(ModelConfig, "backbone")
    pretrained: bool = redeclared(ModelConfig, "pretrained")
    #: a trunk needs a few pixels a side; the upper bound keeps one image's memory in reach
    image_size: int = setting(224, "side in pixels of the square image the trunk sees", between(8, 8192, low_open=False))
    embed_dim: int = redeclared(ModelConfig, "embed_dim")
    gru_hidden: int = redeclared(ModelConfig, "gru_hidden")
    max_text_tokens: int = setting(64, "a text is cut to this many tokens", between(1, 1 << 16, low_open=False))
    #: per process: the loss sees ``batch_size * nproc_per_node * nnodes`` pairs (and their neighbors)
    batch_size: int = setting(64, "pairs per batch of each process", at_least(1))
    epochs: int = setting(30, "the epoch cap", at_least(1))
    learning_rate: float = setting(1e-4, "Adam's learning rate", above(0))
    weight_decay: float = setting(1e-5, "Adam's weight decay", at_least(0))
    lr_patience: int = setting(5, "epochs without a lower validation loss before the learning rate decays", at_least(0))
    lr_factor: float = setting(0.1, "the plateau decay multiplies the learning rate by this", between(0, 1, high_open=True))
    horizontal_flip: bool = setting(True, "flip training images left-right at random (needs pixels, not a cached trunk)")
    #: in_batch encodes the same rows as the baseline; extra_rows twice the encoder work
    neighbor_mode: str = setting(
        "in_batch",
        "how the sampled neighbor i' of Eq. 5 reaches a batch: half of it (in_batch) or as extra rows (extra_rows)",
        _registry_choice(NEIGHBOR_MODES),
    )
    #: False: the neighbor pair is an ordinary negative, which fights L_text / L_img
    mask_neighbor_pairs: bool = setting(
        True, "in_batch: an anchor and its sampled neighbor are not cross-modal negatives of each other"
    )
    trunk: str = redeclared(ModelConfig, "trunk")
    #: the trained part starts as the ImageNet network computes: its BatchNorm keeps ImageNet's running statistics
    #: unless asked otherwise, so with a warm start the model's first embeddings are the frozen model's (issue 50)
    trunk_batchnorm: str = setting(
        "frozen",
        "a trained trunk part's BatchNorm in training: frozen (ImageNet's statistics kept, the scale and shift train) "
        "or batch (each batch's statistics, PyTorch's default, the paper's)",
        _registry_choice(BATCHNORM_MODES),
        acts=_trunk_trains, acts_text="the trunk trains",
    )
    #: pretrained layers often take a smaller rate than the layers trained from scratch
    trunk_learning_rate_scale: float = setting(
        1.0, "the trained trunk part's learning rate as a multiple of the run's (1: the paper's one rate)",
        above(0), acts=_trunk_trains, acts_text="the trunk trains",
    )
    #: VSE++'s fine-tuning: the head is trained on the frozen trunk first, then the trunk joins it at a lower rate
    trunk_warm_start: bool = setting(
        True,
        "a trunk that trains starts from the same variant's frozen-trunk run at these settings and seed (its parent: its "
        "best checkpoint gives the heads and the text tower, and competes as epoch 0); false: all from the first weights",
        acts=_trunk_trains, acts_text="the trunk trains",
    )
    trunk_epochs: int = setting(
        10, "the epoch cap of the trunk's run after a warm start (its parent trained `epochs` first)", at_least(1),
        acts=_warm_started, acts_text="the trunk trains from a warm start",
    )
    warm_start_learning_rate_scale: float = setting(
        0.1, "the learning rate after a warm start, as a multiple of learning_rate (VSE++ fine-tunes at a tenth)",
        above(0), acts=_warm_started, acts_text="the trunk trains from a warm start",
    )
    #: a cached map cannot be cropped or flipped at training time: its views are cached instead
    trunk_views: int = setting(
        1,
        "images cached under the trained stages per image: the image itself and views-1 random resized crops, each "
        "flipped at random; training draws one crop per image per epoch (1: no augmentation)",
        between(1, 16, low_open=False), acts=_trains_cached_map, acts_text="the top stages train on a cached map",
    )
    trunk_crop_scale: float = setting(
        0.35, "the smallest share of the image's area a cached view's random resized crop keeps", between(0, 1),
        acts=_crops_cached_views, acts_text="the top stages train on a cached map of views > 1",
    )
    early_stopping_patience: int | None = setting(
        None, "stop when the selection metric has not improved for this many epochs (null: run every epoch)",
        at_least(1, or_null=True),
    )
    #: docs/protocols.md says which metric each profile uses, and why
    selection: str = setting(
        "val_loss",
        "what early stopping and model_best.pt follow (the plateau decay always follows the validation loss)",
        _registry_choice(SELECTION_METRICS),
    )
    selection_max_pairs: int = setting(
        5000, "the validation metrics rank at most this many pairs (a fixed sample of whole groups above it)", at_least(2)
    )
    selection_n_way: int = setting(
        5, "n of the expected n-way R@1 selection metric (the n-way task the report scores on test)", at_least(2)
    )
    #: part of the output hash: it changes the numbers a GPU run produces
    amp: str = setting(
        "auto",
        "mixed precision on CUDA (never on CPU): auto (bf16 where supported, else fp16 with a gradient scaler), "
        "bf16, fp16 or off (fp32)",
        _registry_choice(AMP_MODES),
    )
    nproc_per_node: int = setting(1, "processes (one per GPU) per node of a torchrun run", at_least(1))
    nnodes: int = setting(1, "nodes of a torchrun run", at_least(1))
    # ---- speed only: these change how fast, never what is computed, so no output's hash holds them; each
    # has a default that is safe on CPU and on CUDA ----
    num_workers: int | None = setting(
        None, "threads preparing batches (null: 4 on CUDA, 0 on CPU, where the training thread prepares them)",
        at_least(0, or_null=True), operational=True,
    )
    prefetch_batches: int = setting(4, "batches prepared ahead of the one training", at_least(1), operational=True)
    pin_memory: bool = setting(True, "page-locked host batches, so the copy to the GPU overlaps compute", operational=True)
    channels_last: bool = setting(True, "NHWC layout for the image trunk on CUDA", operational=True)
    cudnn_benchmark: bool = setting(True, "cuDNN times its convolution algorithms for the fixed input shape", operational=True)
    fused_adam: bool = setting(True, "Adam as one fused kernel on CUDA", operational=True)
    #: models/training/static_step.py; CUDA, one process, bf16 or fp32 only; the last short batch of an epoch runs
    #: the plain step; off until a GPU run has verified it (benchmarks/gpu_check.py)
    cuda_graphs: bool = setting(
        False, "capture the step at fixed shapes as a CUDA graph and replay it (equal up to float summation order)",
        operational=True,
    )
    rdzv_endpoint: str = setting("", "torchrun's rendezvous host:port of the first node, for nnodes > 1", operational=True)
    log_every_steps: int = setting(
        50, "steps between reads of the losses from the device (the progress bar, the non-finite check)", at_least(1),
        operational=True,
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if self.cuda_graphs and self.nproc_per_node * self.nnodes > 1:
            raise ValueError(
                "cuda_graphs captures the step of one process; with nproc_per_node or nnodes > 1 set "
                "cuda_graphs=false"
            )

    @property
    def selection_metric(self) -> SelectionMetric:
        return SELECTION_METRICS.get(self.selection)

    @cached_property
    def trunk_mode(self) -> TrunkMode:
        """``trunk`` parsed, once."""
        return trunk_mode(self.trunk)

    @property
    def warm_started(self) -> bool:
        """The trunk trains, starting from the same variant's frozen-trunk run (its parent)."""
        return self.trunk_mode.trains_trunk and self.trunk_warm_start

    @property
    def batchnorm_mode(self) -> BatchNormMode:
        return BATCHNORM_MODES.get(self.trunk_batchnorm)

    @property
    def neighbors(self) -> NeighborMode:
        return NEIGHBOR_MODES.get(self.neighbor_mode)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


#: settings that change speed, not results: kept out of every output's hash, so changing one reuses a run
OPERATIONAL_FIELDS = operational_names(TrainSettings)
