"""The fixed-shape training step of ``models/training/static_step.py`` (what a CUDA graph captures), run eagerly
on the CPU: it trains as the plain step does, reads nothing back to the host, and leaves the plain path as it
was. The capture itself needs CUDA: ``tests/test_cuda.py``."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.overrides import TorchFunctionMode

from models.losses import build_loss
from models.losses.checks import value_checks
from models.recurrent import fixed_width_final_states, right_aligned
from models.settings import OPERATIONAL_FIELDS, TrainSettings
from models.training import PairData, Trainer
from models.training.checkpoint import load_optimizer_state
from models.training.setup import build_optimizer
from models.training.static_step import StaticStep, static_step_for
from tests.frozen_training import FROZEN_SETTINGS, frozen_pairs, trainer_on_features

N_PAIRS, N_TRAIN, WIDTH = 44, 36, 7
FROZEN = replace(FROZEN_SETTINGS, max_text_tokens=WIDTH)
#: variant, neighbor layout
VARIANTS = {
    "ang_np_sym": ("ang_np_sym", "in_batch"),
    "ours_in_batch": ("ours", "in_batch"),
    "ours_extra_rows": ("ours", "extra_rows"),
    "trip_np_sym": ("trip_np_sym", "in_batch"),
    "pvse_ours": ("pvse_ours", "in_batch"),
}


def frozen_data(spatial: bool) -> PairData:
    """Texts of 1 to 4 tokens, shorter than the width (the plain step pads less), and one empty text (the
    encoders read one padding token)."""
    data = frozen_pairs(N_PAIRS, WIDTH, 4, spatial)
    data.lengths[3] = 0
    return data


def frozen_trainer(
    case: str, work_dir: Path, static: bool, settings: TrainSettings = FROZEN, device: str = "cpu"
) -> Trainer:
    variant, mode = VARIANTS[case]
    return trainer_on_features(
        variant, replace(settings, neighbor_mode=mode), work_dir, frozen_data, N_TRAIN,
        device=torch.device(device), static_step=static,
    )


def run_steps(trainer: Trainer, count: int) -> list[torch.Tensor]:
    """``count`` steps on the trainer's own batches (epochs in a row), each step's loss values."""
    values = []
    while len(values) < count:
        for plan in trainer.epoch_plans():
            if len(values) == count:
                break
            loaded = trainer.loader.to_device(trainer.host_batch(plan))
            values.append(trainer.train_step(plan, loaded).values())
    return values


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ (0 for two zero tensors)."""
    return float((a - b).double().norm() / b.double().norm().clamp_min(1e-30))


def parameters(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("case", VARIANTS)
def test_the_static_step_trains_as_the_plain_step(case, tmp_path):
    plain = frozen_trainer(case, tmp_path / "plain", static=False)
    static = frozen_trainer(case, tmp_path / "static", static=True)
    assert plain.static_step is None and isinstance(static.static_step, StaticStep)
    expected, actual = run_steps(plain, 6), run_steps(static, 6)
    for step, (want, got) in enumerate(zip(expected, actual, strict=True)):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-6, msg=f"{case}: losses of step {step + 1}")
    assert static.static_step.steps >= 5  # the static step ran (a short last batch runs the plain one)
    want = parameters(plain)
    for name, value in parameters(static).items():
        torch.testing.assert_close(value, want[name], rtol=1e-4, atol=1e-6, msg=f"{case}: {name}")


def pixel_trainer(work_dir: Path, static: bool) -> Trainer:
    """Ours on 16 px pixels with a tiny ResNet-18 and random flips (the paper profile's kind of step)."""
    from tests.test_training import tiny_trainer

    return tiny_trainer(work_dir, device=torch.device("cpu"), static_step=static)


