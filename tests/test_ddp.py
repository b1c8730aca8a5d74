"""Data-parallel training is the single-process step on the concatenated batch, on CPU with gloo.

Two real processes (``torch.multiprocessing`` spawn, a ``gloo`` group on 127.0.0.1): one DDP step's loss and
every parameter gradient equal a single-process step on the global batch the ranks share, for the angular,
within-modality, triplet and PVSE losses (with in-batch and extra-row neighbors, and an uneven last batch);
and a 2-process run killed mid-epoch resumes to the weights of an uninterrupted one. Tiny models on cached
"frozen trunk" features, so each spawn takes seconds.
"""

from __future__ import annotations

import os
import signal
import socket
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from models.distributed import Distributed, merge_shards, shard_batch
from models.training import LAST_CHECKPOINT, PairData, StepPlan, Trainer
from tests.frozen_training import FROZEN_SETTINGS, frozen_pairs, trainer_on_features

pytestmark = pytest.mark.slow

N_PAIRS, N_TRAIN = 52, 39
SETTINGS = replace(FROZEN_SETTINGS, epochs=3)  # batch_size 8 per process: global batches of 16
#: (variant, neighbor mode, which batch of the first epoch is compared)
CASES = {
    "angular_uneven_last_batch": ("ang_np_sym", "in_batch", -1),  # 39 = 16 + 16 + 7: ranks get 4 and 3 rows
    "ours_in_batch": ("ours", "in_batch", 0),
    "ours_extra_rows": ("ours", "extra_rows", 0),
    "triplet": ("trip_np_sym", "in_batch", 0),
    "pvse_ours": ("pvse_ours", "in_batch", 0),
}


def tiny_data(spatial: bool) -> PairData:
    return frozen_pairs(N_PAIRS, 6, 6, spatial)


def make_trainer(
    variant: str, mode: str, work_dir: Path, distributed: Distributed, epochs: int = 3
) -> Trainer:
    settings = replace(SETTINGS, neighbor_mode=mode, epochs=epochs)
    return trainer_on_features(variant, settings, work_dir, tiny_data, N_TRAIN, distributed=distributed)


def step_and_gradients(trainer: Trainer, plan: StepPlan) -> tuple[float, dict[str, torch.Tensor]]:
    """One real training step on ``plan``; its loss and the gradient of every parameter."""
    loaded = trainer.loader.to_device(trainer.host_batch(plan))
    loss = trainer.train_step(plan, loaded).total.item()
    return loss, {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def join_group(rank: int, world_size: int, port: int) -> Distributed:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    return Distributed(rank, world_size, rank)


def ddp_steps(rank: int, world_size: int, port: int, out: str) -> None:
    """Each case: this rank's step on its share of the compared global batch, with the global batch."""
    distributed = join_group(rank, world_size, port)
    results = {}
    for case, (variant, mode, which) in CASES.items():
        trainer = make_trainer(variant, mode, Path(out) / case, distributed)
        plan = list(trainer.epoch_plans())[which]
        loss, gradients = step_and_gradients(trainer, plan)
        results[case] = {"loss": loss, "gradients": gradients, "merged": plan.merged, "local": plan.local}
    results["finetuned_trunk"] = finetuned_step(Path(out), distributed)
    torch.save(results, Path(out) / f"rank{rank}.pt")
    # the uninterrupted run the kill-and-resume test compares with (one spawn fewer)
    fit(distributed, Path(out) / "straight", kill_at_step=None)
    dist.destroy_process_group()


def finetuned_step(work_dir: Path, distributed: Distributed) -> dict[str, torch.Tensor]:
    """A step of a fine-tuned ResNet-18 with flips: per-rank BatchNorm statistics make it differ from one
    process, but it must run (the trunk's ImageNet head gets no gradient) and leave the ranks in step."""
    from tests.test_training import SETTINGS as PIXEL_SETTINGS
    from tests.test_training import tiny_trainer

    trainer = tiny_trainer(
        work_dir / "finetuned", replace(PIXEL_SETTINGS, batch_size=4), device=torch.device("cpu"), distributed=distributed
    )
    first, second = list(trainer.epoch_plans())[:2]
    step_and_gradients(trainer, first)
    return step_and_gradients(trainer, second)[1]  # DDP would fail here on a parameter without gradient


def spawn(function, *args) -> None:
    mp.spawn(function, args=(2, free_port(), *args), nprocs=2, join=True)


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    """Every rank's results of :func:`ddp_steps`, and the folder holding its uninterrupted run."""
    out = tmp_path_factory.mktemp("ddp")
    spawn(ddp_steps, str(out))
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)], out


