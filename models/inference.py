"""The one forward path of a model over pair data, for everything that is not a training step: validation,
COCOS, Evaluate, ``crossmodal index/search/serve`` and ``crossmodal evaluate``.

Given a model, a device and a source of host batches (:class:`models.training.data.PairData`, which gives
cached trunk features or pixels, and tokens), it runs the model in eval mode without gradients, in batches
moved to the device by the project's loader (on CUDA prepared ahead by threads into pinned memory), under
autocast when asked, and returns float32 outputs. Embeddings are L2-normalised by the models' encoders
(``models.encoders``); :func:`embed_pairs` checks it, so every caller gets the same unit vectors for the
same pairs whichever of them asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from models.acceleration import autocast
from models.devices import inference_batch_size
from models.loader import BatchLoader, HostBatch, LoaderSettings

MODALITIES = ("image", "text")
#: how far from 1 an embedding's norm may be (float32 rounding of a normalised vector)
_UNIT_NORM_TOLERANCE = 1e-3


class PairSource(Protocol):
    """Host batches of pairs by position (``PairData`` is one)."""

    def image_batch(self, positions: np.ndarray, size: int) -> Tensor: ...

    def text_batch(self, positions: np.ndarray, width: int | None = None) -> tuple[Tensor, Tensor]: ...


def chunks(positions: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """``positions`` in consecutive batches of ``batch_size`` (the last may be shorter)."""
    positions = np.asarray(positions)
    return [positions[start : start + batch_size] for start in range(0, len(positions), batch_size)]


def default_loader(device: torch.device) -> BatchLoader:
    """On CUDA, 4 threads prepare batches ahead into pinned memory; on CPU one at a time, as always."""
    return BatchLoader(device, LoaderSettings.for_device(device, None, 4, True))


def _progress(items: Sequence, progress: bool | None, desc: str) -> Iterable:
    # None shows the bar only on a terminal (tqdm's rule); False never
    return tqdm(items, desc=desc, unit="batch", leave=False, disable=True if progress is False else None)


@torch.no_grad()
def forward_batches(
    model: nn.Module,
    device: torch.device,
    source: PairSource,
    batches: Sequence[np.ndarray],
    image_size: int,
    *,
    amp_dtype: torch.dtype | None = None,
    loader: BatchLoader | None = None,
    progress: bool | None = False,
    desc: str = "embedding",
) -> Iterator[tuple[np.ndarray, dict[str, Tensor]]]:
    """Each batch of positions with the model's full outputs on it (``image``, ``text`` and whatever else the
    model returns, e.g. PVSE's residuals), float32 on ``device``; eval mode, no gradient, no augmentation."""
    model.eval()
    loader = loader or default_loader(device)
    batches = _progress(batches, progress, desc)
    for rows, loaded in loader(batches, lambda rows: source_batch(source, rows, image_size)):
        with autocast(amp_dtype, device):
            outputs = model(loaded.images, loaded.tokens, loaded.lengths)
        yield rows, {key: value.float() for key, value in outputs.items()}


def source_batch(source: PairSource, rows: np.ndarray, image_size: int) -> HostBatch:
    return HostBatch(source.image_batch(rows, image_size), *source.text_batch(rows))


@torch.no_grad()
def embed_pairs(
    model: nn.Module,
    device: torch.device,
    source: PairSource,
    positions: np.ndarray,
    image_size: int,
    *,
    batch_size: int | None = None,
    modalities: Sequence[str] = MODALITIES,
    progress: bool | None = False,
) -> dict[str, np.ndarray]:
    """Embeddings of ``positions`` per modality, in order: float32 ``[n, D]`` (``[n, K, D]`` for PVSE),
    L2-normalised. ``modalities`` picks which to encode (a gallery may hold images only, or texts only).
    ``batch_size`` None: 256 on the CPU (as always), larger on a GPU (:func:`models.devices.inference_batch_size`)."""
    unknown = set(modalities) - set(MODALITIES)
    if unknown:
        raise ValueError(f"unknown modalities {sorted(unknown)}; choose from {MODALITIES}")
    model.eval()
    loader = default_loader(device)
    if batch_size is None:
        batch_size = inference_batch_size(device, 256, image_size=image_size)
    batches = chunks(positions, batch_size)
    out: dict[str, list[np.ndarray]] = {modality: [] for modality in modalities}
    if "image" in modalities:
        for _, images in loader(_progress(batches, progress, "images"), lambda r: _images(source, r, image_size)):
            out["image"].append(model.encode_image(images.images).float().cpu().numpy())
    if "text" in modalities:
        for _, texts in loader(_progress(batches, progress, "texts"), lambda r: _texts(source, r)):
            out["text"].append(model.encode_text(texts.tokens, texts.lengths).float().cpu().numpy())
    return {modality: _unit_rows(modality, parts) for modality, parts in out.items()}


def _images(source: PairSource, rows: np.ndarray, image_size: int) -> HostBatch:
    return HostBatch(source.image_batch(rows, image_size), None, None)


def _texts(source: PairSource, rows: np.ndarray) -> HostBatch:
    return HostBatch(None, *source.text_batch(rows))


def _unit_rows(modality: str, parts: list[np.ndarray]) -> np.ndarray:
    if not parts:
        return np.zeros((0, 0), dtype=np.float32)
    embeddings = np.concatenate(parts)
    norms = np.linalg.norm(embeddings, axis=-1)
    if norms.size and np.abs(norms - 1.0).max() > _UNIT_NORM_TOLERANCE:
        raise ValueError(
            f"the model's {modality} embeddings are not L2-normalised (norms {norms.min():.4f} to "
            f"{norms.max():.4f}); every encoder must end with F.normalize"
        )
    return embeddings
