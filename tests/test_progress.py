"""The progress display (pipeline/run/progress.py) against a faked run root: folders and files made step by step
as tasks would make them, polled without its thread and with a fake clock."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from common.run_folder import HISTORY_FILE, META_FILE
from pipeline.run.progress import ProgressDisplay, WatchedTask


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def train(root: Path, signature: str, label: str) -> WatchedTask:
    """A planned Train as FullRun would describe it."""
    return WatchedTask(
        "Train", root / "Train" / signature, label, 20, metric="val_nway_r1", metric_label="val 5-way R@1"
    )


def partial_of(task_dir: Path) -> Path:
    return task_dir.with_name(task_dir.name + ".partial")


def begin(task_dir: Path) -> Path:
    """The task's ``.partial`` folder, as ``atomic_directory`` makes it."""
    partial = partial_of(task_dir)
    partial.mkdir(parents=True, exist_ok=True)
    return partial


def write_history(task_dir: Path, rows: list[tuple[int, float]]) -> None:
    """``history.csv`` in the task's partial folder, renamed into place as ``write_history`` does."""
    partial = begin(task_dir)
    text = "epoch,val_loss,val_nway_r1\n" + "".join(f"{epoch},1.5,{r1}\n" for epoch, r1 in rows)
    (partial / "history.tmp").write_text(text)
    os.replace(partial / "history.tmp", partial / HISTORY_FILE)


def finish(
    task_dir: Path,
    *,
    wall: float = 3.0,
    summary: dict | None = None,
    params: dict | None = None,
    meta_text: str | None = None,
) -> None:
    """Write ``_meta.json`` last, then rename the partial folder into place."""
    partial = begin(task_dir)
    meta = {"wall_time_s": wall, "summary": summary or {}, "params": params or {}}
    (partial / META_FILE).write_text(meta_text if meta_text is not None else json.dumps(meta))
    os.replace(partial, task_dir)


def test_plain_mode_writes_one_line_per_finished_task_and_the_start_and_end(tmp_path):
    prepared = WatchedTask("PrepareDataset", tmp_path / "PrepareDataset" / ("p" * 12), "", pending=False)
    finish(prepared.output_dir)  # done by an earlier run
    split = WatchedTask("Split", tmp_path / "Split" / ("s" * 12), "")
    first, second = train(tmp_path, "a" * 12, "ours seed 1"), train(tmp_path, "b" * 12, "ours seed 2")
    clock, stream = Clock(), io.StringIO()
    tasks = [prepared, split, first, second]
    display = ProgressDisplay(tasks, run_root=tmp_path, stream=stream, mode="plain", clock=clock)
    display.start(background=False)
    assert stream.getvalue() == "[  0m00s] start: 3 tasks to run, 1 already done\n"

    clock.now += 5
    finish(split.output_dir, wall=2.4)
    assert display.poll() == ["[  0m05s] Split 1/1 done (2 s)"]
    write_history(first.output_dir, [(1, 0.31), (2, 0.42)])
    assert display.poll() == []  # running, not finished

    clock.now += 187
    finish(first.output_dir, wall=41, summary={"best_epoch": 7, "max_epochs": 20})
    assert display.poll() == ["[  3m12s] Train 1/2 done: ours seed 1 (best epoch 7 of 20, 41 s)"]
    assert display.poll() == []  # never twice

    clock.now += 60
    finish(second.output_dir, wall=75, summary={"best_epoch": 3})
    assert display.poll() == ["[  4m12s] Train 2/2 done: ours seed 2 (best epoch 3 of 20, 1m15s)"]
    display.stop(success=True)

    text = stream.getvalue()
    assert text.splitlines()[-1] == "[  4m12s] finished: 3 tasks run"
    assert text.count("Train 1/2") == 1 and text.count("Train 2/2") == 1 and text.count("Split") == 1
    assert "\r" not in text and "\x1b" not in text


