"""Random resized crops of the training images (``TrainSettings.random_resized_crop``), on the device.

Each training image is replaced by a random box of it resized to the full side, as torchvision's
``RandomResizedCrop(size, scale=(s, 1), ratio=(3/4, 4/3))`` does on the host: the box by the one rule the project
draws such crops with (:meth:`models.cached_views.CachedViews.crop_box`, which the cached views of a top-stage
trunk use too). Why on the device and drawn in the training thread: the boxes of the whole global batch are drawn
in order from one seed taken from the run's augmentation generator (``TrainingSetup.flip_generator``, seeded by
the run's seed and kept in every checkpoint), right after the flip coins, so any number of loader threads and
ranks draw the same boxes and a resumed run the ones it would have drawn; one ``grid_sample`` then crops and
resizes the batch. A run without crops draws nothing more: its flips, and so its numbers, are unchanged.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from models.cached_views import CachedViews
from models.settings import TrainSettings
from models.training.data import StepPlan
from models.training.setup import TrainingSetup


def crop_boxes(count: int, min_scale: float, generator: torch.Generator, side: int) -> Tensor:
    """``[count, 4]`` boxes ``(x0, y0, width, height)`` as shares of a square ``side``-pixel image, drawn by
    :meth:`~models.cached_views.CachedViews.crop_box` from one seed of ``generator`` (one draw whatever the boxes,
    so what the generator gives later does not depend on them)."""
    rule = CachedViews(count=2, crop_scale=min_scale)
    rng = np.random.default_rng(int(torch.randint(0, 1 << 62, (1,), generator=generator)))
    boxes = [rule.crop_box(rng, side, side) for _ in range(count)]
    return torch.tensor([[left, top, width, height] for top, left, height, width in boxes], dtype=torch.float32) / side


def cropped(images: Tensor, boxes: Tensor) -> Tensor:
    """uint8 ``[B, S, S, 3]`` images -> float ``[B, 3, S, S]`` in ``[0, 1]``: each image's box (``boxes``, as
    :func:`crop_boxes` gives them) resized bilinearly to the whole side (what the image tower takes as pixels)."""
    count, side = images.shape[0], images.shape[1]
    pixels = images.permute(0, 3, 1, 2).float().div_(255.0)
    x0, y0, width, height = boxes.to(pixels.device, torch.float32).unbind(dim=1)
    # the box in grid_sample's coordinates ([-1, 1] across the image): output u in [-1, 1] reads x0 .. x0 + width
    theta = torch.zeros(count, 2, 3, device=pixels.device)
    theta[:, 0, 0], theta[:, 0, 2] = width, 2 * x0 + width - 1
    theta[:, 1, 1], theta[:, 1, 2] = height, 2 * y0 + height - 1
    grid = F.affine_grid(theta, [count, 3, side, side], align_corners=False)
    return F.grid_sample(pixels, grid, mode="bilinear", padding_mode="border", align_corners=False)


def randomly_cropped(images: Tensor, plan: StepPlan, setup: TrainingSetup, settings: TrainSettings) -> Tensor:
    """This rank's rows of the step, cropped (:func:`cropped`) when the run crops and trains on pixels; the
    images unchanged otherwise (cached trunk features are never cropped)."""
    if settings.random_resized_crop is None or images.is_floating_point():
        return images
    boxes = crop_boxes(len(plan.merged.rows), settings.random_resized_crop, setup.flip_generator, images.shape[1])
    return cropped(images, boxes[plan.offset : plan.offset + len(plan.local.rows)])
