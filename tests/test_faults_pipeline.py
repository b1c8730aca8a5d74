"""Runs survive faults with nothing lost: a kill -9 mid-task, a half-written output, two runs on one run root
at once, a full disk.

Every check compares with an undisturbed run of the same command (``reference``): a fault may cost time,
never a result. A changed parameter writing a new output path and leaving the old result untouched is
covered by tests/test_pipeline.py::test_changing_a_loss_weight_reruns_only_that_variant.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import luigi
import numpy as np
import pandas as pd
import pytest
import torch

from pipeline import Evaluate, FullRun, Train
from pipeline.tasks.report import all_upstream
from task_engine.outputs import DiskFullError, lock_path, partial_path
from task_engine.task import META_FILE, HashedTask
from tests.disks import fill, tmpfs
from tests.luigi_runs import build

ROOT = Path(__file__).resolve().parents[1]
LUIGI = Path(sys.executable).with_name("luigi")
VARIANTS = ["ang_np_sym", "ours"]
#: the smoke profile trains 2 epochs of ~0.1 s; 8 leave a kill after the first checkpoint time to land
#: mid-training (the reference run uses the same setting, so the comparison is like for like)
EPOCHS = 8
OVERRIDES = {variant: {"train": {"epochs": EPOCHS}} for variant in VARIANTS}
RUN_TIMEOUT_S = 300
#: files whose bytes hold wall times, timestamps or the absolute run root: compared parsed, not byte for byte
#: (and every ``checkpoint_*.pt``: the trainer's resume checkpoints carry the history with its epoch times)
VOLATILE = {
    "_meta.json",
    # SearchIndex: the bundle's export time and source paths, the index's history times and image paths
    "bundle.json",
    "index.json",
    "items.parquet",
    "history.csv",
    "manifest.parquet",
    "dataset_report.json",
    "doc2vec.model",
    "report.md",
    "report.html",
    "report.json",
}


# ----------------------------------------------------------------------------------------------- runs
def full_run_command(run_root: Path, lock_dir: Path) -> list[str]:
    """The CLI run every test compares with; its own luigi pid-lock folder, so a rerun of the same command
    line is never refused as 'already running' by a stale or a concurrent test's lock."""
    return [
        str(LUIGI),
        "--module",
        "pipeline",
        "FullRun",
        "--profile",
        "smoke",
        "--variants",
        json.dumps(VARIANTS),
        "--seeds",
        "[0]",
        "--variant-overrides",
        json.dumps(OVERRIDES),
        "--protocol",
        "shared",
        "--run-root",
        str(run_root),
        "--lock-pid-dir",
        str(lock_dir),
    ]


def start_full_run(run_root: Path, lock_dir: Path, log: Path) -> subprocess.Popen:
    """The run in a process group of its own, so SIGKILL reaches Luigi's forked task workers too."""
    with open(log, "ab") as handle:
        return subprocess.Popen(
            full_run_command(run_root, lock_dir),
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish(process: subprocess.Popen, log: Path) -> None:
    try:
        status = process.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"the run took over {RUN_TIMEOUT_S} s:\n{tail(log)}")
    assert status == 0, f"exit status {status}:\n{tail(log)}"


def run_to_completion(run_root: Path, lock_dir: Path, log: Path) -> None:
    finish(start_full_run(run_root, lock_dir, log), log)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.01)


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def kill_when_partial(
    process: subprocess.Popen, run_root: Path, family: str, ready: Callable[[Path], bool], log: Path
) -> Path:
    """SIGKILL the run's process group the moment a ``.partial`` folder of ``family`` satisfies ``ready``;
    that folder. Polled every 2 ms: the quickest tasks (Evaluate, NeighborTables) build for ~50 ms."""
    folder = run_root / family
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the run ended (status {process.returncode}) before {family} started:\n{tail(log)}")
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            names = []
        for name in names:
            if name.endswith(".partial") and ready(folder / name):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return folder / name
        time.sleep(0.002)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    pytest.fail(f"no {family} partial output within {RUN_TIMEOUT_S} s:\n{tail(log)}")


# ------------------------------------------------------------------------------------------- outputs
def entries(run_root: Path) -> set[str]:
    """Everything at ``<Task>/<entry>`` level: complete folders, but also ``.partial`` folders, lock files
    and temp files, which an undisturbed run leaves none of."""
    return {f"{family.name}/{entry.name}" for family in run_root.iterdir() for entry in family.iterdir()}


