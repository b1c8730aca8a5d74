"""Features of an image trunk over the image cache: the frozen-trunk training input and the space of the
image neighbors (Ours (Img NNs)).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from models.backbones import Trunk, seeded_trunk
from models.cached_views import CachedViews
from models.devices import inference_batch_size
from models.encoders import frozen_trunk_features, resize_batch
from models.loader import LoaderSettings, prefetched


def trunk_feature_batches(
    images: np.ndarray,
    backbone: str,
    pretrained: bool,
    image_size: int,
    spatial: bool,
    seed: int,
    batch_size: int | None = None,
    device: str | torch.device = "cpu",
    trained_stages: int = 0,
    views: CachedViews | None = None,
) -> tuple[Iterator[np.ndarray], Trunk]:
    """Trunk features of every row of the image cache ``images`` (uint8 ``[R, S, S, 3]``), resized to
    ``image_size``, as batches of ``batch_size`` rows in row order: pooled ``float32 [B, C]``, or with
    ``spatial`` the map ``float16 [B, C, h, w]`` (PVSE attends over its cells; half precision halves the
    cache, and the trained layers work in float32); with ``trained_stages`` k >= 1 the float32 map under the
    trunk's top k stages, and with augmented ``views`` (:mod:`models.cached_views`) that map for every view of
    each image, ``[B, V, C, h, w]`` (view 0 the image itself, seeded by ``seed``). Also returns the trunk (``pretrained_loaded``: whether ImageNet weights were loaded,
    otherwise the seeded random init, with a warning; ``weights_source``: their file). ``batch_size`` None: 128 on the CPU (the size every
    CPU cache was computed with), larger on a GPU (:func:`models.devices.inference_batch_size`).
    """
    if batch_size is None:
        batch_size = inference_batch_size(device, 128, image_size=image_size)
    # weights channels_last too (frozen_trunk_features feeds channels_last input)
    trunk = seeded_trunk(backbone, pretrained, seed).to(device, memory_format=torch.channels_last).eval()
    mean = torch.tensor(trunk.mean, device=device).view(1, 3, 1, 1)
    std = torch.tensor(trunk.std, device=device).view(1, 3, 1, 1)
    # on CUDA, threads slice and resize the next batches into pinned memory while the GPU runs this one
    loading = LoaderSettings.for_device(torch.device(device), None, 4, True)

    augmented = views is not None and views.augmented
    if augmented and not trained_stages:
        raise ValueError("augmented views are cached under trained top stages only (trained_stages >= 1)")
    if augmented:
        batch_size = max(1, batch_size // views.count)  # each image goes through the trunk once per view

    def host_batch(rows: np.ndarray) -> torch.Tensor:
        cached = torch.from_numpy(np.ascontiguousarray(images[rows]))
        batch = views.views_of(cached, rows, image_size, seed).flatten(0, 1) if augmented else resize_batch(cached, image_size)
        return batch.pin_memory() if loading.pin_memory else batch

    @torch.no_grad()
    def batches() -> Iterator[np.ndarray]:
        starts = range(0, len(images), batch_size)
        row_chunks = (np.arange(start, min(start + batch_size, len(images))) for start in starts)
        for _, batch in prefetched(row_chunks, host_batch, loading.num_workers, loading.prefetch_batches):
            pixels = batch.to(device, non_blocking=loading.pin_memory)
            features = frozen_trunk_features(trunk, pixels, mean, std, spatial, trained_stages).cpu().numpy()
            yield features.reshape(-1, views.count, *features.shape[1:]) if augmented else features

    return batches(), trunk
