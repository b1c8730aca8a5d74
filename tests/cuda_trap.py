"""Importing this module traps every call that would start CUDA in the importing process: each is appended to
the file ``$CUDA_TRAP_FILE`` names (the call then goes on as it would). A process forked from the importing one
(a network task's child, which may start CUDA) records nothing. tests/test_spawn.py has the server of network
tasks import it first, and the scheduling process installs it with :func:`install`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

#: what starts CUDA (or asks the driver, which initialises it): torch.cuda's entry points and the C calls under them
CUDA_ENTRY_POINTS = ("is_available", "init", "_lazy_init", "current_device", "set_device", "device_count",
                     "get_device_properties", "mem_get_info", "is_bf16_supported", "synchronize")  # fmt: skip
C_ENTRY_POINTS = ("_cuda_init", "_cuda_getDeviceCount")


def _trapped(name: str, original: Callable[..., Any], record: str, owner: int) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() == owner:
            with open(record, "a") as file:
                file.write(f"{owner} {name}\n")
        return original(*args, **kwargs)

    return call


def install(record: str, set_attribute: Callable[[Any, str, Any], None] = setattr) -> list[str]:
    """Trap the entry points in this process, recording into ``record`` (``set_attribute``: a test's
    ``monkeypatch.setattr``, which undoes it); the names trapped."""
    owner = os.getpid()
    trapped = []
    for module, names in ((torch.cuda, CUDA_ENTRY_POINTS), (torch._C, C_ENTRY_POINTS)):
        for name in names:
            if hasattr(module, name):
                set_attribute(module, name, _trapped(name, getattr(module, name), record, owner))
                trapped.append(name)
    return trapped


if os.environ.get("CUDA_TRAP_FILE"):
    install(os.environ["CUDA_TRAP_FILE"])