def test_flipped_pixels_and_batch_norm_train_alike(tmp_path):
    """Each step of an epoch from the same state (the plain run's, copied over): the same losses, gradients and
    updated weights. (Run apart, the two drift by float rounding that Adam amplifies on a random ResNet's
    near-zero gradients: losses 1e-8 apart after one step, 3e-3 after six.)"""
    plain, static = pixel_trainer(tmp_path / "plain", False), pixel_trainer(tmp_path / "static", True)
    close = {"rtol": 1e-5, "atol": 1e-6}
    for plan, static_plan in zip(list(plain.epoch_plans()), list(static.epoch_plans()), strict=True):
        assert np.array_equal(plan.merged.rows, static_plan.merged.rows)
        static.model.load_state_dict(plain.model.state_dict())
        static.optimizer.load_state_dict(copy.deepcopy(plain.optimizer.state_dict()))  # not shared
        want = plain.train_step(plan, plain.loader.to_device(plain.host_batch(plan))).values()
        got = static.train_step(static_plan, static.loader.to_device(static.host_batch(static_plan))).values()
        torch.testing.assert_close(got, want, **close)
        for (name, p), q in zip(plain.model.named_parameters(), static.model.parameters(), strict=True):
            # norm-wise: a random ResNet's gradients hold near-zero entries that rounding alone moves
            if p.grad is None:
                continue
            assert relative(q.grad, p.grad) < 1e-5, f"gradient of {name}"
            # Adam moves an entry by about ±lr whatever its gradient's size, so one whose gradient is 0 up
            # to rounding may move either way: the weights are compared where the gradient is not
            clear = p.grad.abs() > 1e-3 * p.grad.abs().max()
            torch.testing.assert_close(q.detach()[clear], p.detach()[clear], **close, msg=name)
    assert static.static_step.steps == 4  # the epoch's 4 batches
    # the same coins were drawn in the same order: both generators are where they are
    assert torch.equal(plain.setup.flip_generator.get_state(), static.setup.flip_generator.get_state())


