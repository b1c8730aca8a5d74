"""``python -m pipeline ...`` puts the working folder first on ``sys.path``, so a user's own module there named
like one of the project's top-level packages would be imported in place of the package's
(``ModuleNotFoundError: No module named '<name>.registry'; '<name>' is not a package``). Importing
``pipeline`` imports this module before anything else of the project and moves that entry to the end: the
user's modules stay importable, the package's own come first. ``luigi --module pipeline`` and the console
scripts do not put the working folder on the path at all.

Only under ``python -m`` (``sys.argv[0]`` is ``-m`` while Python imports the package it runs), and not in the
repository's own folder, where the working folder is where the packages are. An editable install (``pip install
-e``) is found by setuptools' finder after every path entry, the working folder included: its folder goes on the
path just before the working folder. A ``pipeline.py`` (or ``pipeline/``) in the working folder is what
``python -m pipeline`` runs before any of this: ``crossmodal-pipeline`` is the same command without the working
folder on the path (docs/usage.md). The processes the pipeline starts itself (the engine's server of network
tasks, torchrun's) get :func:`task_engine.processes.child_environment`: outside the repository, no working folder on
their path at all (``PYTHONSAFEPATH``, Python 3.11+), so not even a ``pipeline.py`` there can stand in for the
package.

Here, in ``pipeline``, and not in the engine: ``pipeline`` is imported by then, so this module is found inside
it whatever the working folder holds (a module of another top-level package would be looked up on the very path
it is to repair).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: the folder that holds the package ``pipeline``: the repository in a clone, site-packages when installed
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def working_folder_first(argv: list[str], path: list[str], cwd: str) -> bool:
    """Whether ``python -m`` put ``cwd`` (not the folder the packages are in) first on ``path``."""
    if argv[:1] != ["-m"] or not path:
        return False
    first = Path(path[0] or cwd).resolve()
    return first == Path(cwd).resolve() and first != SOURCE_ROOT


def keep_working_folder_behind() -> None:
    """Move ``python -m``'s working folder to the end of ``sys.path``; an editable install's packages (found by
    setuptools' finder only after every path entry) get their folder on the path just before it."""
    if not working_folder_first(sys.argv, sys.path, os.getcwd()):
        return
    working_folder = sys.path.pop(0)
    if not any(entry and Path(entry).resolve() == SOURCE_ROOT for entry in sys.path):
        sys.path.append(str(SOURCE_ROOT))
    sys.path.append(working_folder)

keep_working_folder_behind()
