"""The hash that names every output folder (:meth:`task_engine.task.HashedTask.signature`): the same in every
process and on every machine, so a rerun finds what an earlier one made."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(payload: Any, length: int = 12) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``payload`` as canonical JSON (sorted keys)."""
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]