def complete_outputs(run_root: Path) -> dict[str, Path]:
    """The folders a task takes as complete (they hold ``_meta.json``), by ``<Task>/<signature>``."""
    return {f"{p.parent.parent.name}/{p.parent.name}": p.parent for p in run_root.glob(f"*/*/{META_FILE}")}


def files_of(folder: Path) -> set[str]:
    """The files of an output, but a best model a resumed Train set aside (``model_best.pt.stale-<n>``: a kill
    that lands between an epoch's best and its last checkpoint leaves one, kept so nothing is lost; the run
    then ends with the same best, which the byte comparison checks)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and ".stale-" not in p.name}


def parses(path: Path) -> None:
    """Read ``path`` whole by its kind (a truncated file raises)."""
    readers: dict[str, Callable[[Path], Any]] = {
        ".json": lambda p: json.loads(p.read_text()),
        ".parquet": pd.read_parquet,
        ".csv": pd.read_csv,
        ".pt": lambda p: torch.load(p, map_location="cpu", weights_only=False),
    }
    reader = readers.get(path.suffix, lambda p: p.read_bytes())
    assert reader(path) is not None and path.stat().st_size > 0, path


def is_volatile(name: str) -> bool:
    return name in VOLATILE or (name.startswith("checkpoint_") and name.endswith(".pt"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_whole(folder: Path, reference_folder: Path) -> None:
    """A folder taken as complete holds exactly the reference's files: the reproducible ones byte for byte,
    the ones with timings or paths parsed whole, and a ``_meta.json`` naming its own signature."""
    names = files_of(folder)
    expected = files_of(reference_folder)
    assert names == expected, (
        f"{folder}: files differ from the undisturbed run: extra {sorted(names - expected)}, "
        f"missing {sorted(expected - names)}"
    )
    assert json.loads((folder / META_FILE).read_text())["signature"] == folder.name
    for name in names:
        if is_volatile(Path(name).name):
            parses(folder / name)
        else:
            assert digest(folder / name) == digest(reference_folder / name), f"{folder / name} differs"


def assert_every_complete_output_whole(run_root: Path, reference: Path) -> None:
    outputs = complete_outputs(run_root)
    reference_outputs = complete_outputs(reference)
    assert set(outputs) <= set(reference_outputs), "an output path the undisturbed run does not have"
    for key, folder in outputs.items():
        assert_whole(folder, reference_outputs[key])


def metrics_by_run(run_root: Path) -> dict[tuple[str, int], bytes]:
    """Evaluate's ``metrics.json`` bytes by (variant, seed)."""
    found = {}
    for path in run_root.glob("Evaluate/*/metrics.json"):
        payload = json.loads(path.read_text())
        found[(payload["variant"], payload["seed"])] = path.read_bytes()
    return found


def assert_same_as_reference(run_root: Path, reference: Path) -> None:
    """The finished run equals the undisturbed one: the same entries (no ``.partial`` folder, lock or temp
    file left), every output whole, the metrics byte for byte."""
    assert not list(run_root.glob("*/*.partial")), "a partial output stayed behind"
    assert entries(run_root) == entries(reference)
    assert_every_complete_output_whole(run_root, reference)
    assert not list(run_root.rglob("*.tmp")), "a temp file stayed behind"
    metrics = metrics_by_run(run_root)
    assert set(metrics) == {(variant, 0) for variant in VARIANTS}
    assert metrics == metrics_by_run(reference)


def graph(run_root: Path) -> list[HashedTask]:
    """The tasks of the reference command, built in this process (the same signatures as the CLI's)."""
    task = FullRun(
        profile="smoke",
        variants=VARIANTS,
        seeds=[0],
        variant_overrides=OVERRIDES,
        run_root=str(run_root),
        protocol="shared",
    )
    return all_upstream(task)


