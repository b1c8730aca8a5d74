"""What every process the engine starts gets: no working folder that could stand in for a package, and an end
when the process that started it ends."""

from __future__ import annotations

import ctypes
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: the folder that holds this package: the repository in a clone, site-packages when installed
PACKAGES_ROOT = Path(__file__).resolve().parents[1]


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a ``python -m`` process the engine starts (the server of network tasks, torchrun's): with
    ``PYTHONSAFEPATH=1`` unless it starts in the folder that holds the packages (a clone's), so that a module of
    the working folder named like a package cannot stand in for it (Python 3.11+)."""
    if Path.cwd().resolve() == PACKAGES_ROOT:
        return dict(env)
    return {**env, "PYTHONSAFEPATH": "1"}


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None  # not Linux: nothing to arm


#: loaded here, not between fork and exec, where only async-signal-safe work belongs
_LIBC = _libc()


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """A child process gets SIGTERM when the process that started it dies, so a killed run never leaves a
    process writing into the work folder its rerun starts from (or resumes from: torchrun stops its workers
    too)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
