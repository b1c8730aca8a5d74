"""Network tasks in a process of their own (what a GPU host does under Luigi's forked workers), forced on CPU:
children forked from one server per run, which imports the project without starting CUDA, while the
scheduling process never starts it either; the same outputs as in the worker, the device recorded, GPU slots
spread over the host's GPUs, a child that ends with its worker, and a child's error raised again in the
worker as its own one line."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import socket
import time
from pathlib import Path

import luigi
import numpy as np
import pytest
import torch

import pipeline  # noqa: F401 - declares the code base every task's lineage reads
from task_engine import child, fork_server, gpus, spawn
from task_engine import task as task_module
from task_engine.outputs import DiskFullError, disk_full
from tests import cuda_trap
from tests.child_processes import (
    EndsWithoutAnAnswer,
    ReportsItsProcess,
    SleepsAfterSayingItsPid,
    WaitsForItsPeers,
)
from tests.luigi_runs import copied_root

ROOT = Path(__file__).resolve().parents[1]


def network_families() -> set[str]:
    """The task families that declare they run a network (``HashedTask.runs_network``), read off the code."""
    from task_engine.code_identity import task_families

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
    rebuilt = child.rebuilt_error(child.error_record(full))
    assert isinstance(rebuilt, DiskFullError) and str(rebuilt) == str(full)
    assert "in the task's own process" in str(rebuilt.__cause__)
    missing = child.rebuilt_error(child.error_record(FileNotFoundError(2, "No such file or directory", "/raw/a.csv")))
    assert isinstance(missing, FileNotFoundError) and "/raw/a.csv" in str(missing)

    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(a)

    odd = child.rebuilt_error(child.error_record(Odd("x", 1)))
    assert isinstance(odd, child.SpawnedTaskError) and "Odd" in str(odd)


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


def own_server(monkeypatch, tmp_path: Path, suffix: str = "") -> str:
    """This test's own server of network tasks (a key no other test shares), so that what it preloads and when
    it starts are this test's."""
    key = f"{fork_server.RUN_ID}-{tmp_path.name}{suffix}"
    monkeypatch.setattr(fork_server, "server_key", lambda: key)
    return key


def pretend_a_gpu_host(monkeypatch, tmp_path: Path) -> None:
    """One GPU as the scheduler counts them: network tasks take a slot (``CUDA_VISIBLE_DEVICES=0``) and, in a
    forked worker, a child process (the CPU build here then finds no device in the child)."""
    for module in (gpus, spawn, task_module):
        monkeypatch.setattr(module, "host_gpu_count", lambda: 1)
    monkeypatch.setattr(gpus, "slots_folder", lambda: tmp_path / "slots")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_gpu_host_s_network_tasks_are_children_of_one_server_and_the_scheduler_never_starts_cuda(tmp_path, monkeypatch):
    """Under two forked workers on a (pretended) GPU host, in the default ``auto`` mode: each network task runs
    in a process of its own, all three forked from the same server (not from the scheduling process), on the
    slot's GPU, with the worker's threads and folder; and no call that starts CUDA was made in the scheduling
    process or its workers (a trap records every one; it is armed: the last call is recorded)."""
    pretend_a_gpu_host(monkeypatch, tmp_path)
    own_server(monkeypatch, tmp_path)
    trap = tmp_path / "cuda_calls.txt"
    assert "is_available" in cuda_trap.install(str(trap), monkeypatch.setattr)
    tasks = [ReportsItsProcess(name=name, run_root=str(tmp_path / "runs")) for name in ("a", "b", "c")]
    assert luigi.build(tasks, local_scheduler=True, workers=2, log_level="WARNING")
    records = [task.load("process") for task in tasks]
    assert not trap.exists(), trap.read_text()
    servers = {record["parent"] for record in records}
    assert len(servers) == 1 and os.getpid() not in servers, "forked from one server, not from the scheduler"
    assert len({record["pid"] for record in records}) == 3 and os.getpid() not in {r["pid"] for r in records}
    assert {record["cuda_visible_devices"] for record in records} == {"0"}
    assert {record["threads"] for record in records} == {task_module.threads_per_worker()}
    assert {record["cwd"] for record in records} == {os.getcwd()}
    assert not any(record["cuda_initialized"] for record in records)
    assert {json.loads((t.output_dir() / "_meta.json").read_text())["device"] for t in tasks} == {"cpu"}
    torch.cuda.is_available()
    assert "is_available" in trap.read_text(), "the trap records a call in this process"


def test_the_server_imports_the_project_without_starting_cuda(tmp_path, monkeypatch):
    """The server imports torch and every task of the project (``pipeline``) under the trap and records no
    call that starts CUDA; the same trap in a server that imports a module asking CUDA at import records it."""
    trap = tmp_path / "server_cuda_calls.txt"
    environ = {**os.environ, "CUDA_TRAP_FILE": str(trap)}
    own_server(monkeypatch, tmp_path)
    fork_server.ensure_server(["tests.cuda_trap", "torch", "pipeline"], environ, str(ROOT))
    assert not trap.exists(), trap.read_text()
    (tmp_path / "asks_cuda.py").write_text("import torch\n\ntorch.cuda.is_available()\n")
    own_server(monkeypatch, tmp_path, "-control")
    fork_server.ensure_server(["tests.cuda_trap", "asks_cuda"], {**environ, "PYTHONPATH": str(tmp_path)}, str(ROOT))
    assert "is_available" in trap.read_text()


