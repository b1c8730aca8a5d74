"""The recorded code version of each task family (``pipeline/engine/code_versions.json``), read by every task to
tell an output made by today's code from one made by older code. What the versions mean and how they are
updated: :mod:`pipeline.engine.code_identity`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

VERSIONS_FILE = Path(__file__).with_name("code_versions.json")
#: the version of a family with no entry, and of an output made before lineages were recorded
FIRST_VERSION = 1


@lru_cache(maxsize=1)
def recorded() -> dict[str, Any]:
    """``code_versions.json``: ``{"python": "3.11", "families": {family: {"version", "fingerprint"}}}``."""
    if not VERSIONS_FILE.exists():
        return {"families": {}}
    return json.loads(VERSIONS_FILE.read_text())


def version_of(family: str) -> int:
    """The current code version of task family ``family``."""
    return int(recorded()["families"].get(family, {}).get("version", FIRST_VERSION))
