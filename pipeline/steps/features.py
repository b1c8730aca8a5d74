"""Pooled features of the initial image backbone, for image-space neighbours (Ours (Img NNs))."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from models.encoders import ImageEncoder


def resize_batch(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> uint8 [B, size, size, 3] (no-op when the cache already has that size)."""
    if images.shape[1] == size and images.shape[2] == size:
        return images
    as_float = images.permute(0, 3, 1, 2).float()
    resized = F.interpolate(as_float, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return resized.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


@torch.no_grad()
def backbone_features(
    images: np.ndarray,
    rows: np.ndarray,
    backbone: str,
    pretrained: bool,
    image_size: int,
    seed: int,
    batch_size: int = 128,
    device: str = "cpu",
) -> tuple[np.ndarray, bool]:
    """Average-pooled trunk features [len(rows), C] of ``images[rows]``; also whether ImageNet weights were
    loaded (otherwise the trunk is the seeded random init the encoder starts from).
    """
    torch.manual_seed(seed)
    encoder = ImageEncoder(backbone, pretrained, embed_dim=1).to(device).eval()
    out = np.zeros((len(rows), encoder.feature_dim), dtype=np.float32)
    for start in range(0, len(rows), batch_size):
        batch_rows = rows[start : start + batch_size]
        batch = resize_batch(torch.from_numpy(np.ascontiguousarray(images[batch_rows])), image_size)
        out[start : start + len(batch_rows)] = encoder.pooled_features(batch.to(device)).cpu().numpy()
    return out, encoder.pretrained_loaded
