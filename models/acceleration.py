"""GPU speed settings in one place: mixed precision (autocast, and a gradient scaler for fp16), the NHWC
layout and cuDNN's algorithm search. Each is a no-op on CPU, so CPU runs compute exactly what they did."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from common.registry import Registry


@dataclass(frozen=True)
class AmpMode:
    """Mixed precision on CUDA (``TrainSettings.amp``): the autocast dtype on a GPU that supports bf16 and on one
    that does not (None: fp32)."""

    name: str
    with_bf16: torch.dtype | None
    without_bf16: torch.dtype | None

    def dtype(self, device: torch.device) -> torch.dtype | None:
        """The autocast dtype on ``device``; None: fp32 (always on CPU)."""
        if device.type != "cuda" or self.with_bf16 == self.without_bf16:
            return None if device.type != "cuda" else self.with_bf16
        return self.with_bf16 if torch.cuda.is_bf16_supported() else self.without_bf16


#: ``train.amp``: "auto" is bf16 where the GPU supports it, else fp16 with a gradient scaler; "off" fp32
AMP_MODES: Registry[AmpMode] = Registry("amp mode")
for _mode in (
    AmpMode("auto", torch.bfloat16, torch.float16),
    AmpMode("bf16", torch.bfloat16, torch.bfloat16),
    AmpMode("fp16", torch.float16, torch.float16),
    AmpMode("off", None, None),
):
    AMP_MODES.add(_mode.name, _mode)


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of amp mode ``mode`` on ``device``; None: fp32 (always on CPU)."""
    return AMP_MODES.get(mode).dtype(device)


def autocast(dtype: torch.dtype | None, device: torch.device) -> AbstractContextManager:
    """Autocast to ``dtype`` on ``device``, or nothing at all for fp32."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def gradient_scaler(dtype: torch.dtype | None, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none."""
    return torch.amp.GradScaler(device.type) if dtype == torch.float16 else None


def prepare_for_device(
    model: nn.Module, device: torch.device, channels_last: bool, cudnn_benchmark: bool
) -> nn.Module:
    """Move ``model`` to ``device``; on CUDA, NHWC weights and cuDNN's algorithm search when asked. The
    uint8 NHWC pixel batches become NHWC floats by a permute, so the trunk's input is already channels-last."""
    model = model.to(device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = cudnn_benchmark
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
    return model
