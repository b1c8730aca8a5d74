"""The ``crossmodal`` console script's entry function run in this process (torch loaded once for every call),
with its exit status and both streams: what the serving and model-record tests call."""

from __future__ import annotations

import contextlib
import io

from serving.cli import main


class Done:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def crossmodal(*args: str, check: bool = True) -> Done:
    """``crossmodal <args>``; with ``check``, a non-zero exit fails the test with its stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    done = Done(code, out.getvalue(), err.getvalue())
    if check:
        assert done.returncode == 0, done.stderr
    return done
