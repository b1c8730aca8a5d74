"""Random resized crops on the training pixels (models/training/augmentation.py): the boxes drawn as torchvision
draws them, each crop against a per-pixel bilinear reference, the whole-image box exact, the same boxes from the
same seed, and a run with crops refused where the trunk trains on cached features."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.cached_views import CROP_RATIO
from models.settings import TrainSettings
from models.training.augmentation import crop_boxes, cropped


def bilinear_reference(image: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """One ``[S, S, 3]`` uint8 image's box resized to ``S`` by the textbook formula, pixel by pixel: output pixel
    ``(i, j)`` reads the input at the box's point under its centre (pixel centres at half-integers), bilinearly,
    with the border pixels repeated outside the image."""
    side = image.shape[0]
    x0, y0, width, height = box
    source = image.astype(np.float64) / 255.0
    out = np.zeros((3, side, side))
    for i in range(side):
        for j in range(side):
            x = (x0 + width * (j + 0.5) / side) * side - 0.5
            y = (y0 + height * (i + 0.5) / side) * side - 0.5
            x, y = min(max(x, 0.0), side - 1.0), min(max(y, 0.0), side - 1.0)
            left, top = int(math.floor(x)), int(math.floor(y))
            right, bottom = min(left + 1, side - 1), min(top + 1, side - 1)
            fx, fy = x - left, y - top
            value = (
                source[top, left] * (1 - fx) * (1 - fy)
                + source[top, right] * fx * (1 - fy)
                + source[bottom, left] * (1 - fx) * fy
                + source[bottom, right] * fx * fy
            )
            out[:, i, j] = value
    return out


def test_each_crop_is_its_box_resized_bilinearly():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 9, 9, 3), dtype=np.uint8)
    boxes = [(0.0, 0.0, 1.0, 1.0), (0.1, 0.25, 0.5, 0.6), (0.4, 0.05, 0.6, 0.3)]
    made = cropped(torch.from_numpy(images), torch.tensor(boxes))
    assert made.shape == (3, 3, 9, 9) and made.dtype == torch.float32
    for image, box, crop in zip(images, boxes, made, strict=True):
        np.testing.assert_allclose(crop.numpy(), bilinear_reference(image, box), atol=1e-5)


def test_the_whole_image_box_gives_the_image_itself():
    images = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    whole = cropped(images, torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 2))
    assert torch.allclose(whole, images.permute(0, 3, 1, 2).float() / 255, atol=1e-6)


def test_boxes_are_torchvision_s_draws_within_the_image():
    boxes = crop_boxes(4000, 0.08, torch.Generator().manual_seed(0), 224)
    x0, y0, width, height = boxes.unbind(dim=1)
    assert bool(((x0 >= 0) & (y0 >= 0) & (x0 + width <= 1 + 1e-6) & (y0 + height <= 1 + 1e-6)).all())
    area, aspect = width * height, width / height
    whole = (width == 1) & (height == 1)
    assert bool((area[~whole] >= 0.08 * 0.97).all()), "at least the share asked for (boxes are whole pixels)"
    low, high = CROP_RATIO
    assert bool(((aspect[~whole] >= low * 0.97) & (aspect[~whole] <= high * 1.03)).all())
    assert 0.3 < float(area.mean()) < 0.7, "area shares spread over [0.08, 1]"
    assert float(whole.float().mean()) < 0.01, "ten attempts almost always find a box that fits"


def test_the_same_seed_draws_the_same_boxes_and_a_scale_of_one_keeps_the_image():
    first = crop_boxes(64, 0.35, torch.Generator().manual_seed(7), 96)
    again = crop_boxes(64, 0.35, torch.Generator().manual_seed(7), 96)
    assert torch.equal(first, again)
    generator = torch.Generator().manual_seed(3)
    whole = crop_boxes(16, 1.0, generator, 96)
    assert torch.allclose(whole[:, 2:], torch.ones(16, 2))
    # one draw whatever the boxes: what follows in the generator does not depend on them
    reference = torch.Generator().manual_seed(3)
    torch.randint(0, 1 << 62, (1,), generator=reference)
    assert torch.equal(torch.rand(5, generator=generator), torch.rand(5, generator=reference))


def test_crops_are_a_training_setting_in_range_and_off_by_default():
    assert TrainSettings().random_resized_crop is None
    assert TrainSettings(random_resized_crop=0.08).random_resized_crop == 0.08
    for bad in (0.0, 1.5, True):
        with pytest.raises(ValueError, match="random_resized_crop"):
            TrainSettings(random_resized_crop=bad)


def step_of(rows: int, offset: int, local: int):
    """What :func:`randomly_cropped` reads of a step's plan: the global batch's rows, this rank's share."""
    from types import SimpleNamespace

    return SimpleNamespace(merged=SimpleNamespace(rows=list(range(rows))), local=SimpleNamespace(rows=list(range(local))), offset=offset)


