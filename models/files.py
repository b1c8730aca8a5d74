"""Atomic file writes, shared by the trainer's checkpoints and the pipeline's outputs."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
    """Yield a temporary path in the same folder; move it over ``final`` only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = create_temp_file(final.parent, f".{final.name}.", ".tmp")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
