"""Which device a network runs on, and how many items a no-gradient pass takes at once there.

Why a batch size per device: on the CPU a batch of 128-256 already keeps the cores busy, and those sizes are
what every CPU output was computed with (a batch's size changes how BLAS sums, so CPU outputs stay
byte-identical only if CPU batches stay as they were). On a GPU a small batch leaves it waiting on the host
between kernels; larger batches are faster until the activations of one batch approach the memory the
device has, which is what :func:`inference_batch_size` bounds.
"""

from __future__ import annotations

import torch

#: activation memory of one 224 px image in a no-gradient ResNet-50 forward pass in fp32, an estimate from
#: the layer sizes (not measured): the widest live tensors are layer1's 256 x 56 x 56 maps, 3.2 MB each, of
#: which about three are alive at once inside a bottleneck block, plus the stem's 64 x 112 x 112 maps and
#: the input; 16 MiB leaves room for cuDNN's workspace. Memory scales with the pixel count.
PIXEL_BYTES_224 = 16 * 2**20
#: one text (64 tokens x 200-dim words, a 512-wide GRU, two directions) needs well under 1 MiB
TEXT_BYTES = 2**20
#: the share of the device's memory one inference batch may take (the rest: weights, cuDNN, the caching
#: allocator's slack, and a training run sharing the device)
MEMORY_SHARE = 0.25
#: larger batches do not run faster once the GPU is saturated; they only hold more memory
MAX_CUDA_BATCH = 1024


def pick_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def item_bytes(image_size: int | None) -> int:
    """Estimated activation memory of one item: an image of ``image_size`` px, or a text (``None``)."""
    if image_size is None:
        return TEXT_BYTES
    return max(TEXT_BYTES, int(PIXEL_BYTES_224 * (image_size / 224) ** 2))


def inference_batch_size(
    device: torch.device | str,
    cpu_default: int,
    *,
    image_size: int | None = None,
    total_memory: int | None = None,
) -> int:
    """Items per batch of a no-gradient pass on ``device``: ``cpu_default`` on anything but CUDA (unchanged,
    so CPU outputs stay byte-identical); on CUDA the largest power of two whose estimated activations
    (:func:`item_bytes`) fit in :data:`MEMORY_SHARE` of the device's memory (``total_memory``, read from the
    device when not given), at most :data:`MAX_CUDA_BATCH` and at least ``cpu_default`` (which already ran
    there). E.g. 1024 at 224 px on an 80 GB GPU, 256 on a 16 GB one, 128 on an 8 GB one."""
    device = torch.device(device)
    if device.type != "cuda":
        return cpu_default
    if total_memory is None:
        total_memory = torch.cuda.get_device_properties(device).total_memory
    fitting = int(total_memory * MEMORY_SHARE) // item_bytes(image_size)
    power = 1 << (max(fitting, 1).bit_length() - 1)  # the largest power of two <= fitting
    return max(min(power, MAX_CUDA_BATCH), min(cpu_default, MAX_CUDA_BATCH))
