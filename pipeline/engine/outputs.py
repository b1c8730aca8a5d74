"""Atomic writes and run metadata: every output appears whole or not at all.

The faults this guards against (each has a test in tests/test_faults_pipeline.py):

* a process killed mid-task leaves only ``<final>.partial``: ``_meta.json`` is written last and the folder
  is renamed into place whole, so a half-built output is never taken as complete;
* two processes producing the same output at once (two runs on one run root): only the holder of
  ``<final>.lock`` builds it; the other waits, then finds it done (see :func:`output_lock`);
* a full disk: the error names the file or folder being written, and the partial output of a task that
  cannot resume is removed, which also gives the space back;
* a failed attempt under settings never run again (a raised reject budget gives the task another hash):
  its ``.partial`` folder is removed by the next run of that task family (:func:`remove_abandoned_partials`),
  unless a process holds its lock (it is being built now).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import os
import platform
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common import files
from common.bounded_json import RECORD, read_bounded
from common.files import PARTIAL_SUFFIX, atomic_path, partial_path

__all__ = [
    "DiskFullError",
    "atomic_path",
    "atomic_directory",
    "output_lock",
    "remove_abandoned_partials",
    "write_json",
    "read_json",
    "save_array",
    "save_frame",
    "save_text",
]

logger = logging.getLogger("luigi-interface")

TRACKED_PACKAGES = (
    "torch",
    "torchvision",
    "gensim",
    "datasketch",
    "annoy",
    "numpy",
    "pandas",
    "pyarrow",
    "luigi",
)

#: this run's identity in the lock files it holds: the pid of the process that imported this module first,
#: which Luigi's forked workers inherit (a second run, even one started from the same shell, has another)
RUN_ID = str(os.getpid())

#: flock is not supported here (some network file systems): outputs are built without the lock
_NO_LOCKING = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in TRACKED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


class DiskFullError(OSError):
    """``ENOSPC`` with the path that could not be written: the bare ``[Errno 28] No space left on device``
    of a ``write()`` names no file, and a user needs to know which disk (run root, temp dir) filled up."""

    def __str__(self) -> str:  # the message alone: it already says what "[Errno 28]" would
        return str(self.strerror)


def disk_full(path: Path | str, cause: OSError) -> DiskFullError:
    """A :class:`DiskFullError` for ``path`` (built from ``(errno, message)`` only, so it pickles)."""
    return DiskFullError(
        errno.ENOSPC, f"no space left on device while writing {path}: {cause.strerror or cause}"
    )


@contextmanager
def _naming_disk_full(path: Path, *, or_the_errors_own: bool = False) -> Iterator[None]:
    """Re-raise ``ENOSPC`` inside the block as :class:`DiskFullError` naming ``path`` (a save helper's
    destination, not its temp file) or, with ``or_the_errors_own``, the file the error itself names when it
    names one (the destination of a rename first), ``path`` otherwise."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        named = (error.filename2 or error.filename) if or_the_errors_own else None
        raise disk_full(named or path, error) from error


def lock_path(final: Path) -> Path:
    """The lock file whose holder alone builds ``final`` (removed when it is released)."""
    final = Path(final)
    return final.with_name(final.name + ".lock")


@contextmanager
def output_lock(final: Path) -> Iterator[None]:
    """Hold the exclusive right to build ``final``: an ``fcntl.flock`` on ``<final>.lock``.

    Why: two local-scheduler runs on one run root each schedule the same task. Without the lock the second
    cleared the first's ``.partial`` folder while it was being written, and the first then renamed a folder
    holding a mix of both runs' files, or nothing but its ``_meta.json``, into place as complete. With it
    the second blocks (logging which pid it waits for) and, once it gets the lock, finds the output complete
    (see ``HashedTask.run``). A killed holder's lock is released by the kernel, so a rerun never waits for a
    dead process. The lock file is removed by its holder before release; a waiter that then gets the lock
    on the removed file notices (the path no longer leads to its file) and takes the lock again.
    """
    path = lock_path(final)
    fd = _acquire(path, Path(final))
    try:
        yield
    finally:
        if fd is not None:
            _release(path, fd)


def _acquire(path: Path, final: Path) -> int | None:
    """An open, exclusively locked descriptor of the lock file now at ``path`` (None where the file system
    cannot lock)."""
    with _naming_disk_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder, _, run = os.pread(fd, 64, 0).decode(errors="replace").strip().partition(" ")
                    # the same run's other worker is no news to its user; another run is
                    log = logger.info if run == RUN_ID else logger.warning
                    log("waiting for %s: another process (pid %s) is producing it", final, holder or "unknown")
                    fcntl.flock(fd, fcntl.LOCK_EX)
                if _is_file_at(fd, path):
                    with suppress(OSError):  # the pid is for the message above only
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, f"{os.getpid()} {RUN_ID}\n".encode(), 0)
                    return fd
            except OSError as error:
                os.close(fd)
                if error.errno in _NO_LOCKING:
                    logger.warning("cannot lock %s (%s): runs sharing this run root may collide", path, error)
                    return None
                raise
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # its holder removed that file on release: lock the one at ``path`` now


