"""The mixed-precision path of training, run on the CPU (CPU autocast), so a GPU run is not its first
execution: the same trainer code with ``setup.amp_dtype`` set as ``TrainSettings.amp`` sets it on CUDA —
bf16 autocast, and fp16 autocast with a gradient scaler — gives finite losses close to fp32's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.acceleration import gradient_scaler
from models.training import Trainer
from tests.test_training import SETTINGS, tiny_trainer


def trainer_with(tmp_path, dtype: torch.dtype | None) -> Trainer:
    # 32 px: at 16 px ResNet-18 ends on a 1x1 map, whose BatchNorm over a batch of 8 made bf16 steps
    # diverge now and then (the thread order of its sums decided when; the same at d4a4466)
    trainer = tiny_trainer(tmp_path, replace(SETTINGS, epochs=2, image_size=32), device=torch.device("cpu"))
    # what amp_dtype("bf16" / "fp16", cuda) gives a CUDA run; on CPU the settings always leave fp32
    trainer.setup.amp_dtype = dtype
    trainer.setup.scaler = gradient_scaler(dtype, trainer.device)
    trainer.checkpoints.state.scaler = trainer.setup.scaler
    return trainer


def first_steps(trainer: Trainer, count: int) -> list[dict[str, float]]:
    """The losses of the first ``count`` training steps (read back after each, for the test)."""
    out = []
    for plan, loaded in trainer.loader(list(trainer.epoch_plans())[:count], trainer.host_batch):
        losses = trainer.train_step(plan, loaded)
        out.append(dict(zip(losses.names(), losses.values().tolist(), strict=True)))
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_training_steps_match_fp32_within_tolerance(tmp_path, dtype):
    seen = set()
    mixed = trainer_with(tmp_path / "mixed", dtype)
    hook = mixed.model.image_encoder.project.register_forward_hook(lambda m, i, out: seen.add(out.dtype))
    fp32 = first_steps(trainer_with(tmp_path / "fp32", None), 3)
    low = first_steps(mixed, 3)
    hook.remove()
    assert seen == {dtype}, "the projection did not run under autocast"
    assert all(np.isfinite(value) for step in low for value in step.values())
    # same initial weights, same batch: the first step's losses (before any update) differ only by precision
    assert low[0] == pytest.approx(fp32[0], rel=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_whole_autocast_fit_validates_and_checkpoints_finite_values(tmp_path, dtype):
    result = trainer_with(tmp_path, dtype).fit()
    assert len(result.history) == 2 and result.best_epoch in (1, 2)
    assert all(np.isfinite(row["val_loss"]) and np.isfinite(row["train_loss"]) for row in result.history)
    saved = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)
    assert ("grad_scaler" in saved) == (dtype == torch.float16)
