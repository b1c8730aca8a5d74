"""Training settings, with the trainer that reads them; profiles (pipeline/config/profiles.py) choose values."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from common.registry import Registry
from evaluation.selection_metrics import SELECTION_METRICS, SelectionMetric
from models.acceleration import AMP_MODES
from models.batching import NEIGHBOR_MODES, NeighborMode

#: a field's metadata key: the setting came after 1.0, so its default (what earlier runs did) is not hashed
ADDED_AFTER_1_0 = "added_after_1_0"


def added_setting(default: Any) -> Any:
    """A settings field added after 1.0: hashed into an output's identity only when it is not ``default``."""
    return field(default=default, metadata={ADDED_AFTER_1_0: True})


@dataclass(frozen=True)
class TrunkMode:
    """How much of the image trunk trains: none of it (``frozen``), its top ``k`` stages and head (``top<k>``)
    or all of it (``finetune``, the paper's §3.3)."""

    name: str
    #: the model trains on what the trunk computes below its trained part, cached once (``TrunkFeatures``), not
    #: on pixels: the whole trunk's features when frozen, the map under the top stages for ``top<k>``
    cached_features: bool
    #: the trunk's top stages the model holds and trains (0: none; None: every stage, from pixels)
    trained_stages: int | None

    @property
    def trains_trunk(self) -> bool:
        return self.trained_stages != 0


#: the top-stages modes' names: ``top1``, ``top2``, ... (how many of the backbone's stages it has is checked
#: against the backbone when the run is planned)
TOP_STAGES_PREFIX = "top"

#: "finetune": the trunk trains end to end on pixels (paper §3.3); "frozen": it is run once and its cached
#: features train the projection and the text tower (VSE++ / PVSE's precomputed-feature mode); "top<k>" (not
#: listed: any k >= 1): the trunk's map under its top k stages is cached once and those stages, its head and
#: the projection train on it (:func:`trunk_mode`)
TRUNK_MODES: Registry[TrunkMode] = Registry("trunk mode")
TRUNK_MODES.add("finetune", TrunkMode("finetune", cached_features=False, trained_stages=None))
TRUNK_MODES.add("frozen", TrunkMode("frozen", cached_features=True, trained_stages=0))


