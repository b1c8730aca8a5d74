"""Inference batch sizes per device: the CPU keeps the sizes every CPU output was computed with, a GPU takes
large batches that fit its memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import models.inference as inference
from models.devices import MAX_CUDA_BATCH, inference_batch_size, item_bytes, pick_device
from pipeline.steps.features import trunk_feature_batches

GIB = 2**30


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "meta"])
def test_anything_but_cuda_keeps_the_callers_size(device):
    assert inference_batch_size(device, 128, image_size=224) == 128
    assert inference_batch_size(device, 256) == 256


@pytest.mark.parametrize(
    ("memory_gib", "image_size", "expected"),
    [
        (80, 224, 1024),  # H100: capped (1,280 would fit)
        (141, 224, 1024),  # H200
        (16, 224, 256),
        (8, 224, 128),  # never below what the CPU default already ran
        (80, 448, 256),  # 4x the pixels, a quarter of the batch
        (80, 64, 1024),
        (80, None, 1024),  # texts
    ],
)
def test_cuda_sizes_follow_memory_and_pixels(memory_gib, image_size, expected):
    size = inference_batch_size("cuda", 128, image_size=image_size, total_memory=memory_gib * GIB)
    assert size == expected
    assert size & (size - 1) == 0 and size <= MAX_CUDA_BATCH  # a power of two
    # the estimate the choice rests on fits the share of memory it is given
    assert size == 128 or size * item_bytes(image_size) <= memory_gib * GIB / 4


def test_a_tiny_gpu_still_gets_the_cpu_default():
    assert inference_batch_size("cuda", 128, image_size=224, total_memory=GIB) == 128


def test_pick_device_is_cpu_without_cuda():
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_trunk_features_on_the_cpu_keep_batches_of_128():
    images = np.random.default_rng(0).integers(0, 255, (300, 16, 16, 3), dtype=np.uint8)
    batches, _ = trunk_feature_batches(images, "resnet18", False, 16, False, 0)
    assert [len(batch) for batch in batches] == [128, 128, 44]


def test_embed_pairs_on_the_cpu_keeps_batches_of_256(monkeypatch):
    from tests.test_static_step import FROZEN, frozen_trainer

    sizes = []
    real_chunks = inference.chunks

    def recording(positions, batch_size):
        sizes.append(batch_size)
        return real_chunks(positions, batch_size)

    monkeypatch.setattr(inference, "chunks", recording)
    trainer = frozen_trainer("ang_np_sym", "unused", False, FROZEN)
    inference.embed_pairs(trainer.model, torch.device("cpu"), trainer.data, np.arange(10), 1)
    assert sizes == [256]