def test_a_server_with_cuda_started_forks_no_child(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "a process forked from it cannot use CUDA" in fork_server.cuda_refusal("models.x")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert fork_server.cuda_refusal("models.x") is None


def test_a_child_ends_when_its_worker_does(tmp_path, monkeypatch):
    """A worker killed mid-task closes its connection: the child forked for it ends at once rather than go on
    writing into the work folder the rerun starts from."""
    own_server(monkeypatch, tmp_path)
    pid_file = tmp_path / "pid"
    task = SleepsAfterSayingItsPid(pid_file=str(pid_file), run_root=str(tmp_path / "runs"))
    request = spawn.child_request(task, tmp_path / "work", 1, None)
    path = fork_server.ensure_server([request["module"]], request["environ"], request["cwd"])
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(str(path))
    connection.sendall(json.dumps(request).encode() + b"\n")
    assert wait_for(pid_file.exists, 120)
    pid = int(pid_file.read_text())
    assert alive(pid)
    connection.close()
    assert wait_for(lambda: not alive(pid), 20), "the child outlived its worker"


def test_a_child_that_ends_without_an_answer_fails_its_task_in_one_line(tmp_path, monkeypatch):
    own_server(monkeypatch, tmp_path)
    task = EndsWithoutAnAnswer(run_root=str(tmp_path / "runs"))
    with pytest.raises(child.SpawnedTaskError, match=r"EndsWithoutAnAnswer.*ended without an answer \(killed\? out of memory\?\)"):
        spawn.produce_in_own_process(task, tmp_path / "work", 1)


@pytest.fixture
def luigi_config_restored():
    """Luigi's configuration as it was, after a test that sets keys in it."""
    config = luigi.configuration.get_config()
    saved = {section: dict(config.items(section, raw=True)) for section in ("resources", "network_tasks") if config.has_section(section)}
    yield config
    for section in ("resources", "network_tasks"):
        if config.has_section(section):
            config.remove_section(section)
        for key, value in saved.get(section, {}).items():
            config.set(section, key, value)


def test_slots_per_gpu_make_the_scheduler_s_gpu_resource_unless_a_file_sets_it(monkeypatch, luigi_config_restored):
    """Two GPUs, three slots each: Luigi's scheduler gets ``[resources] gpu = 6`` (declared while the run is
    planned, before it builds its scheduler) and tasks take slots on both GPUs in turn; a ``[resources] gpu`` of
    the user's is kept as it is."""
    config = luigi_config_restored
    monkeypatch.setattr(gpus, "host_gpu_count", lambda: 2)
    if config.has_option("resources", "gpu"):
        config.remove_option("resources", "gpu")
    config.set("network_tasks", "slots_per_gpu", "3")
    assert gpus.declare_gpu_slots() == 6 and config.getint("resources", "gpu") == 6
    assert gpus.slot_order(["0", "1"], gpus.scheduler_gpu_slots())[:3] == [("0", 0), ("1", 0), ("0", 1)]
    config.set("resources", "gpu", "1")
    assert gpus.declare_gpu_slots() == 1 and config.getint("resources", "gpu") == 1


def test_a_run_whose_output_is_read_to_its_end_ends_with_its_server(tmp_path):
    """A FullRun started with its output captured (as benchmarks and tests start one): the server its network
    tasks forked from holds that output too, so it must end once the run's process has ended, though nothing
    has waited for that process yet (a zombie), or the caller would wait for ever."""
    import subprocess
    import sys

    script = (
        "import luigi, pipeline\n"
        "from tests.child_processes import ReportsItsProcess\n"
        f"luigi.build([ReportsItsProcess(name='z', run_root={str(tmp_path / 'runs')!r})], local_scheduler=True, "
        "workers=2, log_level='WARNING')\n"
    )
    config = tmp_path / "luigi.cfg"
    config.write_text("[network_tasks]\nprocess = spawn\n")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "LUIGI_CONFIG_PATH": str(config)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (next((tmp_path / "runs" / "ReportsItsProcess").glob("*/process.json"))).exists()


def test_several_network_tasks_share_one_gpu_under_docs_workers(tmp_path, monkeypatch, luigi_config_restored):
    """docs/gpu.md's one-GPU command with ``--workers 8`` and three slots per GPU: three network tasks run at
    once, each in a child of the same server, all on GPU 0 (each waits until the three have started, so the
    run only finishes when they ran together)."""
    pretend_a_gpu_host(monkeypatch, tmp_path)
    own_server(monkeypatch, tmp_path)
    config = luigi_config_restored
    if config.has_option("resources", "gpu"):
        config.remove_option("resources", "gpu")
    config.set("network_tasks", "slots_per_gpu", "3")
    assert gpus.declare_gpu_slots() == 3  # what planning a FullRun does on a GPU host
    started = tmp_path / "started"
    started.mkdir()
    tasks = [WaitsForItsPeers(name=name, folder=str(started), peers=3, run_root=str(tmp_path / "runs")) for name in "abc"]
    assert luigi.build(tasks, local_scheduler=True, workers=8, log_level="WARNING")
    assert {path.read_text() for path in started.iterdir()} == {"0"}