def task_of(run_root: Path, task_class: type[HashedTask], **params: Any) -> HashedTask:
    (found,) = [
        task
        for task in graph(run_root)
        if type(task) is task_class and all(task.param_kwargs[k] == v for k, v in params.items())
    ]
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An undisturbed run of the command the faults are injected into."""
    base = tmp_path_factory.mktemp("reference")
    run_to_completion(base / "runs", base / "lock", base / "run.log")
    root = base / "runs"
    assert set(complete_outputs(root)) == {f"{t.get_task_family()}/{t.signature()}" for t in graph(root)}, (
        "the in-process graph has the CLI's signatures"
    )
    return root


@pytest.fixture
def copied_run(reference: Path, tmp_path: Path) -> Path:
    """A finished run to damage, copied from the reference (its manifests' absolute image paths still lead
    to the reference's files, which the tasks here never rewrite)."""
    root = tmp_path / "runs"
    shutil.copytree(reference, root)
    return root


@pytest.mark.slow
def test_every_output_file_gets_the_ordinary_mode_so_other_hosts_can_read_it(reference):
    """Atomic writes rename a temp file into place; ``tempfile.mkstemp`` would make it 0600 and hide the
    outputs from the other users of a run root on shared storage (docs/scaling.md)."""
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    files = [path for path in reference.rglob("*") if path.is_file()]
    wrong = {str(p.relative_to(reference)): oct(p.stat().st_mode & 0o777) for p in files}
    wrong = {name: mode for name, mode in wrong.items() if mode != oct(expected)}
    assert len(files) > 50 and not wrong, wrong


# ------------------------------------------------------------------------------------ 1. kill -9
def has_checkpoint(partial: Path) -> bool:
    return (partial / "checkpoint_last.pt").exists()


KILL_POINTS: dict[str, Callable[[Path], bool]] = {
    "PrepareShard": lambda partial: True,
    "Deduplicate": lambda partial: True,
    "NeighborTables": lambda partial: True,
    # after the first epoch's checkpoint, so the kill lands in a later epoch and the rerun resumes
    "Train": has_checkpoint,
    "Evaluate": lambda partial: True,
}
#: tasks slow enough (0.8 s and over) that the kill must land inside them; Evaluate, Deduplicate and
#: NeighborTables build for ~50 ms, and a kill just after their rename is still a valid (if weaker) test of the rerun
MUST_HIT = {"PrepareShard", "Train"}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(KILL_POINTS))
def test_kill_9_mid_task_then_rerun_gives_the_undisturbed_outputs(
    family: str, reference: Path, tmp_path: Path
) -> None:
    """SIGKILL (no cleanup code runs) while a task builds its output: every folder taken as complete after
    the kill is whole (the killed task is left as ``.partial`` only), and the same command again finishes
    with exactly the undisturbed run's outputs and no ``.partial``, lock or temp file left (Train resuming
    from the checkpoint of the last epoch it finished)."""
    root, lock, log = tmp_path / "runs", tmp_path / "lock", tmp_path / "run.log"
    process = start_full_run(root, lock, log)
    partial = kill_when_partial(process, root, family, KILL_POINTS[family], log)
    final = partial.with_name(partial.name.removesuffix(".partial"))

    hit = partial.exists() and not (final / META_FILE).exists()
    if family in MUST_HIT:
        assert hit, f"the kill missed {family}: it finished before SIGKILL landed"
    elif not hit:
        warnings.warn(f"{family} finished within a poll interval; only the rerun is checked", stacklevel=1)
    # what the kill left: whole outputs and unfinished partial folders, nothing half-written taken as done
    assert_every_complete_output_whole(root, reference)
    resumed_from = None
    if family == "Train":
        resumed_from = torch.load(partial / "checkpoint_last.pt", weights_only=False)["epoch"]
        assert 1 <= resumed_from < EPOCHS, "killed mid-training, after a checkpoint and before the end"

    run_to_completion(root, lock, log)

    assert_same_as_reference(root, reference)
    if resumed_from is not None:
        summary = json.loads((final / META_FILE).read_text())["summary"]
        assert summary["resumed_from_epoch"] == resumed_from
        assert summary["epochs"] == EPOCHS


# ------------------------------------------------------------------------- 2. half-written output
@pytest.mark.slow
def test_a_half_written_output_is_never_taken_as_complete_and_is_rebuilt_whole(
    copied_run: Path, reference: Path
) -> None:
    """An output folder with files but no ``_meta.json`` (a crash of an older version, a copy cut short)
    beside a stale ``.partial`` folder: not complete, and the rerun replaces both with a whole output rather
    than merging into what is there."""
    task = task_of(copied_run, Evaluate, variant="ours", seed=0)
    out = task.output_dir()
    (out / META_FILE).unlink()
    metrics = out / "metrics.json"
    metrics.write_bytes(metrics.read_bytes()[:100])
    (out / "stray.npy").write_bytes(b"left over")
    partial = partial_path(out)
    partial.mkdir()
    (partial / "test_image.npy").write_bytes(b"half")

    assert not task.complete()
    result, ran = build([task])

    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert ran.families() == ["Evaluate"]
    assert task.complete()
    assert not partial.exists() and not lock_path(out).exists()
    assert_same_as_reference(copied_run, reference)