def _is_file_at(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _release(path: Path, fd: int) -> None:
    try:
        with suppress(FileNotFoundError):
            os.unlink(path)  # while still held: nobody can have locked the file now at ``path`` but us
    finally:
        os.close(fd)


def _try_lock(final: Path) -> int | None:
    """The locked descriptor of ``final``'s lock file when nobody holds it; None when a process does (or
    the file system cannot lock, when nobody can tell)."""
    path = lock_path(final)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if isinstance(error, BlockingIOError) or error.errno in _NO_LOCKING:
            return None
        raise
    if not _is_file_at(fd, path):  # its holder removed it between our open and lock: someone builds it
        os.close(fd)
        return None
    return fd


def remove_abandoned_partials(family_dir: Path, keep: Path) -> list[Path]:
    """Remove the ``<signature>.partial`` folders in ``family_dir`` (one task family's outputs) besides
    ``keep``'s that no process is building, and return them.

    Why: a failed attempt's folder is kept for inspection and cleared when the same output is built again,
    but a rerun under other settings (a raised reject budget) builds another output, so nothing would ever
    clear it. A folder is removed only under its output's lock (:func:`output_lock`), taken without
    waiting: one being built now is skipped. Not for resumable tasks, whose partial folder holds the
    checkpoints a rerun with those settings resumes from.
    """
    removed = []
    for partial in sorted(Path(family_dir).glob(f"*{PARTIAL_SUFFIX}")):
        final = partial.with_name(partial.name.removesuffix(PARTIAL_SUFFIX))
        if final == Path(keep) or not partial.is_dir():
            continue
        fd = _try_lock(final)
        if fd is None:
            continue
        try:
            if partial.is_dir():
                shutil.rmtree(partial, ignore_errors=True)
                removed.append(partial)
        finally:
            _release(lock_path(final), fd)
    return removed


@contextmanager
def atomic_directory(final: Path, *, resume: bool = False) -> Iterator[Path]:
    """:func:`common.files.atomic_directory` for a task's output, with a full disk named.

    The caller holds :func:`output_lock` of ``final`` (``HashedTask.run`` does, and checks completeness under
    it), so the ``.partial`` folder is never shared between processes. ``ENOSPC`` anywhere in the block is
    raised as :class:`DiskFullError` naming the path; the partial folder is then removed unless ``resume``
    (the checkpoints it keeps are what a rerun resumes from once space is freed). On any other error it
    stays for inspection (e.g. the ``rejects.csv`` of a rejected input) and is cleared by the next run of
    the task, under any settings (:func:`remove_abandoned_partials`).
    """
    partial = partial_path(final)
    try:
        with (
            _naming_disk_full(partial, or_the_errors_own=True),
            files.atomic_directory(final, resume=resume) as work_dir,
        ):
            yield work_dir
    except DiskFullError:
        if not resume:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    except BaseException:
        # kept for inspection when it holds something (a rejected input's rejects.csv); an empty one, what a
        # check that failed before any write leaves, says nothing and goes
        with suppress(OSError):
            partial.rmdir()
        raise


def write_json(path: Path, payload: Any, *, sort_keys: bool = True) -> None:
    """``payload`` as JSON at ``path``, atomically; ``sort_keys=False`` keeps each mapping's order (a record whose
    reader iterates a mapping in order)."""
    with _naming_disk_full(path), atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=sort_keys, default=json_default) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file the run wrote, read within bounds (an edited one nested thousands deep is a ``ValueError``
    naming it, as a damaged one is)."""
    return read_bounded(path, RECORD)


def read_output(path: Path, **options: Any) -> Any:
    """A task's output file, read by its suffix (``options`` go to ``np.load`` for ``.npy``)."""
    path = Path(path)
    readers = {
        ".npy": lambda: np.load(path, **options),
        ".npz": lambda: dict(np.load(path)),
        ".json": lambda: read_json(path),
        ".parquet": lambda: pd.read_parquet(path),
        ".csv": lambda: pd.read_csv(path, dtype=str, keep_default_na=False),
    }
    if path.suffix not in readers:
        raise ValueError(f"no reader for {path.name}; open it with the library that wrote it")
    return readers[path.suffix]()


def save_array(path: Path, array: np.ndarray) -> None:
    with _naming_disk_full(path), atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, array)


def save_array_blocks(path: Path, rows: int, blocks: Iterable[np.ndarray]) -> tuple[tuple[int, ...], np.dtype]:
    """What :func:`save_array` writes for ``np.concatenate(blocks)`` (``rows`` rows in all), written block by
    block through a memory map so the whole array is never held in memory; the first block gives the
    trailing shape and dtype. Returns the array's shape and dtype."""
    blocks = iter(blocks)
    first = next(blocks, None)
    if first is None:
        raise ValueError(f"no rows to write to {path.name}")
    shape = (rows, *first.shape[1:])

    def fill(out: np.ndarray) -> None:
        written = 0
        for block in itertools.chain([first], blocks):
            if written + len(block) > rows:
                raise ValueError(f"{path.name}: more than the {rows:,} rows expected")
            out[written : written + len(block)] = block
            written += len(block)
        if written != rows:
            raise ValueError(f"{path.name}: {written:,} rows written, {rows:,} expected")

    with _naming_disk_full(path):
        files.write_npy_through_memmap(path, shape, first.dtype, fill, named=path)
    return shape, first.dtype


def save_frame(path: Path, frame: pd.DataFrame) -> None:
    with _naming_disk_full(path), atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def save_text(path: Path, text: str) -> None:
    with _naming_disk_full(path), atomic_path(path) as tmp:
        tmp.write_text(text)


def json_default(value: Any) -> Any:
    """JSON for what the outputs' summaries hold besides JSON types (NumPy numbers and arrays, paths, tuples)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