def test_plain_mode_says_how_far_a_run_got_that_stopped_or_failed(tmp_path):
    tasks = [train(tmp_path, "a" * 12, "ours seed 1"), train(tmp_path, "b" * 12, "ours seed 2")]
    stream = io.StringIO()
    with pytest.raises(RuntimeError), ProgressDisplay(tasks, run_root=tmp_path, stream=stream, mode="plain"):
        finish(tasks[0].output_dir)
        raise RuntimeError("a task failed")
    lines = stream.getvalue().splitlines()
    assert "Train 1/2 done: ours seed 1" in lines[-2]
    assert lines[-1].endswith("stopped: 1 of 2 tasks done; not finished: Train ours seed 2"), "the task left undone is named"

    # a failed run reads "stopped" even with every watched output there
    failed = train(tmp_path, "c" * 12, "ours seed 3")
    display = ProgressDisplay([failed], run_root=tmp_path, stream=(stream := io.StringIO()), mode="plain")
    display.start(background=False)
    finish(failed.output_dir)
    display.stop(success=False)
    assert stream.getvalue().splitlines()[-1].endswith("stopped: 1 of 1 task done")


def test_a_training_the_plan_did_not_name_grows_the_count(tmp_path):
    planned = [train(tmp_path, "a" * 12, "ours seed 1"), train(tmp_path, "b" * 12, "ours seed 2")]
    begin(tmp_path / "Train" / ("0" * 12))  # a killed run's leftover: not this run's work
    (tmp_path / "Train").joinpath("c" * 12 + ".lock").touch()
    stream = io.StringIO()
    display = ProgressDisplay(planned, run_root=tmp_path, stream=stream, mode="plain")
    display.start(background=False)

    tuning = tmp_path / "Train" / ("c" * 12)
    write_history(tuning, [(1, 0.2)])  # a tuning step the tuned protocol decided while running
    assert display.poll() == []
    finish(planned[0].output_dir)
    assert display.poll()[0].endswith("Train 1/3 done: ours seed 1 (3 s)")
    finish(
        tuning, wall=30, summary={"best_epoch": 4, "max_epochs": 8}, params={"variant": "ours", "seed": "3"}
    )
    assert display.poll()[0].endswith("Train 2/3 done: ours seed 3 (tuning step, best epoch 4 of 8, 30 s)")
    finish(tmp_path / "Train" / ("d" * 12))  # appeared whole between two polls
    assert display.poll()[0].endswith(f"Train 3/4 done: {'d' * 12} (tuning step, 3 s)")


def test_a_partial_folder_left_by_a_killed_run_counts_once_it_changes(tmp_path):
    task = train(tmp_path, "a" * 12, "ours seed 1")
    write_history(task.output_dir, [(1, 0.3), (2, 0.35)])
    os.utime(partial_of(task.output_dir), ns=(0, 0))  # written long before this run
    display = ProgressDisplay([task], run_root=tmp_path, stream=Terminal(), mode="live")
    display.start(background=False)
    assert "epoch" not in "\n".join(display.poll())  # not resumed (yet)
    write_history(task.output_dir, [(1, 0.3), (2, 0.35), (3, 0.41)])
    assert "ours seed 1, epoch 3/20, val 5-way R@1 .41" in "\n".join(display.poll())
    display.stop()


def test_live_mode_shows_the_running_trainings_epoch_and_metric_then_an_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    tasks = [
        WatchedTask("Split", tmp_path / "Split" / ("s" * 12), "", pending=False),
        train(tmp_path, "a" * 12, "ours seed 1"),
        train(tmp_path, "b" * 12, "ours seed 2"),
        WatchedTask("Evaluate", tmp_path / "Evaluate" / ("e" * 12), "ours seed 1"),
    ]
    clock, stream = Clock(), Terminal()
    display = ProgressDisplay(tasks, run_root=tmp_path, stream=stream, clock=clock)  # "auto": a terminal
    assert display.mode == "live"
    display.start(background=False)

    write_history(tasks[1].output_dir, [(1, 0.4), (2, 0.5234)])
    text = "\n".join(display.poll())
    assert "ours seed 1, epoch 2/20, val 5-way R@1 .52" in text
    assert "Train 0/2" in text and "data ✓" in text and "Evaluate 0/1" in text and "estimating…" in text

    clock.now += 40
    finish(tasks[1].output_dir, wall=40)
    begin(tasks[2].output_dir)
    lines = display.poll()
    text = "\n".join(lines)
    assert "Train 1/2" in text and "ours seed 2, epoch 0/20" in text
    assert "40 s elapsed, ~40 s left" in text  # one training left, at 40 s each, one at a time
    assert all(len(line) <= 69 for line in lines)
    assert "ours seed 1" in stream.getvalue()

    display.stop(success=False)
    text = stream.getvalue()
    assert "stopped: 1 of 3 tasks done" in text
    assert text.endswith("\nnot finished: Train ours seed 2 (was running), Evaluate ours seed 1\n"), "whole, below the display"


