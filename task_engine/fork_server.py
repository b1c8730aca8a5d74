"""The server that network tasks' processes are forked from (``python -m task_engine.fork_server``).

Why a server: on a GPU host a network task must not start CUDA in Luigi's worker, a process forked from the
scheduling one (see :mod:`task_engine.spawn`). A new interpreter per task, what 1.0 started, paid the imports
of torch and of the project every time: about 14 s of a 15 s smoke ``Train`` on an H200, and the smoke profile
took 3.1x its in-process time on two CPU cores (issue 51). The server imports them once per run and forks one
child per task, which starts with every module loaded, in milliseconds.

Why its children may use CUDA: the server is a new interpreter (started by exec, never forked from the
scheduling process) that imports torch and the tasks' modules and never calls CUDA, nor runs a torch operation
(no thread pool to be copied mid-work), on one thread. A child forked from it starts CUDA as a fresh process
would. It refuses to fork, saying which import did it, once torch reports CUDA initialised in it.

One server per run: keyed by the scheduling process (:data:`task_engine.outputs.RUN_ID`, which Luigi's forked
workers inherit), started by the first worker that needs one (under a lock: once), in a session of its own so
that it outlives that worker, and ending within a second of the scheduling process. Its socket is in a folder
only this user may enter: whoever connects can run a task.

One task: the worker connects and sends one line of JSON (the task's module, class, parameters, work folder and
threads, the worker's working folder and environment, with ``CUDA_VISIBLE_DEVICES`` of its GPU slot); the
server imports the module (once) and forks; the child takes the environment and the working folder, sends its
pid, runs the task (:func:`task_engine.child.produced`) and sends its answer. A worker that dies (a killed run)
closes the connection and the child ends at once (a thread watches it); its own children, torchrun's, get
SIGTERM when it does.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from task_engine.child import SpawnedTaskError, error_record, produced
from task_engine.outputs import RUN_ID
from task_engine.processes import child_environment

#: how long a new server may take to import what it preloads before the task that started it gives up
START_TIMEOUT_S = 900.0
#: how often the server looks whether the scheduling process still lives
WATCH_INTERVAL_S = 1.0
#: how long a connected worker may take to send its request
REQUEST_TIMEOUT_S = 60.0
#: the longest request read (a task's parameters and the worker's environment)
MAX_REQUEST_BYTES = 16 << 20
#: a Unix socket's path must be shorter than 108 bytes
MAX_SOCKET_PATH = 100


class UnsafeServerFolder(RuntimeError):
    """The server's folder is not this user's alone: another user could run tasks through its socket."""


def server_folder() -> Path:
    """``$TMPDIR/task-engine-<uid>/`` (``/tmp`` when that path is too long for a socket), this user's alone."""
    name = f"task-engine-{os.getuid()}"
    folder = Path(tempfile.gettempdir()) / name
    if len(str(folder)) > MAX_SOCKET_PATH - 40:
        folder = Path("/tmp") / name
    folder.mkdir(mode=0o700, exist_ok=True)
    status = folder.stat()
    if status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise UnsafeServerFolder(f"{folder} must belong to this user alone (mode 700): another user could run tasks through it")
    return folder


def server_key() -> str:
    """Which server this process's network tasks use: the scheduling process's (one per run)."""
    return RUN_ID


def socket_path() -> Path:
    return server_folder() / f"children-{server_key()}.sock"


# ------------------------------------------------------------------------------------------------ the worker
def run_in_child(request: dict[str, Any], preload: list[str]) -> dict[str, Any]:
    """Run ``request`` in a child forked from this run's server (started now when none answers, importing
    ``preload`` first); the child's answer (``summary`` or ``error``)."""
    path = ensure_server(preload, request["environ"], request["cwd"])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(str(path))
        connection.sendall(json.dumps(request).encode() + b"\n")
        with connection.makefile("rb") as answers:
            hello = json.loads(answers.readline() or b"{}")
            if "error" in hello:  # the server refused to fork
                return hello
            answer = answers.readline()  # until the child answers or ends
    if not answer:
        raise SpawnedTaskError(
            f"its process (pid {hello.get('pid', '?')}, forked from {path}) ended without an answer (killed? out of memory?)"
        )
    return json.loads(answer)