# ----------------------------------------------------------------------- 3. two runs at once
HOLD_LOCK = """
import shutil, sys, time
from pathlib import Path
from task_engine.outputs import output_lock
final, source = Path(sys.argv[1]), Path(sys.argv[2])
with output_lock(final):
    print("locked", flush=True)
    time.sleep(1.5)
    shutil.copytree(source, final)
"""


@pytest.mark.slow
def test_a_task_waits_for_another_process_building_its_output_then_takes_that_output(
    copied_run: Path, reference: Path
) -> None:
    """Deterministic half of the two-runs case: while another process holds an output's lock, running the
    task blocks; once that process has put the output in place, the task takes it as it is (its
    ``_meta.json`` is the other process's, byte for byte) instead of building it again."""
    task = task_of(copied_run, Evaluate, variant="ours", seed=0)
    out = task.output_dir()
    shutil.rmtree(out)
    source = reference / out.relative_to(copied_run)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out), str(source)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        task.run()
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert waited > 1.0, "the task did not wait for the lock holder"
    assert (out / META_FILE).read_bytes() == (source / META_FILE).read_bytes(), "built again"
    assert not lock_path(out).exists()
    assert_same_as_reference(copied_run, reference)


@pytest.mark.slow
def test_two_full_runs_at_once_on_one_run_root_both_finish_with_the_undisturbed_outputs(
    reference: Path, tmp_path: Path
) -> None:
    """Two local-scheduler runs (each with its own luigi pid lock, so neither is refused as a duplicate)
    started together on one run root schedule every task twice. Both must finish; every output is built
    once, whole, and equals the undisturbed run's. Before task_engine.outputs.output_lock both built each output in
    the same ``.partial`` folder: one run cleared it while the other was writing into it and crashed
    (``OSError: Directory not empty``, exit 30), or renamed a folder with files missing into place.

    A third start of the very same command line, with the same luigi pid lock, is refused cleanly
    ("already running", exit 10: [retcode] of the package's Luigi defaults) before it touches the run root."""
    root = tmp_path / "runs"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    processes = [start_full_run(root, tmp_path / f"lock-{i}", log) for i, log in enumerate(logs)]
    wait_for(lambda: any((tmp_path / "lock-0").glob("*.pid")), "the first run's luigi pid file")
    duplicate = subprocess.run(
        full_run_command(root, tmp_path / "lock-0"), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    for process, log in zip(processes, logs, strict=True):
        finish(process, log)

    assert duplicate.returncode == 10, duplicate.stdout + duplicate.stderr
    assert_same_as_reference(root, reference)
    waits = sum(log.read_text().count("another process (pid") for log in logs)
    assert waits >= 1, "the two runs never built the same output at the same time: nothing was tested"


# ------------------------------------------------------------------------------------ 4. disk full
def no_space(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_rename_of_partial(real: Callable[..., None]) -> Callable[..., None]:
    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(src).endswith(".partial"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))
        real(src, dst, *args, **kwargs)

    return replace


def fail_meta_write(real: Callable[..., int]) -> Callable[..., int]:
    def write_text(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(f".{META_FILE}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    return write_text


#: where the disk fills up while Evaluate builds its output, and the path the error must name
DISK_FULL = {
    # a task_engine.outputs save helper (numpy writes through an open handle: the OSError names no file)
    "save_array": (
        lambda mp: mp.setattr(np, "save", no_space),
        lambda partial, final: partial / "test_image.npy",
    ),
    # a write of the task's own, outside the helpers: only the folder being built is known
    "direct_write": (
        lambda mp: mp.setattr(np, "savez_compressed", no_space),
        lambda partial, final: partial,
    ),
    "meta_json": (
        lambda mp: mp.setattr(Path, "write_text", fail_meta_write(Path.write_text)),
        lambda partial, final: partial / META_FILE,
    ),
    "final_rename": (
        lambda mp: mp.setattr(os, "replace", fail_rename_of_partial(os.replace)),
        lambda partial, final: final,
    ),
}


@pytest.mark.slow  # the reference run: a FullRun from the command line
@pytest.mark.parametrize("where", list(DISK_FULL))
def test_disk_full_names_the_path_and_leaves_no_partial_output(
    where: str, copied_run: Path, reference: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while a (non-resumable) task writes: a clear error naming what could not be written; no
    final folder, no ``.partial`` folder (removed, which also gives the space back), no lock or temp file
    beside it. Once there is space again the same task builds the undisturbed output."""
    task = task_of(copied_run, Evaluate, variant="ours", seed=0)
    out = task.output_dir()
    shutil.rmtree(out)
    inject, named = DISK_FULL[where]
    with monkeypatch.context() as patch:
        inject(patch)
        with pytest.raises(DiskFullError) as caught:
            task.run()

    error = caught.value
    assert error.errno == errno.ENOSPC
    assert f"no space left on device while writing {named(partial_path(out), out)}: " in str(error)
    assert not out.exists() and not partial_path(out).exists()
    assert entries(copied_run) == entries(reference) - {f"Evaluate/{out.name}"}
    assert not list(copied_run.rglob("*.tmp"))

    result, ran = build([task])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert_same_as_reference(copied_run, reference)


@pytest.mark.slow
def test_disk_full_while_training_keeps_the_checkpoints_and_the_rerun_resumes(
    copied_run: Path, reference: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Train is resumable: on ENOSPC its ``.partial`` folder keeps the last whole checkpoint (no temp file
    of the failed write), nothing is renamed into place, and once there is space the rerun resumes from that
    checkpoint and ends with the undisturbed run's metrics."""
    train = task_of(copied_run, Train, variant="ours", seed=0)
    evaluate = task_of(copied_run, Evaluate, variant="ours", seed=0)
    shutil.rmtree(train.output_dir())
    shutil.rmtree(evaluate.output_dir())
    real_replace = os.replace
    last_written = []

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        """The disk fills up at the first checkpoint write after epoch 1's ``checkpoint_last.pt``."""
        if last_written and str(dst).endswith(".pt"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))
        real_replace(src, dst, *args, **kwargs)
        if Path(dst).name == "checkpoint_last.pt":
            last_written.append(dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", replace)
        with pytest.raises(DiskFullError, match=r"no space left on device while writing .*\.partial/"):
            train.run()

    partial = partial_path(train.output_dir())
    assert not train.output_dir().exists() and not lock_path(train.output_dir()).exists()
    assert torch.load(partial / "checkpoint_last.pt", weights_only=False)["epoch"] == 1
    assert not list(partial.rglob("*.tmp"))

    result, ran = build([evaluate])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert ran.families() == ["Evaluate", "Train"]
    assert train.meta()["summary"]["resumed_from_epoch"] == 1
    assert_same_as_reference(copied_run, reference)


# ------------------------------------------------------------------ a real full disk under every task (issue 32)

#: every task family of the reference command that writes an output
WRITING_FAMILIES = [
    "PrepareShard",
    "PrepareDataset",
    "Deduplicate",
    "Split",
    "TrainWordVectors",
    "TrainDoc2Vec",
    "NeighborTables",
    "TrunkFeatures",
    "Train",
    "Evaluate",
    "SearchIndex",
    "Report",
]


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 512 MiB tmpfs, room for the copied run; :func:`tests.disks.fill` fills it."""
    with tmpfs(tmp_path / "disk", "512m") as disk:
        yield disk


@pytest.mark.slow
@pytest.mark.parametrize("family", WRITING_FAMILIES)
def test_a_full_disk_under_any_task_is_one_error_line_and_the_rerun_equals_the_undisturbed_run(
    family: str, reference: Path, small_disk: Path
) -> None:
    """The run root on a real, full disk when ``family`` (and what depends on it) must be built again:
    FullRun exits 30 with one ``ERROR:`` line per failed task naming the path on that disk, and leaves no
    partial output a rerun would trust (Train keeps its checkpoints to resume from); with the space freed, the rerun ends with the undisturbed run's outputs and metrics."""
    root = small_disk / "runs"
    shutil.copytree(reference, root)
    tasks = graph(root)
    again = [t for t in tasks if t.get_task_family() == family]
    assert again, f"no {family} in the reference command"
    ids = {t.task_id for t in again}
    for task in tasks:
        if task.task_id in ids or ids & {up.task_id for up in all_upstream(task)}:
            shutil.rmtree(task.output_dir(), ignore_errors=True)
    filler = fill(small_disk)
    log = small_disk.parent / "full.log"
    done = subprocess.run(
        full_run_command(root, small_disk.parent / "lock"), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    log.write_text(output)
    assert done.returncode == 30, output[-3000:]
    # one line per task that hit the full disk (two workers: two tasks of the family may run at once)
    assert 1 <= len(errors) <= 2 and "Traceback" not in output, output[-3000:]
    for line in errors:
        assert f"{family} failed: no space left on device while writing {small_disk}" in line, line
    assert not [p for p in root.glob("*/*.partial") if p.parent.name != "Train"], "a partial output stayed"
    filler.unlink()
    run_to_completion(root, small_disk.parent / "lock", log)
    assert_same_as_reference(root, reference)
