"""Faults the trainer must survive with nothing lost: a NaN loss, non-finite weights, unusable checkpoints on
resume, and a checkpoint write that dies half way — on the tiny synthetic data of ``tests.test_training``."""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import common.files
from models.losses import build_loss
from models.training import (
    BEST_CHECKPOINT,
    LAST_CHECKPOINT,
    PREV_CHECKPOINT,
    Trainer,
    TrainResult,
)
from tests.test_training import SETTINGS, ours_losses, tiny_trainer

CHECKPOINTS = (LAST_CHECKPOINT, PREV_CHECKPOINT, BEST_CHECKPOINT)


def _trainer(work_dir: Path, epochs: int, losses=None, **settings) -> Trainer:
    return tiny_trainer(work_dir, replace(SETTINGS, epochs=epochs, **settings), losses)


def _files(work_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of each checkpoint present."""
    return {
        name: ((work_dir / name).read_bytes(), (work_dir / name).stat().st_mtime_ns)
        for name in CHECKPOINTS
        if (work_dir / name).exists()
    }


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def _assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    unequal = [name for name in expected if not torch.equal(actual[name], expected[name])]
    assert not unequal, f"tensors differ from the uninterrupted run: {unequal}"


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[TrainResult, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """An uninterrupted 3-epoch run: its result, final weights and best weights."""
    work_dir = tmp_path_factory.mktemp("straight")
    trainer = _trainer(work_dir, 3)
    result = trainer.fit()
    return result, trainer.model.state_dict(), _weights(work_dir / BEST_CHECKPOINT)


@pytest.mark.parametrize("log_every_steps", [1, 50])
def test_nan_loss_names_epoch_and_batch_and_leaves_the_last_good_state_and_checkpoints(tmp_path, log_every_steps):
    """The step loop reads its losses back only every ``log_every_steps`` steps (no host sync per step): a
    NaN loss is found at that read, the model is put back to the last checkpointed state (whatever steps
    the interval took after the NaN are undone) and the error names the first bad batch."""
    losses = ours_losses()
    trainer = _trainer(tmp_path, 3, losses, log_every_steps=log_every_steps)
    per_epoch = trainer.sampler.batches_per_epoch
    fail_at = 2 * per_epoch + 2  # epoch 3, batch 2
    calls = 0
    forward = losses[1].forward

    def nan_at_one_call(**inputs):
        nonlocal calls
        calls += 1
        parts = forward(**inputs)
        if calls != fail_at:
            return parts
        return {name: value * float("nan") for name, value in parts.items()}

    losses[1].forward = nan_at_one_call
    snapshots = []
    checkpoint = trainer.checkpoints.save_last

    def checkpoint_and_snapshot(epoch, result):
        checkpoint(epoch, result)
        snapshots.append(_files(tmp_path))

    trainer.checkpoints.save_last = checkpoint_and_snapshot

    with pytest.raises(FloatingPointError) as raised:
        trainer.fit()

    message = str(raised.value)
    assert f"at epoch 3, batch 2/{per_epoch}" in message
    assert "within_modality.within_text_loss" in message and "nan" in message
    assert f"last good checkpoint (epoch 2) is kept in {tmp_path}" in message
    assert len(snapshots) == 2 and set(snapshots[-1]) == set(CHECKPOINTS)
    assert _files(tmp_path) == snapshots[-1], "a checkpoint of an earlier epoch was rewritten"
    # the model holds the last good state, the epoch-2 checkpoint's, not a step of the NaN batch or after it
    _assert_same_weights(trainer.model.state_dict(), _weights(tmp_path / LAST_CHECKPOINT))
    assert calls == (fail_at if log_every_steps == 1 else 3 * per_epoch), "read back at the interval's end"


def test_non_finite_weights_after_an_epoch_are_never_checkpointed(tmp_path):
    trainer = _trainer(tmp_path, 2)
    trainer.fit()
    before = _files(tmp_path)
    trainer = _trainer(tmp_path, 3)
    step = trainer.optimizer.step
    calls = 0

    def step_to_inf(*args, **kwargs):  # the epoch's last step overflows though every loss was finite
        nonlocal calls
        step(*args, **kwargs)
        calls += 1
        if calls == trainer.sampler.batches_per_epoch:
            with torch.no_grad():
                next(trainer.model.parameters()).fill_(float("inf"))

    trainer.optimizer.step = step_to_inf
    with pytest.raises(
        FloatingPointError, match=r"non-finite weights .* after epoch 3; the last good checkpoint"
    ):
        trainer.fit()
    assert _files(tmp_path) == before


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(np.random.default_rng(1).bytes(path.stat().st_size))


def _nan_weight(path: Path) -> None:
    state = torch.load(path, weights_only=False)
    next(iter(state["model"].values())).view(-1)[0] = float("nan")
    torch.save(state, path)


BREAKS = {"truncated": _truncate, "garbage": _garbage, "nan_weight": _nan_weight}


@pytest.mark.parametrize("fault", BREAKS)
def test_unusable_last_checkpoint_is_set_aside_and_resume_falls_back_to_prev(tmp_path, fault, straight):
    straight_result, straight_weights, straight_best = straight
    _trainer(tmp_path, 2).fit()  # "killed" after epoch 2: prev holds epoch 1, last epoch 2
    BREAKS[fault](tmp_path / LAST_CHECKPOINT)
    broken = (tmp_path / LAST_CHECKPOINT).read_bytes()

    trainer = _trainer(tmp_path, 3)
    with pytest.warns(RuntimeWarning, match=rf"{LAST_CHECKPOINT} is unusable: .*corrupt-1"):
        result = trainer.fit()

    assert (tmp_path / f"{LAST_CHECKPOINT}.corrupt-1").read_bytes() == broken, "the bad file is kept aside"
    assert result.resumed_from_epoch == 1 and len(result.history) == 3
    _assert_same_weights(trainer.model.state_dict(), straight_weights)
    _assert_same_weights(_weights(tmp_path / BEST_CHECKPOINT), straight_best)
    assert result.best_epoch == straight_result.best_epoch


@pytest.mark.parametrize("fault", BREAKS)
def test_unusable_last_checkpoint_without_prev_restarts_from_scratch(tmp_path, fault, straight):
    straight_result, straight_weights, straight_best = straight
    _trainer(tmp_path, 1).fit()  # only a last checkpoint, and a best model of epoch 1
    BREAKS[fault](tmp_path / LAST_CHECKPOINT)
    assert not (tmp_path / PREV_CHECKPOINT).exists()

    trainer = _trainer(tmp_path, 3)
    with pytest.warns(RuntimeWarning) as warned:
        result = trainer.fit()

    messages = [str(w.message) for w in warned]
    assert any(f"{LAST_CHECKPOINT} is unusable" in m for m in messages)
    assert any(f"{BEST_CHECKPOINT} holds epoch 1, not the resumed best epoch -1" in m for m in messages)
    assert (tmp_path / f"{LAST_CHECKPOINT}.corrupt-1").exists()
    assert (tmp_path / f"{BEST_CHECKPOINT}.stale-1").exists(), "the old run's best model is kept aside"
    assert result.resumed_from_epoch == 0 and len(result.history) == 3
    _assert_same_weights(trainer.model.state_dict(), straight_weights)
    _assert_same_weights(_weights(tmp_path / BEST_CHECKPOINT), straight_best)
    assert result.best_epoch == straight_result.best_epoch


@pytest.mark.parametrize("failing", ["every_checkpoint_rename", "only_the_new_last_checkpoint"])
def test_kill_during_checkpoint_write_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch, failing):
    _trainer(tmp_path, 1).fit()
    before = (tmp_path / LAST_CHECKPOINT).read_bytes()
    targets = (
        {LAST_CHECKPOINT} if failing == "only_the_new_last_checkpoint" else {LAST_CHECKPOINT, PREV_CHECKPOINT}
    )
    real_replace = os.replace

    def dies_on_checkpoints(src, dst):
        if Path(dst).name in targets:
            raise OSError("simulated kill during the rename")
        real_replace(src, dst)

    monkeypatch.setattr(common.files.os, "replace", dies_on_checkpoints)
    with pytest.raises(OSError, match="simulated kill"):
        _trainer(tmp_path, 2).fit()
    monkeypatch.undo()

    assert (tmp_path / LAST_CHECKPOINT).read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp")), "a temp file of the failed write remains"
    if (tmp_path / PREV_CHECKPOINT).exists():
        assert (tmp_path / PREV_CHECKPOINT).read_bytes() == before
    assert _trainer(tmp_path, 2).checkpoints.resume(TrainResult()) == 1


def test_prev_checkpoint_is_copied_where_hard_links_fail(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError("no hard links on this filesystem")

    monkeypatch.setattr(os, "link", no_links)
    _trainer(tmp_path, 2).fit()
    prev = torch.load(tmp_path / PREV_CHECKPOINT, weights_only=False)
    assert prev["epoch"] == 1 and len(prev["history"]) == 1
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_kill_between_the_best_and_the_last_checkpoint_resumes_cleanly(tmp_path):
    """The epoch whose model_best.pt was written but whose checkpoint_last.pt was not is redone exactly:
    the file it rewrites is kept (nothing set aside) and the run ends as an uninterrupted one."""

    def trainer(work_dir: Path) -> Trainer:
        settings = replace(SETTINGS, epochs=4, learning_rate=3e-3)  # improves at epoch 4 (measured)
        return tiny_trainer(work_dir, settings, [build_loss("angular")])  # no neighbor loss: no neighbors used

    reference = trainer(tmp_path / "straight")
    straight = reference.fit()
    killed = straight.best_epoch  # a new best was written at that epoch
    assert killed >= 2, "the uninterrupted run must improve after epoch 1 for this case to exist"
    interrupted = trainer(tmp_path / "killed")
    checkpoint = interrupted.checkpoints.save_last

    def killed_after_the_best(epoch, result):
        if epoch == killed:
            raise KeyboardInterrupt("killed after model_best.pt, before checkpoint_last.pt")
        checkpoint(epoch, result)

    interrupted.checkpoints.save_last = killed_after_the_best
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    work = tmp_path / "killed"
    assert torch.load(work / LAST_CHECKPOINT, weights_only=False)["epoch"] == killed - 1
    assert torch.load(work / BEST_CHECKPOINT, weights_only=False)["epoch"] == killed
    resumed = trainer(work)
    assert resumed.fit().best_epoch == killed
    assert sorted(p.name for p in work.iterdir() if ".stale" in p.name or ".corrupt" in p.name) == []
    _assert_same_weights(resumed.model.state_dict(), reference.model.state_dict())
    _assert_same_weights(_weights(work / BEST_CHECKPOINT), _weights(tmp_path / "straight" / BEST_CHECKPOINT))


KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from tests.test_faults_training import _trainer

real_write_bytes = Path.write_bytes
writes = []


def dies_half_way(self, data):
    if self.name.startswith(".checkpoint_last.pt."):
        writes.append(self)
        if len(writes) == 2:  # epoch 2's checkpoint: half its bytes reach the disk, then SIGKILL
            with open(self, "wb") as handle:
                handle.write(data[: len(data) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
    return real_write_bytes(self, data)


Path.write_bytes = dies_half_way
_trainer(Path(sys.argv[1]), 3).fit()
"""


@pytest.mark.slow
def test_sigkill_half_way_through_a_checkpoint_write_then_resume_gives_the_uninterrupted_weights(
    tmp_path, straight
):
    """A real ``kill -9`` with half of epoch 2's checkpoint on disk: the published checkpoint is still epoch
    1's, whole; the resumed run redoes epoch 2 and ends with the uninterrupted run's weights."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)], cwd=root, capture_output=True, timeout=300
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    (half_written,) = tmp_path.glob(".checkpoint_last.pt.*.tmp")
    assert 0 < half_written.stat().st_size
    assert torch.load(tmp_path / LAST_CHECKPOINT, weights_only=False)["epoch"] == 1
    straight_result, straight_weights, straight_best = straight
    trainer = _trainer(tmp_path, 3)
    result = trainer.fit()
    assert result.resumed_from_epoch == 1
    _assert_same_weights(trainer.model.state_dict(), straight_weights)
    _assert_same_weights(_weights(tmp_path / BEST_CHECKPOINT), straight_best)


def test_a_run_killed_after_its_starting_weights_competed_restarts_without_setting_their_best_aside(tmp_path):
    """A warm start validates its parent's weights as epoch 0 and may write model_best.pt before any checkpoint: a
    kill then leaves that file alone, which the restart writes again (the same weights): not a stale trajectory."""
    class Killed(Exception):
        pass

    def killed_in_epoch(epoch):
        raise Killed(epoch)

    first = _trainer(tmp_path, 2)
    first.starting_weights_compete = True
    first._train_epoch = killed_in_epoch  # the kill comes during epoch 1, before its checkpoint
    with pytest.raises(Killed):
        first.fit()
    assert (tmp_path / BEST_CHECKPOINT).exists() and not (tmp_path / LAST_CHECKPOINT).exists()
    epoch0 = _weights(tmp_path / BEST_CHECKPOINT)
    again = _trainer(tmp_path, 2)
    again.starting_weights_compete = True
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = again.fit()
    assert not list(tmp_path.glob(f"{BEST_CHECKPOINT}.stale-*")) and result.history[0]["epoch"] == 0
    if result.best_epoch == 0:
        _assert_same_weights(_weights(tmp_path / BEST_CHECKPOINT), epoch0)