def trunk_mode(name: str) -> TrunkMode:
    """The trunk mode ``name``: a registered one, or ``top<k>`` for the top k >= 1 stages; a ValueError saying
    what is valid otherwise."""
    if name in TRUNK_MODES:
        return TRUNK_MODES.get(name)
    count = name.removeprefix(TOP_STAGES_PREFIX)
    if name.startswith(TOP_STAGES_PREFIX) and count.isdigit() and int(count) >= 1 and count == str(int(count)):
        return TrunkMode(name, cached_features=True, trained_stages=int(count))
    raise ValueError(f"{TRUNK_MODES.unknown_message(name)}, or top<k> (the top k >= 1 stages train, e.g. top2)")


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


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation of §3.3: Adam 1e-4, weight decay 1e-5, batch 64, plateau decay x0.1 after 5 epochs."""

    backbone: str = "resnet50"
    pretrained: bool = True
    image_size: int = 224
    embed_dim: int = 256
    gru_hidden: int = 512
    max_text_tokens: int = 64
    batch_size: int = 64
    epochs: int = 30
    learning_rate: float = 1e-4
    weight_decay: float = 1e-5
    lr_patience: int = 5
    lr_factor: float = 0.1
    horizontal_flip: bool = True
    #: how the sampled neighbor i' of Eq. 5 reaches the batch: "in_batch" fills half of each batch with
    #: the anchors' neighbors (same rows encoded as the baseline), "extra_rows" encodes them as extra rows.
    neighbor_mode: str = "in_batch"
    #: in ``in_batch``, an anchor and its sampled neighbor are not cross-modal negatives of each other
    #: (False: the neighbor pair is an ordinary negative, which fights L_text / L_img)
    mask_neighbor_pairs: bool = True
    #: how much of the trunk trains (:func:`trunk_mode`): "finetune" all of it, end to end on pixels (paper
    #: §3.3); "frozen" none (its cached features train the projection and the text tower, VSE++ / PVSE's
    #: precomputed-feature mode); "top<k>" its top k stages and head, on the cached map under them
    trunk: str = "finetune"
    #: a trained trunk part's BatchNorm in training (:data:`BATCHNORM_MODES`): "batch" statistics (PyTorch's
    #: default) or "frozen" (the ImageNet running statistics kept)
    trunk_batchnorm: str = added_setting("batch")
    #: the trained trunk part's learning rate as a multiple of ``learning_rate`` (1: one rate for every
    #: parameter, the paper's; pretrained layers often take a smaller one than the layers trained from scratch)
    trunk_learning_rate_scale: float = added_setting(1.0)
    #: stop when the selection metric has not improved for this many epochs (None: run every epoch)
    early_stopping_patience: int | None = None
    #: what early stopping and ``model_best.pt`` follow (``evaluation.selection_metrics``); the plateau LR decay
    #: always follows the validation loss (§3.3). docs/protocols.md says which metric each profile uses, and why
    selection: str = "val_loss"
    #: the validation metrics rank at most this many validation pairs (a fixed sample of whole groups above it)
    selection_max_pairs: int = 5000
    #: n of the expected n-way R@1 (``selection="val_nway_r1"``): the n-way task the report scores on test
    selection_n_way: int = 5
    #: mixed precision on CUDA: "auto" is bf16 where the GPU supports it, else fp16 with a GradScaler; "off"
    #: trains in fp32. Never used on CPU (runs there stay exactly fp32), but part of the output hash: it
    #: changes the numbers a GPU run produces
    amp: str = "auto"
    #: processes (one per GPU) per node and nodes of a torchrun / DistributedDataParallel run; ``batch_size``
    #: is per process, so the loss sees ``batch_size * nproc_per_node * nnodes`` pairs (and their neighbors)
    nproc_per_node: int = 1
    nnodes: int = 1
    # ---- speed only: these change how fast, never what is computed, so they are left out of the output
    # hash (OPERATIONAL_FIELDS); each has a default that is safe on CPU and on CUDA ----
    #: background threads preparing batches (slice the uint8 cache, resize, pin); None: 4 on CUDA, 0 on CPU
    #: (0 prepares each batch in the training thread, as the loop always did)
    num_workers: int | None = None
    #: batches prepared ahead of the one training (with workers)
    prefetch_batches: int = 4
    #: page-locked host batches, so the copy to the GPU overlaps compute (CUDA only)
    pin_memory: bool = True
    #: NHWC memory layout for the image trunk (CUDA only: the layout tensor cores are fastest in)
    channels_last: bool = True
    #: let cuDNN time its convolution algorithms for the (fixed) input shape (CUDA only)
    cudnn_benchmark: bool = True
    #: Adam as one fused kernel over every parameter (CUDA only; the CPU keeps PyTorch's default Adam)
    fused_adam: bool = True
    #: the training step at fixed shapes (text at the full ``max_text_tokens`` width, index tensors copied
    #: into static device buffers), captured once as a CUDA graph and replayed: the host launches one graph
    #: instead of every kernel of the step (models/training/static_step.py; CUDA, one process, bf16 or fp32
    #: only; the last short batch of an epoch runs the plain step). Off until a GPU run has verified it
    #: (``benchmarks/gpu_check.py``); what is computed is the same up to float summation order
    cuda_graphs: bool = False
    #: torchrun's rendezvous for nnodes > 1 ("host:port" of the first node; c10d backend)
    rdzv_endpoint: str = ""
    #: training steps between reads of the losses from the device (the progress bar, the non-finite check):
    #: the step loop itself never waits for the device
    log_every_steps: int = 50

    def __post_init__(self) -> None:
        trunk_mode(self.trunk)  # a ValueError naming the valid modes
        if self.trunk_batchnorm not in BATCHNORM_MODES:
            raise ValueError(BATCHNORM_MODES.unknown_message(self.trunk_batchnorm))
        if not self.trunk_learning_rate_scale > 0:
            raise ValueError(f"trunk_learning_rate_scale must be > 0, got {self.trunk_learning_rate_scale}")
        if self.neighbor_mode not in NEIGHBOR_MODES:
            raise ValueError(NEIGHBOR_MODES.unknown_message(self.neighbor_mode))
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp: {AMP_MODES.unknown_message(self.amp)}")
        if self.selection not in SELECTION_METRICS:
            raise ValueError(SELECTION_METRICS.unknown_message(self.selection))
        if self.selection_n_way < 2:
            raise ValueError(f"selection_n_way must be >= 2, got {self.selection_n_way}")
        if self.log_every_steps < 1:
            raise ValueError(f"log_every_steps must be >= 1, got {self.log_every_steps}")
        if self.cuda_graphs and self.nproc_per_node * self.nnodes > 1:
            raise ValueError(
                "cuda_graphs captures the step of one process; with nproc_per_node or nnodes > 1 set "
                "cuda_graphs=false"
            )
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise ValueError(
                f"nproc_per_node and nnodes must be >= 1, got {self.nproc_per_node}, {self.nnodes}"
            )

    @property
    def selection_metric(self) -> SelectionMetric:
        return SELECTION_METRICS.get(self.selection)

    @property
    def trunk_mode(self) -> TrunkMode:
        return trunk_mode(self.trunk)

    @property
    def batchnorm_mode(self) -> BatchNormMode:
        return BATCHNORM_MODES.get(self.trunk_batchnorm)

    @property
    def neighbors(self) -> NeighborMode:
        return NEIGHBOR_MODES.get(self.neighbor_mode)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


#: settings that change speed, not results: kept out of Train's output hash, so changing one reuses a run
OPERATIONAL_FIELDS = frozenset(
    {
        "num_workers",
        "prefetch_batches",
        "pin_memory",
        "channels_last",
        "cudnn_benchmark",
        "fused_adam",
        "cuda_graphs",
        "rdzv_endpoint",
        "log_every_steps",
    }
)


def significant_settings(settings: TrainSettings) -> dict[str, Any]:
    """The settings a trained model depends on (what Train hashes): all but :data:`OPERATIONAL_FIELDS`, and a
    setting added after 1.0 only when it differs from its default (which is what every run before it did), so
    adding a setting moves no existing output."""
    values = asdict(settings)
    return {
        f.name: values[f.name]
        for f in fields(settings)
        if f.name not in OPERATIONAL_FIELDS and not (f.metadata.get(ADDED_AFTER_1_0) and values[f.name] == f.default)
    }
