"""The recorded code version of each task family (a JSON file the project keeps: :attr:`CodeBase.versions_file`),
read by every task to tell an output made by today's code from one made by older code, and what the
fingerprints cover (the :class:`CodeBase` the project declares). What the versions mean and how they are
updated: :mod:`task_engine.code_identity`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: the version of a family with no entry yet (a new task family)
FIRST_VERSION = 1


@dataclass(frozen=True)
class CodeBase:
    """What the fingerprints cover, as the project that uses the engine tells it (:func:`configure`): the folder
    that holds its packages, the packages whose modules count (a module outside them is a library, versioned by
    ``_meta.json``'s library versions instead), the package whose modules define the task families, and the
    file that records each family's version and fingerprint (the project's data, shipped with its package)."""

    root: Path
    packages: tuple[str, ...]
    tasks_package: str
    versions_file: Path

    def module_pattern(self) -> re.Pattern[str]:
        """A dotted module name of these packages, as a string in the source may name one."""
        return re.compile(rf"(?:{'|'.join(map(re.escape, self.packages))})(?:\.[a-z_][a-z0-9_]*)+")


#: the code base the project declared (one)
_CODE_BASE: list[CodeBase] = []


def configure(base: CodeBase) -> None:
    """Say what the fingerprints cover (the project's tasks package does, when it is imported)."""
    _CODE_BASE[:] = [base]
    recorded.cache_clear()


def code_base() -> CodeBase:
    if not _CODE_BASE:
        raise RuntimeError(
            "code identity has no code base: the package that defines the task families calls "
            "code_versions.configure(CodeBase(...)) when it is imported; import it first"
        )
    return _CODE_BASE[0]


class MissingCodeVersions(RuntimeError):
    """The installed package lacks ``code_versions.json``: every output's staleness would be guessed."""


@lru_cache(maxsize=1)
def recorded() -> dict[str, Any]:
    """The versions file: ``{"python": "3.11", "families": {family: {"version", "fingerprint"}}}``. Its
    absence (a package built without its data files) is refused: taking every family for version 1 would call
    today's outputs stale and older ones current."""
    path = code_base().versions_file
    if not path.exists():
        raise MissingCodeVersions(
            f"{path} is missing: this installation of the package lacks its data files; reinstall it "
            "(pip install -e . from the repository)"
        )
    return json.loads(path.read_text())


def version_of(family: str) -> int:
    """The current code version of task family ``family``."""
    return int(recorded()["families"].get(family, {}).get("version", FIRST_VERSION))