@pytest.mark.parametrize("case", CASES)
def test_a_ddp_step_equals_one_process_on_the_concatenated_batch(case, ddp_results, tmp_path):
    variant, mode, _ = CASES[case]
    rank0, rank1 = ddp_results[0][0][case], ddp_results[0][1][case]
    merged = rank0["merged"]
    # the ranks trained disjoint shares that together are the global batch
    assert len(rank0["local"].rows) + len(rank1["local"].rows) == len(merged.rows)
    assert sorted(np.concatenate([rank0["local"].rows, rank1["local"].rows])) == sorted(merged.rows)
    single = make_trainer(variant, mode, tmp_path, Distributed())
    width = int(single.data.lengths[merged.rows].max())
    loss, gradients = step_and_gradients(single, StepPlan(merged, [merged], merged, None, 0, width))
    assert gradients.keys() == rank0["gradients"].keys() and len(gradients) > 3
    for rank in (rank0, rank1):
        assert rank["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-6)
        for name, expected in gradients.items():
            torch.testing.assert_close(rank["gradients"][name], expected, rtol=1e-5, atol=1e-6, msg=name)


def test_a_ddp_step_of_a_fine_tuned_trunk_runs_and_keeps_the_ranks_in_step(ddp_results):
    rank0, rank1 = (ranks["finetuned_trunk"] for ranks in ddp_results[0])
    assert any(name.startswith("image_encoder.trunk.net.layer1") for name in rank0)
    assert not any(name.startswith("image_encoder.trunk.net.fc") for name in rank0), "the head never trains"
    assert rank0.keys() == rank1.keys()
    for name, gradient in rank0.items():
        assert torch.equal(gradient, rank1[name]), name


def test_merged_shards_keep_each_anchor_with_its_neighbor():
    trainer = make_trainer("ours", "extra_rows", Path("unused"), Distributed())
    batch = next(iter(trainer.sampler.epoch()))
    shards = [shard_batch(batch, rank, 3) for rank in range(3)]
    merged, order = merge_shards(shards)
    gathered = np.concatenate([shard.rows for shard in shards])
    assert np.array_equal(merged.rows, gathered[order]) and merged.n_main == batch.n_main
    pairs = set(zip(batch.rows[batch.neighbor_of], batch.rows[batch.neighbor_rows], strict=True))
    assert set(zip(merged.rows[merged.neighbor_of], merged.rows[merged.neighbor_rows], strict=True)) == pairs
    assert all(row < merged.n_main for row in merged.neighbor_of)


def fit(distributed: Distributed, work_dir: Path, kill_at_step: int | None) -> None:
    """A 2-process run of Ours; with ``kill_at_step`` rank 0 SIGKILLs itself before that step."""
    trainer = make_trainer("ours", "in_batch", work_dir, distributed)
    if kill_at_step is not None and distributed.rank == 0:
        step, steps = trainer.train_step, [0]

        def killed_at(plan, loaded):
            steps[0] += 1
            if steps[0] == kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            return step(plan, loaded)

        trainer.train_step = killed_at
    trainer.fit()
    if distributed.rank == 0:
        torch.save(trainer.model.state_dict(), work_dir / "final.pt")


def ddp_fit(rank: int, world_size: int, port: int, work_dir: str, kill_at_step: int | None) -> None:
    fit(join_group(rank, world_size, port), Path(work_dir), kill_at_step)
    dist.destroy_process_group()


def test_a_killed_two_process_run_resumes_to_the_weights_of_an_uninterrupted_one(ddp_results, tmp_path):
    _, out = ddp_results
    per_epoch = -(-N_TRAIN // (2 * SETTINGS.batch_size))  # global batches of 2 x 8 pairs
    with pytest.raises(mp.ProcessExitedException, match="SIGKILL"):
        spawn(ddp_fit, str(tmp_path / "resumed"), per_epoch + 2)  # killed in epoch 2
    killed = torch.load(tmp_path / "resumed" / LAST_CHECKPOINT, weights_only=False)
    assert killed["epoch"] == 1 and not (tmp_path / "resumed" / "final.pt").exists()
    spawn(ddp_fit, str(tmp_path / "resumed"), None)
    straight = torch.load(out / "straight" / "final.pt")
    resumed = torch.load(tmp_path / "resumed" / "final.pt")
    assert straight.keys() == resumed.keys()
    unequal = [name for name in straight if not torch.equal(straight[name], resumed[name])]
    assert not unequal, f"resumed weights differ from the uninterrupted run: {unequal}"
    history = (tmp_path / "resumed" / "history.csv").read_text().splitlines()
    assert len(history) == 1 + SETTINGS.epochs


def test_train_with_two_processes_launches_torchrun_and_matches_one_process_on_the_same_global_batches(
    tmp_path,
):
    """The pipeline's own path: Train starts torchrun (2 gloo processes, 8 pairs each) and its output equals
    a single-process Train with batches of 16, which samples the very same global batches."""
    from pipeline import Train
    from tests.luigi_runs import build

    common = {"profile": "smoke", "run_root": str(tmp_path), "variant": "ours"}
    two = Train(**common, point={"train": {"batch_size": 8, "nproc_per_node": 2}})
    one = Train(**common)  # the smoke profile's batch of 16
    result, _ = build([two, one])
    assert result.status.name == "SUCCESS", result.summary_text
    assert two.signature() != one.signature()
    assert two.meta()["summary"]["processes"] == 2 and one.meta()["summary"]["processes"] == 1
    two_history, one_history = two.load("history"), one.load("history")
    assert len(two_history) == len(one_history) == 2
    for column in ("val_loss", "train_loss"):  # the csv reads back as text
        np.testing.assert_allclose(
            two_history[column].astype(float), one_history[column].astype(float), rtol=1e-4
        )
    two_weights = torch.load(two.output_path("checkpoint"), weights_only=False)["model"]
    one_weights = torch.load(one.output_path("checkpoint"), weights_only=False)["model"]
    for name, value in one_weights.items():
        torch.testing.assert_close(two_weights[name], value, rtol=1e-3, atol=1e-4, msg=name)
    assert not any(path.name.startswith("ddp_") for path in two.output_dir().iterdir())


def test_torchrun_command_single_node_standalone_and_multi_node_rendezvous(tmp_path):
    from pipeline import Train
    from pipeline.tasks.training import TORCHRUN_ENTRY_POINT
    from task_engine.torchrun import torchrun_command

    def command(**train) -> list[str]:
        task = Train(profile="smoke", run_root=str(tmp_path), point={"train": train})
        return torchrun_command(task.torchrun_job(tmp_path / "work"))

    single = command(nproc_per_node=4)
    assert single[single.index("--nproc-per-node") + 1] == "4" and "--standalone" in single
    assert single[single.index("-m", 3) + 1] == TORCHRUN_ENTRY_POINT
    assert single[single.index("--work-dir") + 1] == str((tmp_path / "work").resolve())
    multi = command(nproc_per_node=8, nnodes=2, rdzv_endpoint="node0:29400")
    assert "--standalone" not in multi
    rdzv_id = Train(profile="smoke", run_root=str(tmp_path), point={"train": {"nproc_per_node": 8, "nnodes": 2, "rdzv_endpoint": "node0:29400"}}).signature()
    for flag, value in (("--nnodes", "2"), ("--rdzv-backend", "c10d"), ("--rdzv-endpoint", "node0:29400"), ("--rdzv-id", rdzv_id)):
        assert multi[multi.index(flag) + 1] == value
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        command(nproc_per_node=8, nnodes=2)
    # the endpoint is where to meet, not what is trained: it does not change the Train's output
    a = Train(profile="smoke", run_root=str(tmp_path), point={"train": {"nnodes": 2, "rdzv_endpoint": "a:1"}})
    b = Train(profile="smoke", run_root=str(tmp_path), point={"train": {"nnodes": 2, "rdzv_endpoint": "b:2"}})
    assert a.signature() == b.signature()
