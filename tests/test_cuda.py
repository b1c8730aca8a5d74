"""What only a CUDA device can show (``pytest -m cuda``; skipped elsewhere, so CI stays green): the captured
CUDA-graph step trains as the plain step does, follows the learning-rate schedule and falls back to the
plain step for a short last batch; the fixed-width GRU on cuDNN gives the packed final states; and trunk
features and embeddings on the GPU equal the CPU's. Speed is not asserted here (``benchmarks/gpu_check.py``
measures it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from models.devices import inference_batch_size
from models.inference import embed_pairs
from models.recurrent import fixed_width_final_states
from models.training.static_step import WARMUP_STEPS
from pipeline.steps.features import trunk_feature_batches
from tests.test_static_step import FROZEN, frozen_trainer, relative, run_steps

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def exact_fp32():
    """fp32 matrix products without TF32 rounding, so CPU and GPU (and graph and no graph) compare."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


GRAPHS = replace(FROZEN, amp="off", cuda_graphs=True)
PLAIN = replace(FROZEN, amp="off")


@pytest.mark.parametrize("case", ["ang_np_sym", "ours_in_batch", "ours_extra_rows", "trip_np_sym", "pvse_ours"])
def test_the_captured_step_trains_as_the_plain_step(case, tmp_path):
    steps = WARMUP_STEPS + 6  # eager warm-up, the capture, replays (and a short batch for ang_np_sym)
    plain = frozen_trainer(case, tmp_path / "plain", False, PLAIN, device="cuda")
    graphed = frozen_trainer(case, tmp_path / "graphed", False, GRAPHS, device="cuda")
    assert graphed.static_step is not None and graphed.static_step.capture
    expected, actual = run_steps(plain, steps), run_steps(graphed, steps)
    assert graphed.static_step.graph is not None, "the step was never captured"
    for step, (want, got) in enumerate(zip(expected, actual, strict=True)):
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-4, atol=1e-6, msg=f"step {step + 1}")
    for (name, p), q in zip(plain.model.named_parameters(), graphed.model.parameters(), strict=True):
        assert relative(q.detach(), p.detach()) < 1e-4, name


def test_the_schedule_reaches_the_captured_optimiser(tmp_path):
    """ReduceLROnPlateau fills the learning-rate tensor the graph reads: at lr 0 a replay moves nothing."""
    trainer = frozen_trainer("ours_in_batch", tmp_path, False, GRAPHS, device="cuda")
    run_steps(trainer, WARMUP_STEPS + 2)
    assert trainer.static_step.graph is not None
    lr = trainer.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.is_cuda
    scheduler = trainer.setup.scheduler
    scheduler.factor, scheduler.min_lrs = 0.0, [0.0]  # the plateau decay, made to go to 0 at once
    scheduler._reduce_lr(0)
    assert trainer.optimizer.param_groups[0]["lr"] is lr and float(lr) == 0.0  # filled in place
    before = [p.detach().clone() for p in trainer.model.parameters()]
    run_steps(trainer, 1)
    for old, p in zip(before, trainer.model.parameters(), strict=True):
        assert torch.equal(old, p.detach())


def test_a_graphed_fit_matches_the_plain_fit(tmp_path):
    """Three epochs of 4 full batches and a short one (which takes the plain step), validation between."""
    settings = replace(GRAPHS, epochs=3)
    plain = frozen_trainer("ang_np_sym", tmp_path / "plain", False, replace(settings, cuda_graphs=False), "cuda")
    graphed = frozen_trainer("ang_np_sym", tmp_path / "graphed", False, settings, "cuda")
    expected, actual = plain.fit(), graphed.fit()
    assert graphed.static_step.graph is not None and graphed.static_step.steps == 12
    for want, got in zip(expected.history, actual.history, strict=True):
        for key in ("val_loss", "train_loss", "lr"):
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def test_bf16_graphs_train(tmp_path):
    trainer = frozen_trainer("ours_in_batch", tmp_path, False, replace(GRAPHS, amp="bf16"), device="cuda")
    values = run_steps(trainer, WARMUP_STEPS + 4)
    assert trainer.static_step.graph is not None
    assert all(bool(torch.isfinite(v).all()) for v in values)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_fixed_width_final_states_on_cudnn(bidirectional):
    torch.manual_seed(0)
    gru = nn.GRU(16, 32, batch_first=True, bidirectional=bidirectional).cuda()
    lengths = torch.tensor([7, 1, 12, 12, 3, 9, 5, 2])
    words = torch.randn(len(lengths), 12, 16, device="cuda")
    packed = gru(pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False))[1]
    fixed = fixed_width_final_states(gru, words, lengths.cuda())
    # cuDNN runs the packed and the padded GRU with different kernels (another summation order): on an H200 at
    # c508bed they differed by up to 3.3e-6 absolute (1.2e-4 relative on a state near 0.03), fp32 rounding over 12
    # steps; the CPU test (tests/test_static_step.py) keeps the tight tolerance
    torch.testing.assert_close(fixed, packed, rtol=1e-4, atol=1e-5)


def test_trunk_features_on_the_gpu_equal_the_cpus():
    images = np.random.default_rng(0).integers(0, 255, (40, 32, 32, 3), dtype=np.uint8)

    def features(device: str) -> np.ndarray:
        batches, _ = trunk_feature_batches(images, "resnet18", False, 32, False, 0, device=device)
        return np.concatenate(list(batches))

    on_cpu, on_gpu = features("cpu"), features("cuda")
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-3, atol=1e-4)


def test_embeddings_on_the_gpu_equal_the_cpus(tmp_path):
    trainer = frozen_trainer("ours_in_batch", tmp_path, False, PLAIN, device="cpu")
    model, positions = trainer.model.eval(), np.arange(20)
    on_cpu = embed_pairs(model, torch.device("cpu"), trainer.data, positions, 1)
    on_gpu = embed_pairs(model.cuda(), torch.device("cuda"), trainer.data, positions, 1)
    for modality in on_cpu:
        np.testing.assert_allclose(on_gpu[modality], on_cpu[modality], rtol=1e-4, atol=1e-5)


def test_the_gpu_batch_size_is_large():
    assert inference_batch_size(torch.device("cuda"), 128, image_size=224) >= 256