def test_a_fit_with_short_last_batches_matches_the_plain_fit(tmp_path):
    """36 train pairs in batches of 8: every epoch ends with a batch of 4, which the plain step takes."""
    settings = replace(FROZEN, epochs=3)
    plain = frozen_trainer("ang_np_sym", tmp_path / "plain", False, settings)
    static = frozen_trainer("ang_np_sym", tmp_path / "static", True, settings)
    expected, actual = plain.fit(), static.fit()
    assert static.static_step.steps == 3 * 4  # per epoch: 4 full batches static, the 4 last pairs plain
    assert len(actual.history) == len(expected.history) == 3
    for want, got in zip(expected.history, actual.history, strict=True):
        for key in ("val_loss", "train_loss", "lr"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key


class HostReads(TorchFunctionMode):
    """Fails on what makes the host wait for a GPU: reading a value back, boolean-mask indexing, ops whose
    output shape depends on values, and packing (which reads the lengths on the host)."""

    FORBIDDEN = frozenset(
        "item tolist numpy cpu __bool__ __int__ __float__ __index__ nonzero unique masked_select "
        "_pack_padded_sequence".split()
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        boolean_index = name in ("__getitem__", "__setitem__") and any(
            isinstance(arg, torch.Tensor) and arg.dtype == torch.bool for arg in _flat(args[1:])
        )
        if name in self.FORBIDDEN or boolean_index:
            raise AssertionError(f"host read-back in the static step: {name}")
        return func(*args, **(kwargs or {}))


def _flat(items):
    for item in items:
        yield from (_flat(item) if isinstance(item, (tuple, list)) else [item])


@pytest.mark.parametrize("case", VARIANTS)
def test_the_static_step_reads_nothing_back(case, tmp_path):
    trainer = frozen_trainer(case, tmp_path, static=True)
    plan = next(iter(trainer.epoch_plans()))
    loaded = trainer.loader.to_device(trainer.host_batch(plan))
    trainer.train_step(plan, loaded)  # the first step: allocates the buffers, checks values (eagerly)
    with value_checks(False), HostReads():
        losses = trainer.static_step.losses_and_backward()
    assert torch.isfinite(losses.total)


def test_the_guard_catches_the_plain_steps_read_backs(tmp_path):
    """The guard is not vacuous: the plain step packs the texts (lengths read on the host)."""
    trainer = frozen_trainer("ours_in_batch", tmp_path, static=False)
    plan = next(iter(trainer.epoch_plans()))
    loaded = trainer.loader.to_device(trainer.host_batch(plan))
    with value_checks(False), HostReads(), pytest.raises(AssertionError, match="host read-back"):
        trainer.train_step(plan, loaded)


LENGTHS = [7, 1, 12, 12, 3, 9, 5, 2]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_fixed_width_final_states_equal_the_packed_ones(bidirectional):
    torch.manual_seed(0)
    gru = nn.GRU(6, 5, batch_first=True, bidirectional=bidirectional)
    lengths = torch.tensor(LENGTHS)
    words = torch.randn(len(lengths), 12, 6, requires_grad=True)
    weights = torch.linspace(-1, 1, (2 if bidirectional else 1) * len(lengths) * 5).view(-1, len(lengths), 5)

    def run(final_states):
        gru.zero_grad()
        words.grad = None
        states = final_states()
        (states * weights).sum().backward()
        return states.detach(), words.grad.clone(), {n: p.grad.clone() for n, p in gru.named_parameters()}

    packed = lambda: gru(pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False))[1]  # noqa: E731
    expected = run(packed)
    actual = run(lambda: fixed_width_final_states(gru, words, lengths))
    close = {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(actual[0], expected[0], **close)
    torch.testing.assert_close(actual[1], expected[1], **close)  # padding gets exactly no gradient
    for name in expected[2]:
        torch.testing.assert_close(actual[2][name], expected[2][name], **close, msg=name)


def test_right_aligned_moves_each_text_to_the_end():
    words = torch.arange(2 * 4).view(2, 4, 1).float()  # texts [0 1 2 3] and [4 5 6 7]
    moved = right_aligned(words, torch.tensor([2, 4])).squeeze(-1)
    assert moved.tolist() == [[0, 0, 0, 1], [4, 5, 6, 7]]


def test_settings_speed_only_and_one_process():
    assert {"cuda_graphs", "fused_adam"} <= OPERATIONAL_FIELDS
    assert TrainSettings().cuda_graphs is False  # until a GPU run has verified it
    with pytest.raises(ValueError, match="cuda_graphs"):
        TrainSettings(cuda_graphs=True, nproc_per_node=2)


def test_cpu_keeps_pytorchs_default_adam():
    model = nn.Linear(3, 2)
    fast = replace(TrainSettings(), cuda_graphs=True, fused_adam=True)
    for settings in (TrainSettings(), fast):
        optimizer = build_optimizer(model, settings, torch.device("cpu"))
        assert optimizer.defaults == torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-5).defaults


def test_a_cpu_run_takes_the_plain_step_unless_forced(tmp_path):
    trainer = frozen_trainer("ours_in_batch", tmp_path, static=False)
    graphs_on = replace(trainer.settings, cuda_graphs=True)
    assert static_step_for(trainer.setup, graphs_on, trainer.distributed) is None  # no CUDA here
    trainer.setup.losses.append(build_loss("struc", space="text", group_source="neighbors"))
    with pytest.raises(ValueError, match="struc"):
        static_step_for(trainer.setup, trainer.settings, trainer.distributed, force=True)


def test_a_checkpoint_keeps_the_resuming_runs_optimizer_options():
    """A CUDA-graph run saves ``capturable`` and a tensor learning rate; a plain run resuming from it keeps
    its own options and a float rate (its Adam could not step otherwise)."""
    model = nn.Linear(3, 2)
    saved_by = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    saved_by.step()
    state = saved_by.state_dict()
    state["param_groups"][0].update(capturable=True, lr=torch.tensor(5e-4))
    resumed = torch.optim.Adam(model.parameters(), lr=1e-3)
    load_optimizer_state(resumed, state)
    group = resumed.param_groups[0]
    assert group["capturable"] is False and group["lr"] == pytest.approx(5e-4) and isinstance(group["lr"], float)
    resumed.step()  # a plain Adam steps with it
