"""Atomic writes and run metadata: every output appears whole or not at all."""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.files import atomic_path

__all__ = ["atomic_path", "atomic_directory", "write_json", "read_json", "save_array", "save_frame"]

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


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in TRACKED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


@contextmanager
def atomic_directory(final: Path, *, resume: bool = False) -> Iterator[Path]:
    """Build a directory as ``<final>.partial`` and rename it to ``final`` when the block succeeds.

    With ``resume=True`` an existing ``.partial`` folder (left by a killed run) is kept, so a task can pick
    up its checkpoints; otherwise it is cleared first.
    """
    final = Path(final)
    partial = final.with_name(final.name + ".partial")
    if partial.exists() and not resume:
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    yield partial
    if final.exists():  # an earlier incomplete output (no metadata): replace it whole
        shutil.rmtree(final)
    os.replace(partial, final)


def write_json(path: Path, payload: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


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
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, array)


def save_frame(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def save_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _json_default(value: Any) -> Any:
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
