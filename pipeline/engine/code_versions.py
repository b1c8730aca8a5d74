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
#: the version of a family with no entry yet (a new task family)
FIRST_VERSION = 1


class MissingCodeVersions(RuntimeError):
    """The installed package lacks ``code_versions.json``: every output's staleness would be guessed."""


@lru_cache(maxsize=1)
def recorded() -> dict[str, Any]:
    """``code_versions.json``: ``{"python": "3.11", "families": {family: {"version", "fingerprint"}}}``. Its
    absence (a package built without its data files) is refused: taking every family for version 1 would call
    today's outputs stale and older ones current."""
    if not VERSIONS_FILE.exists():
        raise MissingCodeVersions(
            f"{VERSIONS_FILE} is missing: this installation of the package lacks its data files; reinstall it "
            "(pip install -e . from the repository)"
        )
    return json.loads(VERSIONS_FILE.read_text())


def version_of(family: str) -> int:
    """The current code version of task family ``family``."""
    return int(recorded()["families"].get(family, {}).get("version", FIRST_VERSION))
