"""Atomic writes: every file and folder the project writes appears whole or not at all.

:func:`atomic_path` is the one way a file is written (checkpoints, pipeline outputs, image caches, search
indexes, bundles): the caller writes a temporary file in the destination's folder, which is renamed over the
destination only when the block succeeds. :func:`atomic_directory` does the same for a folder, built as
``<final>.partial``.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

#: ``<final>.partial``: a folder while it is built (common.run_folder describes the whole layout)
PARTIAL_SUFFIX = ".partial"


def create_temp_file(folder: Path, prefix: str, suffix: str) -> Path:
    """An empty file with a fresh random name in ``folder``, created with the mode the umask gives an ordinary
    file (``tempfile.mkstemp`` makes it 0600, which the rename would carry into the output and hide it
    from the other users of a shared run root)."""
    while True:
        path = Path(folder) / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return path


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path (an existing empty file) in ``final``'s folder; move it over ``final`` only if
    the block succeeds, else remove it; a full disk is an ``ENOSPC`` ``OSError`` naming ``final``. Write to
    it by name or through an open handle (``np.save`` given a *name* appends ``.npy``: give it a handle)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = create_temp_file(final.parent, f".{final.name}.", ".tmp")
    try:
        yield tmp
        os.replace(tmp, final)
    except OSError as error:
        # a write through an open handle fails with a bare "[Errno 28]": name the file being written
        if error.errno == errno.ENOSPC and not error.filename:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final)) from error
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def partial_path(final: Path) -> Path:
    """Where the folder ``final`` is built before it is renamed into place."""
    final = Path(final)
    return final.with_name(final.name + PARTIAL_SUFFIX)


@contextmanager
def atomic_directory(final: Path, *, resume: bool = False) -> Iterator[Path]:
    """Build a folder as ``<final>.partial`` and rename it to ``final`` when the block succeeds.

    A ``.partial`` folder left by a killed process is cleared first, or kept with ``resume`` (a task picking
    up its checkpoints: the temp files of interrupted :func:`atomic_path` writes in it are removed, they never
    held a published file). An existing ``final`` (an earlier incomplete output) is replaced whole. On an
    error the partial folder stays for inspection; the next build clears it.
    """
    final = Path(final)
    partial = partial_path(final)
    if partial.exists():
        if resume:
            remove_stale_temp_files(partial)
        else:
            shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    yield partial
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)


def remove_stale_temp_files(folder: Path) -> None:
    """Delete the temp files of :func:`atomic_path` (``.<name>.<random>.tmp``) that a killed process left in
    ``folder``: never valid (a write publishes only by renaming), they would otherwise be renamed into a
    complete output with it."""
    for path in Path(folder).rglob(".*.tmp"):
        if path.is_file():
            path.unlink()


def reserve_disk_space(path: str | Path, named: Path) -> None:
    """Allocate every block of the file at ``path`` now. A memory map over a sparse file on a full disk is
    killed by SIGBUS at the first page the disk cannot back (no message, no cleanup); reserving first turns
    that into an ``ENOSPC`` ``OSError`` here, naming ``named`` (the pipeline reports it as its
    ``DiskFullError``). Filesystems without fallocate keep the sparse file, as before."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise OSError(
                errno.ENOSPC, f"no space left on device while writing {named} ({size:,} bytes)", str(named)
            ) from error
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    finally:
        os.close(fd)


def write_npy_through_memmap(
    path: Path, shape: tuple[int, ...], dtype: np.dtype | type, fill: Callable[[np.ndarray], None], *, named: Path
) -> None:
    """Create a .npy of ``shape`` and ``dtype`` at ``path`` (:func:`atomic_path`: readers see no file or a
    complete one), ``fill`` it through a memory map whose blocks are reserved first
    (:func:`reserve_disk_space`, naming ``named`` on a full disk), then publish it: an array larger than
    memory is written without ever being held whole."""
    with atomic_path(path) as temp:
        if shape[0] == 0:
            # a zero-length memmap cannot be mapped: the empty array is filled in memory
            array = np.zeros(shape, dtype=dtype)
            fill(array)
            with open(temp, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
            return
        array = np.lib.format.open_memmap(temp, mode="w+", dtype=dtype, shape=shape)
        reserve_disk_space(temp, named)
        fill(array)
        array.flush()
        del array


#: below this many free bytes a failed write is taken as a full disk (see :func:`native_write`)
FULL_DISK_FREE_BYTES = 1 << 20


def disk_is_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` has (next to) no free space left."""
    try:
        return shutil.disk_usage(folder).free < FULL_DISK_FREE_BYTES
    except OSError:
        return False


@contextmanager
def native_write(path: Path) -> Iterator[None]:
    """Around a write done by C or C++ code (Annoy's ``save``, faiss's ``write_index``, torch's zip writer),
    whose failure on a full disk is a ``RuntimeError`` ("basic_ios::clear: iostream error") or an ``OSError``
    without an errno: when the disk holding ``path`` is full at that moment, it is re-raised as the
    ``ENOSPC`` ``OSError`` a Python write would give, naming ``path``; any other failure as it was."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        if disk_is_full(Path(path).parent):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from error
        raise