def ensure_server(preload: list[str], environ: dict[str, str], cwd: str) -> Path:
    """The socket of this run's server, started now (once, under a lock) when none answers there."""
    path = socket_path()
    with _locked(path.with_suffix(".lock")):
        if not _answers(path):
            path.unlink(missing_ok=True)  # a server that was killed left it
            start_server(path, preload, environ, cwd)
    return path


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _answers(path: Path) -> bool:
    """Whether a server listens at ``path`` (it takes a connection that sends nothing for a probe)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(path))
        return True
    except OSError:
        return False


def start_server(path: Path, preload: list[str], environ: dict[str, str], cwd: str) -> None:
    """Start a server at ``path`` watching the scheduling process; return once it listens."""
    read_end, write_end = os.pipe()
    command = [sys.executable, "-m", "task_engine.fork_server", "--socket", str(path)]
    command += ["--watch-pid", RUN_ID, "--ready-fd", str(write_end), *(f"--preload={name}" for name in preload)]
    try:
        server = subprocess.Popen(
            command, cwd=cwd, env=child_environment(environ), pass_fds=(write_end,), stdin=subprocess.DEVNULL,
            start_new_session=True,  # not the worker's: it outlives the worker that started it
        )  # fmt: skip
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        said = ready.readline() if select.select([ready], [], [], START_TIMEOUT_S)[0] else b""
    if said.strip() != b"ready":
        if server.poll() is None:
            server.kill()
        raise SpawnedTaskError(
            f"the server of network tasks' processes ({' '.join(command[1:4])}) ended before it listened "
            f"(exit status {server.wait()}); its error is above"
        )


# ------------------------------------------------------------------------------------------------ the server
def serve(path: Path, watch_pid: int, preload: list[str], ready_fd: int) -> None:
    """Fork a child for each request at ``path`` until the process ``watch_pid`` ends."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children: none is waited for
    for name in preload:
        _import(name)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(64)
        listener.settimeout(WATCH_INTERVAL_S)
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
        try:
            while _alive(watch_pid):
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                with connection:
                    try:
                        _fork_for(connection, listener)
                    except Exception as error:  # noqa: BLE001 - one bad request must not end the run's server
                        with suppress(OSError):
                            connection.sendall(json.dumps({"error": error_record(error)}).encode() + b"\n")
        finally:
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. A process that ended but was not waited for yet (a zombie) counts as
    ended: a caller that reads the run's output until it closes (``subprocess.run(capture_output=True)``) waits
    for it only after this server, which holds that output too, has ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal's answer stands
    return state not in ("Z", "X")


def _import(name: str) -> None:
    """Import ``name`` here, so that every child has it; a failure is left for the child to report."""
    with suppress(Exception):
        importlib.import_module(name)


def cuda_refusal(imported: str) -> str | None:
    """Why no child may be forked any more: torch has initialised CUDA in this process (found after importing
    ``imported``); None while it has not."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return (
        f"CUDA was initialised in the server of network tasks' processes (found after importing {imported}): a "
        "process forked from it cannot use CUDA; a module must not touch CUDA when it is imported"
    )


def _fork_for(connection: socket.socket, listener: socket.socket) -> None:
    connection.settimeout(REQUEST_TIMEOUT_S)
    try:
        with connection.makefile("rb") as lines:
            line = lines.readline(MAX_REQUEST_BYTES)
    except OSError:
        return
    if not line.strip():
        return  # a probe: does a server answer here?
    request = json.loads(line)
    _import(request["module"])
    refusal = cuda_refusal(request["module"])
    if refusal is not None:
        with suppress(OSError):
            connection.sendall(json.dumps({"error": error_record(RuntimeError(refusal))}).encode() + b"\n")
        return
    if os.fork() == 0:
        _child(connection, listener, request)


def _child(connection: socket.socket, listener: socket.socket, request: dict[str, Any]) -> None:  # pragma: no cover - a forked child
    """The forked child: the worker's environment and folder, the task, the answer; never returns."""
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own children (torchrun) are waited for
        connection.settimeout(None)
        os.environ.clear()
        os.environ.update(request["environ"])
        os.chdir(request["cwd"])
        connection.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        threading.Thread(target=_end_with_the_worker, args=(connection,), daemon=True).start()
        answer, code = produced(request)
        connection.sendall(answer.encode() + b"\n")
    finally:
        _flush_and_exit(code)


def _end_with_the_worker(connection: socket.socket) -> None:  # pragma: no cover - a forked child's thread
    """The worker sends nothing after its request: the end of the connection is the worker's end (a killed
    run), or its reading of the answer; either way this process has nothing left to do."""
    with suppress(OSError):
        while connection.recv(1024):
            pass
    _flush_and_exit(1)


def _flush_and_exit(code: int) -> None:  # pragma: no cover - a forked child
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(code)  # not the server's exit handlers: they are the server's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m task_engine.fork_server", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True, help="where to listen")
    parser.add_argument("--watch-pid", type=int, required=True, help="end when this process (the scheduler) ends")
    parser.add_argument("--ready-fd", type=int, required=True, help="where to write 'ready' once listening")
    parser.add_argument("--preload", action="append", default=[], help="a module to import before listening")
    args = parser.parse_args(argv)
    serve(args.socket, args.watch_pid, args.preload, args.ready_fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
