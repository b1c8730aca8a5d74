"""Augmentation for a trunk whose top stages train on a cached map (``train.trunk=top<k>``): the map under the
trained stages is computed once per image and *view* — view 0 the image itself, views 1..V-1 random resized crops
of it, each flipped at random — and training reads one augmented view per image per epoch.

Why cached views rather than crops at training time: the stages under the trained ones run once, into the cache
(``TrunkFeatures``), so a crop or a flip of the pixels cannot happen while training; a few views computed ahead
give the trained stages the variety that random resized crops and flips give a trunk on pixels, at the cost of
the cache growing V times. Every draw is seeded (the crop of view v of cache row r by ``(seed, r, v)``, the view an
epoch reads by ``(seed, epoch)``), so a cache and a run are the same wherever they are made, and a resumed run
draws what an uninterrupted one would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from models.encoders import resize_batch

#: torchvision's RandomResizedCrop default aspect ratios (3/4 to 4/3)
CROP_RATIO = (3 / 4, 4 / 3)
#: a view is flipped left-right with this probability
FLIP_PROBABILITY = 0.5
#: the stream a training run's per-epoch view draw takes its random numbers from (beside its seed and epoch)
_VIEW_DRAW_STREAM = 7


@dataclass(frozen=True)
class CachedViews:
    """How many views of each image are cached and how the augmented ones are made."""

    count: int
    #: the smallest share of the image's area a crop keeps (torchvision's RandomResizedCrop ``scale[0]``)
    crop_scale: float
    crop_ratio: tuple[float, float] = CROP_RATIO
    flip: float = FLIP_PROBABILITY

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"views: at least 1 (the image itself), got {self.count}")
        if not 0 < self.crop_scale <= 1:
            raise ValueError(f"crop_scale: in (0, 1], got {self.crop_scale}")

    @property
    def augmented(self) -> bool:
        return self.count > 1

    def record(self) -> dict[str, Any]:
        """What a model record keeps of them (``trunk_training.views``)."""
        return {"count": self.count, "crop_scale": self.crop_scale, "crop_ratio": list(self.crop_ratio), "flip": self.flip}

    def crop_box(self, rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
        """A random resized crop's ``(top, left, height, width)``: an area share in ``[crop_scale, 1]`` and a
        log-uniform aspect ratio in ``crop_ratio``, ten tries, then the whole image (RandomResizedCrop's rule)."""
        area = height * width
        log_low, log_high = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        for _ in range(10):
            target = area * rng.uniform(self.crop_scale, 1.0)
            ratio = math.exp(rng.uniform(log_low, log_high))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        return 0, 0, height, width

    def view(self, image: torch.Tensor, size: int, seed: int, row: int, view: int) -> torch.Tensor:
        """Augmented view ``view`` >= 1 of cache row ``row`` (uint8 ``[S, S, 3]``) as uint8 ``[size, size, 3]``: a
        seeded random resized crop, flipped at random."""
        if view < 1:
            raise ValueError("view 0 is the image itself (views_of resizes it as the image cache is resized)")
        rng = np.random.default_rng([seed, row, view])
        top, left, h, w = self.crop_box(rng, image.shape[0], image.shape[1])
        cropped = _resized(image, top, left, h, w, size)
        return cropped.flip(1) if rng.uniform() < self.flip else cropped

    def views_of(self, images: torch.Tensor, rows: np.ndarray, size: int, seed: int) -> torch.Tensor:
        """Every view of a batch of cache rows (uint8 ``[B, S, S, 3]``): uint8 ``[B, V, size, size, 3]``, view 0 the
        images resized exactly as a frozen trunk's cache resizes them (so its map is what the frozen model saw)."""
        plain = resize_batch(images, size)
        crops = [
            torch.stack([self.view(image, size, seed, int(row), v) for v in range(1, self.count)])
            for image, row in zip(images, rows, strict=True)
        ] if self.augmented else []
        if not crops:
            return plain[:, None]
        return torch.cat([plain[:, None], torch.stack(crops)], dim=1)

    def epoch_draw(self, seed: int, epoch: int, rows: int) -> np.ndarray | None:
        """The augmented view (1..V-1) each of ``rows`` cache rows is read at in training epoch ``epoch``; None
        without augmented views (view 0 is read)."""
        if not self.augmented:
            return None
        rng = np.random.default_rng([seed, epoch, _VIEW_DRAW_STREAM])
        return rng.integers(1, self.count, size=rows)


def _resized(image: torch.Tensor, top: int, left: int, height: int, width: int, size: int) -> torch.Tensor:
    """The uint8 ``[h, w, 3]`` box of ``image`` resized to ``[size, size, 3]`` as the image cache is resized
    (bilinear, antialiased: :func:`models.encoders.resize_batch`)."""
    box = image[top : top + height, left : left + width].permute(2, 0, 1)[None].float()
    if box.shape[-2:] != (size, size):
        box = F.interpolate(box, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return box.round().clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0)
