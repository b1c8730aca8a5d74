"""The one JSON reader of the project: the engine's bounded reader (:mod:`task_engine.bounded_json`: a size, a
nesting depth and the digits of every integer checked, each refused in one line naming what was read), imported
from here by the rest of the project with the limits of the project's own kinds beside the engine's.

Every JSON the project parses goes through :func:`loads_bounded` (text in hand) or :func:`read_bounded` (a file),
with the :class:`JsonLimits` of its kind: what the project reads back (:data:`RECORD`: ``_meta.json``, metrics,
run plans, model records, bundles, indexes), a raw dataset's annotation files (:data:`RAW_DATA`), a value on
the command line (:data:`COMMAND_LINE`). tests/test_bounded_json.py fails on any other ``json.load(s)`` call.
"""

from __future__ import annotations

# every name of the engine's reader, for the project to import from here
from task_engine.bounded_json import *  # noqa: F403
from task_engine.bounded_json import JsonLimits
from task_engine.bounded_json import __all__ as _ENGINE_NAMES

#: a raw dataset's annotation file (COCO's and GoodNews' are hundreds of MB), nested a few deep
RAW_DATA = JsonLimits(max_bytes=16 << 30, max_depth=64)
#: a value given on the command line or in luigi.cfg (``--set``, ``--seeds``, ``--dataset-options`` ...)
COMMAND_LINE = JsonLimits(max_bytes=1 << 20, max_depth=32)

__all__ = [*_ENGINE_NAMES, "COMMAND_LINE", "RAW_DATA"]
