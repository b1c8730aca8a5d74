"""The fault table's shared parts (issue 40): one row per probe, what every row asserts, and how a command
is run for it. ``tests/test_fault_table_api.py`` holds the API, server, index, audit and evaluate rows; a
pipeline's rows go in a module of their own and use the same :class:`Fault` and checks:

    ROWS = [Fault("a negative seed", "plan", "--set seed=-1", 2, "seed", before="exit 1, KeyError ...")]

    @pytest.mark.parametrize("fault", ROWS, ids=Fault.id)
    def test_plan_refuses(fault, tmp_path):
        done = run_command(main, ["plan", *fault.args.split()])
        assert_refused(done, fault)
        assert half_written(tmp_path) == []

What every row checks: the exit status (or HTTP status), one line (or one JSON message) saying what is
wrong, no traceback, and nothing half-written where a file was being written.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Fault:
    """One row: the probe, its class in the issue, what it sends, the status it must get and a phrase the
    one line (or the JSON ``error``) must hold; ``reason`` is the API's code; ``before`` what it did at
    d4a4466, for the issue's before/after table."""

    name: str
    fault_class: str
    args: Any
    status: int
    said: str
    reason: str | None = None
    before: str = ""

    def id(self) -> str:
        return self.name.replace(" ", "-")


@dataclass(frozen=True)
class Done:
    """A finished command: its exit status and what it printed."""

    status: int
    stdout: str
    stderr: str


def run_command(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Done:
    """``main(argv)`` in this process (argparse's exit counts as the status), its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    return Done(status, out.getvalue(), err.getvalue())


def assert_the_luigi_command_refuses(fault: Fault, root: Path) -> None:
    """``luigi --module pipeline FullRun --profile smoke <fault.args>`` (Luigi's own command, its own parsing of the
    flags) stops before any task: exit 2, one ``error:`` line holding the row's phrase, no traceback, nothing in
    ``root``."""
    import subprocess
    import sys

    command = [str(Path(sys.executable).with_name("luigi")), "--module", "pipeline", "FullRun", "--profile", "smoke"]
    done = subprocess.run([*command, "--run-root", str(root), *fault.args], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    ours = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(ours) == 1 and fault.said in ours[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Uncaught exception" not in done.stderr and not root.exists()


def assert_refused(done: Done, fault: Fault) -> None:
    """The command exited with the row's status and said one line holding the row's phrase."""
    lines = done.stderr.strip().splitlines()
    assert done.status == fault.status, (fault.name, done.status, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and fault.said in lines[0], (fault.name, done.stderr)


def assert_json_refusal(status: int, body: Any, fault: Fault) -> None:
    """An HTTP answer: the row's status, ``{"error": one line, "reason": code}`` and nothing else."""
    assert status == fault.status, (fault.name, status, body)
    assert isinstance(body, dict) and set(body) == {"error", "reason"}, (fault.name, body)
    assert body["reason"] == fault.reason, (fault.name, body)
    assert "\n" not in body["error"] and fault.said in body["error"], (fault.name, body)


def half_written(folder: Path) -> list[Path]:
    """What an interrupted write left under ``folder``: the temp files of ``common.files.atomic_path``
    (``.<name>.<random>.tmp``) and ``.partial`` folders of ``atomic_directory``."""
    folder = Path(folder)
    if not folder.exists():
        return []
    return sorted(
        path
        for path in folder.rglob("*")
        if (path.is_file() and path.name.startswith(".") and path.name.endswith(".tmp"))
        or (path.is_dir() and path.name.endswith(".partial"))
    )
