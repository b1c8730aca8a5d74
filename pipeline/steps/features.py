"""Pooled features of the initial image backbone, for image-space neighbours (Ours (Img NNs))."""

from __future__ import annotations

import numpy as np
import torch

from models.encoders import ImageEncoder, resize_batch


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