def test_each_rank_crops_its_share_of_the_global_batch_s_draws():
    """Two data-parallel ranks draw the boxes of the whole global batch from the same seeded generator and
    crop their own rows, so together they crop as one process would; a run without crops, or a cached trunk's
    features, are left as they are."""
    from types import SimpleNamespace

    from models.training.augmentation import randomly_cropped

    images = torch.randint(0, 256, (4, 12, 12, 3), dtype=torch.uint8)
    crops = TrainSettings(random_resized_crop=0.3)
    one = randomly_cropped(images, step_of(4, 0, 4), SimpleNamespace(flip_generator=torch.Generator().manual_seed(5)), crops)
    second_rank = randomly_cropped(images[2:], step_of(4, 2, 2), SimpleNamespace(flip_generator=torch.Generator().manual_seed(5)), crops)
    assert torch.equal(one[2:], second_rank)
    assert not torch.allclose(one, images.permute(0, 3, 1, 2).float() / 255)
    setup = SimpleNamespace(flip_generator=torch.Generator().manual_seed(5))
    assert randomly_cropped(images, step_of(4, 0, 4), setup, TrainSettings()) is images
    features = torch.rand(4, 8)
    assert randomly_cropped(features, step_of(4, 0, 4), setup, crops) is features


def test_the_model_record_holds_the_crops_only_when_a_run_crops():
    """A run that crops its pixels records the least share its crops kept; the record's declared part reads it
    back (and refuses a share out of range); a run without crops writes the record it always did."""
    from models.record_parts import TrunkTraining
    from models.record_settings import trunk_training_record

    plain = trunk_training_record(TrainSettings(backbone="resnet18", trunk="finetune", trunk_warm_start=False))
    crops = trunk_training_record(TrainSettings(backbone="resnet18", trunk="finetune", trunk_warm_start=False, random_resized_crop=0.25))
    assert "random_resized_crop" not in plain and crops == {**plain, "random_resized_crop": 0.25}
    assert TrunkTraining(**crops).random_resized_crop == 0.25 and TrunkTraining(**plain).random_resized_crop is None
    with pytest.raises(ValueError, match="random_resized_crop"):
        TrunkTraining(**{**crops, "random_resized_crop": 2.0})


def test_crops_act_only_where_the_trunk_trains_on_pixels():
    """On a frozen trunk's cached features, or a top-stage trunk's cached map, nothing is cropped: the setting does
    not act there, so it is out of the run's hash (a warm start's frozen parent is the run without crops) and out
    of its model record."""
    from common.settings import significant
    from models.record_settings import crops_pixels

    pixels = TrainSettings(trunk="finetune", random_resized_crop=0.5)
    assert significant(pixels)["random_resized_crop"] == 0.5 and crops_pixels(pixels)
    for trunk in ("frozen", "top1"):
        cached = TrainSettings(trunk=trunk, horizontal_flip=False, random_resized_crop=0.5)
        assert "random_resized_crop" not in significant(cached) and not crops_pixels(cached)
        assert significant(cached) == significant(TrainSettings(trunk=trunk, horizontal_flip=False))


def test_a_run_without_crops_keeps_its_plan_and_one_with_crops_records_them():
    """The setting is off by default and was added after 1.0: off, it is left out of the plan's JSON (so of its
    id and the report's identity: no earlier plan moves); on, the plan holds it; both read back as written."""
    from pipeline.config.settings_json import as_json, from_json

    off, on = as_json(TrainSettings()), as_json(TrainSettings(random_resized_crop=0.5))
    assert "random_resized_crop" not in off and on["random_resized_crop"] == 0.5
    assert from_json(TrainSettings, off) == TrainSettings()
    assert from_json(TrainSettings, on) == TrainSettings(random_resized_crop=0.5)
