"""Network tasks in a process of their own (what a GPU host does under Luigi's forked workers), forced on CPU:
the same outputs as in the worker, the device recorded, GPU slots spread over the host's GPUs, and a child's
error raised again in the worker as its own one line."""

from __future__ import annotations

import errno
import json
import multiprocessing
import shutil

import luigi
import numpy as np
import pytest
import torch

from pipeline.engine import gpus, spawn
from pipeline.engine.outputs import DiskFullError, disk_full
from tests.luigi_runs import copied_root


def network_families() -> set[str]:
    """The task families that declare they run a network (``HashedTask.runs_network``), read off the code."""
    from pipeline.engine.code_identity import task_families

    return {name for name, cls in task_families().items() if cls.runs_network}


def test_slots_fill_every_gpu_before_a_second_task_shares_one():
    assert gpus.slot_order(["0", "1"], 2) == [("0", 0), ("1", 0)]
    assert gpus.slot_order(["0", "1"], 4) == [("0", 0), ("1", 0), ("0", 1), ("1", 1)]
    assert gpus.slot_order(["3"], 1) == [("3", 0)], "a CUDA_VISIBLE_DEVICES id is kept as given"


def test_a_held_slot_sends_the_next_task_to_another_gpu(tmp_path):
    with gpus.gpu_slot(["0", "1"], 2, folder=tmp_path) as first, gpus.gpu_slot(["0", "1"], 2, folder=tmp_path) as second:
        assert (first, second) == ("0", "1")
    with gpus.gpu_slot(["0", "1"], 2, folder=tmp_path) as again:
        assert again == "0", "a released slot is free again"


def test_a_slot_held_by_another_process_is_not_taken(tmp_path):
    ready, release = multiprocessing.Event(), multiprocessing.Event()

    def hold() -> None:
        with gpus.gpu_slot(["0", "1"], 2, folder=tmp_path):
            ready.set()
            release.wait(30)

    holder = multiprocessing.get_context("fork").Process(target=hold)
    holder.start()
    try:
        assert ready.wait(30)
        with gpus.gpu_slot(["0", "1"], 2, folder=tmp_path) as gpu:
            assert gpu == "1"
    finally:
        release.set()
        holder.join(30)


def test_where_a_network_task_produces(monkeypatch):
    monkeypatch.setattr(spawn, "host_gpu_count", lambda: 0)
    monkeypatch.setattr(spawn, "in_forked_worker", lambda: True)
    assert not spawn.runs_in_own_process("auto"), "a CPU host runs every task in its worker"
    monkeypatch.setattr(spawn, "host_gpu_count", lambda: 1)
    assert spawn.runs_in_own_process("auto"), "a GPU host's forked worker never starts CUDA itself"
    monkeypatch.setattr(spawn, "in_forked_worker", lambda: False)
    assert not spawn.runs_in_own_process("auto"), "one worker (no fork) may use CUDA in its own process"
    assert spawn.runs_in_own_process("spawn") and not spawn.runs_in_own_process("inline")


def test_a_child_s_error_is_raised_again_as_its_own_class_with_its_message():
    full = disk_full("/runs/Train/x/model_best.pt", OSError(errno.ENOSPC, "No space left on device"))
    rebuilt = spawn.rebuilt_error(spawn.error_record(full))
    assert isinstance(rebuilt, DiskFullError) and str(rebuilt) == str(full)
    assert "in the task's own process" in str(rebuilt.__cause__)
    missing = spawn.rebuilt_error(spawn.error_record(FileNotFoundError(2, "No such file or directory", "/raw/a.csv")))
    assert isinstance(missing, FileNotFoundError) and "/raw/a.csv" in str(missing)

    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(a)

    odd = spawn.rebuilt_error(spawn.error_record(Odd("x", 1)))
    assert isinstance(odd, spawn.SpawnedTaskError) and "Odd" in str(odd)


@pytest.mark.slow
def test_spawned_network_tasks_write_what_the_worker_wrote(smoke_run, tmp_path, spawn_mode):
    """In a copied smoke root, Ang+NP+Sym's shared runs (Train, Evaluate, Cocos), the trunk features and the
    search index are removed and built again with every network task in its own process, under two forked
    workers as on a GPU host: the same files (metrics, features, embeddings, COCOS), and each ``_meta.json``
    says the device."""
    from pipeline import Cocos

    task, _, _, original = smoke_run
    root = copied_root(smoke_run, tmp_path)
    report = task.clone(run_root=str(root)).report()
    tasks = [e for e in report.evaluations() if e.variant == "ang_np_sym"]
    tasks += [c for c in report.per_run(Cocos) if c.variant == "ang_np_sym"]
    tasks.append(report.search_index())
    rebuilt = {t.output_dir() for t in tasks} | {t.requires()["train"].output_dir() for t in tasks[:2]}
    rebuilt |= {t.requires()["features"].output_dir() for t in tasks[:1]}
    for folder in rebuilt:
        shutil.rmtree(folder)
    assert luigi.build(tasks, local_scheduler=True, workers=2, log_level="WARNING")
    assert {folder.parent.name for folder in rebuilt} == network_families()
    for folder in rebuilt:
        meta = json.loads((folder / "_meta.json").read_text())
        assert meta["device"] == "cpu", folder
        assert not list(folder.glob("_spawned*")), "the child's answer came through a pipe"
        before = original / folder.parent.name / folder.name
        for output in meta["outputs"].values():
            made, kept = folder / output, before / output
            if output.endswith(".npy"):
                assert np.array_equal(np.load(made), np.load(kept)), made
            elif output.endswith(".json") and made.is_file():
                assert json.loads(made.read_text()) == json.loads(kept.read_text()), made
            elif output == "model_best.pt":
                a, b = (torch.load(path, weights_only=True)["model"] for path in (made, kept))
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the same trained weights"


@pytest.mark.slow
def test_a_spawned_task_that_fails_fails_its_worker_with_the_child_s_line(smoke_run, tmp_path, spawn_mode):
    from pipeline import TrunkFeatures

    task, _, _, _ = smoke_run
    root = copied_root(smoke_run, tmp_path)
    bad = task.clone(TrunkFeatures, run_root=str(root), backbone="resnet5", image_size=32)
    events: list[BaseException] = []
    TrunkFeatures.event_handler(luigi.Event.FAILURE)(lambda _task, error: events.append(error))
    try:
        assert not luigi.build([bad], local_scheduler=True, workers=1, log_level="CRITICAL")
    finally:
        luigi.Task._event_callbacks[TrunkFeatures][luigi.Event.FAILURE].clear()
    assert len(events) == 1 and "unknown backbone 'resnet5'" in str(events[0])
    assert not bad.output_dir().exists()


def test_a_data_parallel_train_holds_a_slot_on_each_of_its_gpus(tmp_path):
    with gpus.gpu_slots(["0", "1", "2", "3"], 4, count=2, folder=tmp_path) as ddp:
        assert ddp == ["0", "1"]
        with gpus.gpu_slot(["0", "1", "2", "3"], 4, folder=tmp_path) as alone:
            assert alone == "2", "the next task goes to a GPU the data-parallel run does not use"
    with pytest.raises(ValueError, match="3 GPUs asked for, this host shows 2"):
        with gpus.gpu_slots(["0", "1"], 2, count=3, folder=tmp_path):
            pass
