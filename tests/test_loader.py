"""The prefetching loader changes when batches are prepared, never what they hold or what training does."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from common.settings import significant
from models.acceleration import amp_dtype, gradient_scaler
from models.loader import LoaderSettings, prefetched
from models.settings import OPERATIONAL_FIELDS, TrainSettings
from tests.test_training import SETTINGS, _fit


def test_prefetched_keeps_the_order_reads_the_source_in_this_thread_and_never_past_its_end():
    reader_threads, read = set(), []

    def source():
        for item in range(10):
            reader_threads.add(threading.get_ident())
            read.append(item)
            yield item

    pairs = list(prefetched(source(), lambda item: item * item, workers=3, depth=4))
    assert pairs == [(item, item * item) for item in range(10)]
    assert reader_threads == {threading.get_ident()} and read == list(range(10))


def test_prefetched_stops_its_workers_when_the_consumer_fails():
    prepared = []

    def prepare(item):
        prepared.append(item)
        return item

    with pytest.raises(RuntimeError, match="consumer"):
        for item, _ in prefetched(iter(range(1000)), prepare, workers=2, depth=3):
            if item == 5:
                raise RuntimeError("consumer failed")
    assert len(prepared) <= 5 + 3 + 1, "only the batches queued ahead were prepared"
    assert not [t for t in threading.enumerate() if t.name.startswith("batch-loader")]


def test_loader_workers_train_to_bit_identical_weights_and_losses(tmp_path):
    """Flips on (a fine-tuned trunk), so the coins tossed per batch must come in the same order too."""
    assert SETTINGS.horizontal_flip and SETTINGS.trunk == "finetune"
    inline, inline_result = _fit(tmp_path / "inline", replace(SETTINGS, num_workers=0))
    threaded, threaded_result = _fit(
        tmp_path / "threaded", replace(SETTINGS, num_workers=2, prefetch_batches=3)
    )
    assert threaded.loader.settings.num_workers == 2
    for name, value in inline.model.state_dict().items():
        assert torch.equal(value, threaded.model.state_dict()[name]), name
    for row, other in zip(inline_result.history, threaded_result.history, strict=True):
        assert row["train_loss"] == other["train_loss"] and row["val_loss"] == other["val_loss"]


def test_cpu_defaults_prepare_inline_without_pinning():
    cpu = LoaderSettings.for_device(torch.device("cpu"), None, 4, True)
    assert cpu == LoaderSettings(num_workers=0, prefetch_batches=4, pin_memory=False)
    assert LoaderSettings.for_device(torch.device("cuda"), None, 4, True).num_workers == 4


def test_speed_settings_stay_out_of_the_hash_and_precision_stays_in():
    fast = replace(TrainSettings(), num_workers=8, prefetch_batches=16, pin_memory=False, channels_last=False)
    assert significant(fast) == significant(TrainSettings())
    assert significant(replace(TrainSettings(), amp="off")) != significant(TrainSettings())
    assert "amp" not in OPERATIONAL_FIELDS and "nproc_per_node" not in OPERATIONAL_FIELDS
    with pytest.raises(ValueError, match="amp"):
        TrainSettings(amp="fp8")
    assert TrainSettings(nproc_per_node=4, nnodes=2).world_size == 8


def test_mixed_precision_only_on_cuda_bf16_unless_told_otherwise():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert all(amp_dtype(mode, cpu) is None for mode in ("auto", "bf16", "fp16", "off"))
    assert amp_dtype("off", cuda) is None
    assert amp_dtype("bf16", cuda) == torch.bfloat16 and amp_dtype("fp16", cuda) == torch.float16
    assert gradient_scaler(None, cuda) is None and gradient_scaler(torch.bfloat16, cuda) is None
    assert isinstance(gradient_scaler(torch.float16, cpu), torch.amp.GradScaler)
