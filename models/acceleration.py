"""GPU speed settings in one place: mixed precision (autocast, and a gradient scaler for fp16), the NHWC
layout and cuDNN's algorithm search. Each is a no-op on CPU, so CPU runs compute exactly what they did."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``TrainSettings.amp`` on ``device``; None: fp32 (always on CPU)."""
    if device.type != "cuda" or mode == "off":
        return None
    if mode == "bf16" or (mode == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


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
