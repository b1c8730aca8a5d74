"""Random resized crops of the training images (``TrainSettings.random_resized_crop``), on the device.

Each training image is replaced by a random box of it resized to the full side, as torchvision's
``RandomResizedCrop(size, scale=(s, 1), ratio=(3/4, 4/3))`` does on the host: an area share drawn in ``[s, 1]``
and an aspect drawn log-uniformly in ``[3/4, 4/3]``, ten attempts, the first box that fits the image, else the
whole image; its position uniform. Why on the device and drawn in the training thread: the boxes are drawn from
the run's augmentation generator (``TrainingSetup.flip_generator``, seeded by the run's seed and kept in every
checkpoint) for the whole global batch in order, right after the flip coins, so any number of loader threads and
ranks draw the same boxes and a resumed run the ones it would have drawn; one ``grid_sample`` then crops and
resizes the batch. A run without crops draws nothing more: its flips, and so its numbers, are unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from models.settings import TrainSettings
from models.training.data import StepPlan
from models.training.setup import TrainingSetup

#: torchvision's RandomResizedCrop: the aspect ratios tried, and how many boxes before the whole image
ASPECT_RANGE = (3 / 4, 4 / 3)
ATTEMPTS = 10


def crop_boxes(count: int, min_scale: float, generator: torch.Generator) -> Tensor:
    """``[count, 4]`` boxes ``(x0, y0, width, height)`` as shares of a square image's side (torchvision's
    draws, continuous: the first of :data:`ATTEMPTS` boxes that fits, else the whole image). The same number of
    draws per image whatever fits, so the generator's later draws do not depend on the boxes."""
    area = torch.empty(count, ATTEMPTS).uniform_(min_scale, 1.0, generator=generator)
    log_aspect = torch.empty(count, ATTEMPTS).uniform_(*map(math.log, ASPECT_RANGE), generator=generator)
    position = torch.rand(count, 2, generator=generator)
    aspect = log_aspect.exp()
    width, height = (area * aspect).sqrt(), (area / aspect).sqrt()
    fits = (width <= 1) & (height <= 1)
    first = fits.to(torch.int64).argmax(dim=1, keepdim=True)  # the first attempt that fits (0 when none does)
    any_fits = fits.any(dim=1)
    width = torch.where(any_fits, width.gather(1, first).squeeze(1), torch.ones(count))
    height = torch.where(any_fits, height.gather(1, first).squeeze(1), torch.ones(count))
    return torch.stack([position[:, 0] * (1 - width), position[:, 1] * (1 - height), width, height], dim=1)


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
    boxes = crop_boxes(len(plan.merged.rows), settings.random_resized_crop, setup.flip_generator)
    return cropped(images, boxes[plan.offset : plan.offset + len(plan.local.rows)])