def test_live_lines_are_cut_to_the_terminal(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    task = train(tmp_path, "a" * 12, "a label far too long for a terminal this narrow")
    display = ProgressDisplay([task], run_root=tmp_path, stream=Terminal(), mode="live")
    display.start(background=False)
    write_history(task.output_dir, [(1, 0.4)])
    lines = display.poll()
    assert len(lines) == 3 and all(len(line) <= 29 for line in lines)
    display.stop()


@pytest.mark.parametrize("mode", ["plain", "live"])
def test_half_written_or_corrupt_files_and_vanishing_folders_do_not_raise(tmp_path, mode):
    tasks = [train(tmp_path, "a" * 12, "ours seed 1"), train(tmp_path, "b" * 12, "ours seed 2")]
    stream = Terminal() if mode == "live" else io.StringIO()
    display = ProgressDisplay(tasks, run_root=tmp_path, stream=stream, mode=mode)
    display.start(background=False)

    partial = begin(tasks[0].output_dir)
    (partial / HISTORY_FILE).write_text("epoch,val_nway_r1\n1,0.4\n2")  # a row cut short
    lines = display.poll()
    if mode == "live":
        assert "epoch 1/20, val 5-way R@1 .40" in "\n".join(lines)
    (partial / HISTORY_FILE).write_bytes(b"\xff\xfe\x00garbage")
    display.poll()
    (partial / HISTORY_FILE).write_text("no,epoch,column\n1,2,3\n")
    display.poll()
    for child in partial.iterdir():
        child.unlink()
    partial.rmdir()  # vanished (a failed task cleaned up)
    display.poll()

    finish(tasks[1].output_dir, meta_text='{"wall_time_s": 4')  # cut short
    lines = display.poll()
    if mode == "plain":
        assert lines == [lines[0]] and lines[0].endswith("Train 1/2 done: ours seed 2")
    display.stop()


def test_off_mode_writes_nothing_and_stop_is_idempotent(tmp_path):
    stream = io.StringIO()
    task = train(tmp_path, "a" * 12, "ours seed 1")
    display = ProgressDisplay([task], run_root=tmp_path, stream=stream, mode="off")
    display.start()
    finish(task.output_dir)
    assert display.poll() == []
    display.stop()
    display.stop()
    assert stream.getvalue() == ""

    other = train(tmp_path, "b" * 12, "ours seed 2")
    plain = ProgressDisplay([other], run_root=tmp_path, stream=(stream := io.StringIO()), mode="plain")
    plain.start(background=False)
    finish(other.output_dir)
    plain.stop()
    plain.stop()
    assert stream.getvalue().count("finished: 1 task run") == 1 and stream.getvalue().count("1/1 done") == 1
    assert ProgressDisplay([], run_root=tmp_path, stream=io.StringIO()).mode == "plain"
    with pytest.raises(ValueError, match="mode"):
        ProgressDisplay([], run_root=tmp_path, mode="fancy")


def test_the_thread_polls_and_stops_promptly(tmp_path):
    task = train(tmp_path, "a" * 12, "ours seed 1")
    stream = io.StringIO()
    display = ProgressDisplay([task], run_root=tmp_path, stream=stream, mode="plain", interval=0.05)
    display.start()
    thread = next(t for t in threading.enumerate() if t.name == "progress-display")
    assert thread.daemon  # never keeps the process alive
    finish(task.output_dir)
    deadline = time.monotonic() + 5
    while "Train 1/1 done" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "Train 1/1 done" in stream.getvalue()

    slow = ProgressDisplay([task], run_root=tmp_path, stream=io.StringIO(), mode="plain", interval=60)
    slow.start()
    started = time.monotonic()
    display.stop()
    slow.stop()  # waits on an Event, not a sleep: no 60 s wait
    thread.join(timeout=2)
    assert time.monotonic() - started < 2 and not thread.is_alive()
    assert stream.getvalue().count("Train 1/1 done") == 1
