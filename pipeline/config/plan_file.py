"""The run plan's file, ``<run_root>/RunPlan/<id>/run_plan.json``: derived data, written by one writer and read by
one reader.

* **The writer** (:func:`write_plan`) is the process that schedules a run, from the plan it resolved from the
  command line (:func:`hold_plan`): the task a run starts from calls it when Luigi first asks whether it is
  complete, before any task reads the file. A missing, damaged or edited file is written anew then; an intact
  one is left as it is (its name is its content's hash, so it is written once).
* **The reader** (:func:`read_plan`) is every task, in the scheduling process, a forked worker or a process of its
  own: it reads the file and checks that its content hashes to the plan's id. Only where the file is not
  (yet) intact does the process that resolved the plan use its own copy (planning writes nothing, and the
  scheduling process rewrites the file before any task runs); any other process refuses in one line saying how
  to recover.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from common.bounded_json import RECORD, BoundedJsonError, read_bounded
from common.run_folder import PLAN_FILE, PLAN_FOLDER, PLAN_ID_FIELDS, RunFolderError, read_plan_record
from common.run_folder import plan_path as _plan_path
from pipeline.config.checks import RunConfigurationError
from pipeline.config.plan import RunPlan
from pipeline.engine.outputs import write_json

logger = logging.getLogger("luigi-interface")

#: plans this process resolved from a command line, by (run root, id): what a damaged file is written from
_HELD: dict[tuple[str, str], RunPlan] = {}
#: the last intact read of each file: (run root, id) -> ((inode, mtime, size), plan)
_READ: dict[tuple[str, str], tuple[tuple[int, int, int], RunPlan]] = {}


def plan_path(run_root: str | Path, plan_id: str) -> Path:
    """``<run_root>/RunPlan/<id>/run_plan.json`` (:mod:`common.run_folder`); an id that is not 12 hex digits is one
    :class:`RunConfigurationError` line."""
    try:
        return _plan_path(run_root, plan_id)
    except RunFolderError as error:
        raise RunConfigurationError(str(error)) from None


def _key(run_root: str | Path, plan_id: str) -> tuple[str, str]:
    return str(Path(run_root).resolve()), plan_id


def hold_plan(plan: RunPlan, run_root: str | Path) -> str:
    """Keep ``plan``, resolved here from a command line, for ``run_root`` (Luigi's forked workers inherit it);
    its id. Nothing is written: :func:`write_plan` does that when the run is scheduled."""
    root = Path(run_root)
    if root.exists() and not root.is_dir():
        raise RunConfigurationError(f"--run-root {run_root} is a file, not a folder: give a folder for the outputs")
    _HELD[_key(root, plan.id)] = plan
    return plan.id


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _read(run_root: str | Path, plan_id: str) -> tuple[RunPlan | None, str]:
    """Plan ``plan_id`` of ``run_root`` when its file holds it intact, else None and what is wrong with the file:
    the run folder's checks (:func:`common.run_folder.read_plan_record`: bounded, its id), then the plan's."""
    data, problem = read_plan_record(run_root, plan_id)
    if data is None:
        return None, problem
    try:
        plan = RunPlan.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return None, f"not a run plan ({type(error).__name__}: {error})"
    if plan.id != plan_id:  # a file this code reads differently from the plan it was written from
        return None, "not a run plan this code reads back the same"
    if data.get("summary") != json.loads(json.dumps(plan.summary(), default=str)):
        return None, "edited: its summary is not the plan's"
    return plan, ""


def _intact(run_root: str | Path, plan_id: str) -> tuple[RunPlan | None, str]:
    """:func:`_read`, once per version of the file (every task asks for its settings often)."""
    key, path = _key(run_root, plan_id), plan_path(run_root, plan_id)
    stamp = _stamp(path)
    if stamp is not None and key in _READ and _READ[key][0] == stamp:
        return _READ[key][1], ""
    plan, problem = _read(run_root, plan_id)
    if plan is not None and stamp is not None:
        _READ[key] = (stamp, plan)
    return plan, problem


def plan_file_problem(run_root: str | Path, plan_id: str) -> str | None:
    """What is wrong with plan ``plan_id``'s file in ``run_root`` (``missing``, ``edited: ...``), None when intact."""
    plan, problem = _intact(run_root, plan_id)
    return None if plan is not None else problem


def read_plan(run_root: str | Path, plan_id: str) -> RunPlan:
    """Plan ``plan_id`` of ``run_root``, read from its file and checked against its id (the one reader of every
    task). Where the file is not intact, the copy of the process that resolved the plan (which writes the file
    anew when it schedules the run); in any other process a :class:`RunConfigurationError` saying how to
    recover."""
    plan, problem = _intact(run_root, plan_id)
    if plan is not None:
        return plan
    held = _HELD.get(_key(run_root, plan_id))
    if held is not None:
        return held
    raise RunConfigurationError(
        f"run plan {plan_id}: {plan_path(run_root, plan_id)} is {problem}, and this process cannot resolve the plan "
        "again (it was given its id alone): start the run again from the command that made it (FullRun, or the "
        "task, with its flags, without --plan), which writes the file anew"
    )


def write_plan(run_root: str | Path, plan: RunPlan) -> str | None:
    """The one writer: ``plan``'s file in ``run_root`` written anew when it is missing, damaged or edited; what was
    wrong with it (None: it was intact and is left as it is)."""
    problem = plan_file_problem(run_root, plan.id) or _order_problem(run_root, plan)
    if problem is None:
        return None
    path = plan_path(run_root, plan.id)
    if problem != "missing":
        logger.warning("%s was %s: written anew from the plan of this run", path, problem)
    # in the plan's own order: a reader iterates some mappings in order (the split fractions, a search space's
    # knobs), which the id (a hash of sorted JSON) does not see
    write_json(path, {**plan.as_json(), "summary": plan.summary()}, sort_keys=False)
    _READ.pop(_key(run_root, plan.id), None)
    return problem


def _order_problem(run_root: str | Path, plan: RunPlan) -> str | None:
    """Whether plan ``plan``'s intact file holds its mappings in another order than the plan (older versions wrote
    it with sorted keys): the same id, but not what every reader would read back."""
    try:
        written = read_bounded(plan_path(run_root, plan.id), RECORD)
    except (OSError, BoundedJsonError) as error:  # changed since it was found intact: written anew
        return f"unreadable ({error})"
    ordered = json.loads(json.dumps(plan.as_json(), default=str))
    in_order = all(json.dumps(written[field]) == json.dumps(ordered[field]) for field in PLAN_ID_FIELDS)
    return None if in_order else "in another key order than the plan (an older version's sorted keys)"


def forget_plans() -> None:
    """Drop every plan this process resolved or read (the next read comes from the files alone)."""
    _HELD.clear()
    _READ.clear()


__all__ = [
    "PLAN_FILE",
    "PLAN_FOLDER",
    "forget_plans",
    "hold_plan",
    "plan_file_problem",
    "plan_path",
    "read_plan",
    "write_plan",
]
