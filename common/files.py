"""The project's file writes: the engine's atomic writes (:mod:`task_engine.files`: every file and folder appears
whole or not at all), imported from here by the rest of the project, and :func:`native_write`, the full-disk
error of a write done by C or C++ code named as a Python write's would be.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from task_engine.files import (
    PARTIAL_SUFFIX,
    atomic_directory,
    atomic_path,
    create_temp_file,
    partial_path,
    remove_stale_temp_files,
    reserve_disk_space,
    write_npy_through_memmap,
)

__all__ = [
    "PARTIAL_SUFFIX",
    "atomic_directory",
    "atomic_path",
    "create_temp_file",
    "disk_is_full",
    "native_write",
    "partial_path",
    "remove_stale_temp_files",
    "reserve_disk_space",
    "write_npy_through_memmap",
]


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
