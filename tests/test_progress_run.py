"""The progress display of a real FullRun from the command line: live in a (pseudo-)terminal, plain lines into
a file, nothing with --quiet (``pipeline.run.progress``, ``pipeline.run.watch``)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.luigi_runs import copied_root

#: each test runs 14 tasks of a FullRun from the command line
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LUIGI = str(Path(sys.executable).with_name("luigi"))
#: a small shared-protocol run whose four trainings (two variants x two seeds) are new in the smoke run root
ARGS = [
    "--module", "pipeline", "FullRun", "--profile", "smoke", "--variants", '["ang_np_sym","ours"]',
    "--protocol", "shared", "--set", "variants.*.train.learning_rate=0.002", "--set", "train.epochs=12",
]


def test_in_a_terminal_the_stages_and_the_count_of_trainings_advance(smoke_run, tmp_path):
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` (a pseudo-terminal) is not installed")
    root = copied_root(smoke_run, tmp_path)
    command = " ".join(f"'{arg}'" for arg in [LUIGI, *ARGS, "--run-root", str(root)])
    # a pseudo-terminal of a real size (one under a pipe reports 0 x 0)
    done = subprocess.run(
        ["script", "-qec", f"stty cols 120 rows 40; {command}", "/dev/null"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stdout[-2000:]
    screen = done.stdout
    counts = set(re.findall(r"Train (\d)/4", screen))
    assert "4" in counts and len(counts) >= 2, f"the training count advanced: {sorted(counts)}"
    assert "data ✓" in screen and "representations ✓" in screen and "Report ✓" in screen
    assert re.search(r"(ang_np_sym|ours) seed \d, epoch \d+/12, val 5-way R@1 \.\d\d", screen), "a running training"
    assert "it/s" not in screen, "no worker draws a bar of its own"
    assert "finished: 14 tasks run" in screen
    assert screen.index("finished:") < screen.index("Report: "), "the report's path is printed after the display"


def test_into_a_file_each_finished_task_is_one_plain_line(smoke_run, tmp_path):
    root = copied_root(smoke_run, tmp_path)
    log = tmp_path / "run.log"
    with open(log, "w") as handle:
        done = subprocess.run([LUIGI, *ARGS, "--run-root", str(root)], cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=600)
    assert done.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert re.fullmatch(r"\[ +0m0\ds\] start: 14 tasks to run, \d+ already done", lines[0])
    finished = [line for line in lines if " done" in line and "] " in line and "start:" not in line]
    assert len(finished) == len(set(finished)) == 14, "one line per finished task, none repeated"
    assert [re.search(r"Train (\d)/4 done", line).group(1) for line in finished if "Train " in line] == ["1", "2", "3", "4"]
    assert any(re.search(r"Train \d/4 done: (ours|ang_np_sym) seed \d \(best epoch \d+ of 12, \d+ s\)", line) for line in finished)
    assert "finished: 14 tasks run" in text and text.index("finished:") < text.index("Report: ")


def test_quiet_draws_nothing(smoke_run, tmp_path):
    root = copied_root(smoke_run, tmp_path)
    done = subprocess.run([LUIGI, *ARGS, "--run-root", str(root), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0
    assert done.stderr.strip() == ""
    assert done.stdout.strip().startswith("Report: ")
