"""What each task of a run will do: ``python -m pipeline plan`` (FullRun's arguments) prints the run plan
(:mod:`pipeline.config.plan`), the state of its file in the run root, and, per task, whether it is done, will
run (and why: new settings against its own earlier output, a new upstream output, an input made again) or is
stale (made by other code), without running anything. "Done" is the run's own completeness
(``HashedTask.incomplete_reason``), so what the plan says will run is what FullRun runs. Tasks the tuned protocol
decides while it runs (later rungs, the chosen settings' runs) are not known before: the plan says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luigi

from common.run_folder import META_FILE, meta_or_none
from pipeline.config.plan_file import plan_file_problem, plan_path
from pipeline.engine.task import HashedTask

DONE, RUN, STALE, KEPT = "done", "run", "stale", "kept"


@dataclass(frozen=True)
class PlannedTask:
    task: HashedTask
    status: str
    reason: str

    @property
    def family(self) -> str:
        return self.task.get_task_family()

    def label(self) -> str:
        params = self.task.param_kwargs
        parts = [str(params[name]) for name in ("space", "variant") if params.get(name)]
        if "seed" in params and "variant" in params:
            parts.append(f"seed {params['seed']}")
        overrides = _flatten(luigi.freezing.recursively_unfreeze(params.get("point") or {}))
        # a tied knob sets one value under several losses (the angle of Ours's two terms): said once
        parts += list(dict.fromkeys(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in overrides.items()))
        return " ".join(parts)


def walk(root: luigi.Task) -> list[HashedTask]:
    """Every HashedTask ``root`` requires (statically), each output once, dependencies first."""
    seen: dict[Path, HashedTask] = {}

    def visit(node: luigi.Task) -> None:
        for child in luigi.task.flatten(node.requires()):
            visit(child)
        if isinstance(node, HashedTask) and node.output_dir() not in seen:
            seen[node.output_dir()] = node

    visit(root)
    return list(seen.values())


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def identity(task: HashedTask, params: dict[str, Any]) -> dict[str, Any]:
    """What tells this task apart within its family in ``params`` (as ``_meta.json`` records them): its
    significant parameters but the plan's id (variant, seed, point, ...)."""
    names = {name for name, parameter in task.get_params() if parameter.significant and name != "plan"}
    return {name: value for name, value in params.items() if name in names}


def earlier_outputs(task: HashedTask, metas: dict[Path, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The ``_meta.json`` of every output of ``task``'s family in the run root, newest first (read once per family:
    ``metas`` caches them)."""
    family_dir = task.output_dir().parent
    if family_dir not in metas:
        found = []
        for path in sorted(family_dir.glob(f"*/{META_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True):
            meta = meta_or_none(path.parent)
            if meta is not None and isinstance(meta.get("config"), dict) and isinstance(meta.get("params"), dict):
                found.append(meta)
        metas[family_dir] = found
    return metas[family_dir]


def settings_difference(task: HashedTask, metas: dict[Path, list[dict[str, Any]]] | None = None) -> str | None:
    """How this task's settings differ from its own earlier output in the run root: the newest output of its family
    made for the same variant, seed, point ... under another plan (None when that one has the same settings:
    then an upstream output is new)."""
    params = identity(task, task.process_params())
    own = [meta for meta in earlier_outputs(task, {} if metas is None else metas) if identity(task, meta["params"]) == params]
    if not own:
        return "new output (none of this task yet)"
    mine = _flatten(json.loads(json.dumps(task.config(), default=str)))  # as _meta.json holds it (tuples as lists)
    theirs = _flatten(own[0]["config"])
    diff = [
        f"{key} {theirs.get(key, '-')} -> {mine.get(key, '-')}"
        for key in sorted(set(mine) | set(theirs))
        if mine.get(key) != theirs.get(key)
    ]
    if not diff:
        return None
    return "settings: " + "; ".join(diff[:4]) + (f"; +{len(diff) - 4} more" if len(diff) > 4 else "")


def status_of(task: HashedTask, running: Iterable[HashedTask], metas: dict[Path, list[dict[str, Any]]] | None = None) -> tuple[str, str]:
    """(status, reason) of one task, given the tasks before it that will run: the run's own completeness
    (``HashedTask.incomplete_reason``), with the reason a person needs."""
    if task.output().exists():
        stale, reason = task.stale_reason(), task.incomplete_reason()
        if stale is not None and not task.keep_stale:
            return STALE, stale
        if reason is not None:
            return RUN, reason
        return (KEPT, stale + " (kept: --keep-stale)") if stale is not None else (DONE, "")
    new_upstream = sorted({u.get_task_family() for u in task.upstream() if u in running})
    difference = settings_difference(task, metas)
    if difference is None:
        return RUN, "upstream: new " + ", ".join(new_upstream) if new_upstream else "upstream changed"
    return RUN, difference


def task_plan(root: luigi.Task) -> list[PlannedTask]:
    planned: list[PlannedTask] = []
    running: set[HashedTask] = set()
    metas: dict[Path, list[dict[str, Any]]] = {}
    for task in walk(root):
        status, reason = status_of(task, running, metas)
        if status in (RUN, STALE):
            running.add(task)
        planned.append(PlannedTask(task, status, reason))
    return planned


def plan_files(planned: list[PlannedTask]) -> list[dict[str, str]]:
    """The run plans the planned tasks read, each with the state of its file: ``intact``, or what is wrong and
    that the run writes it when it starts (planning writes nothing)."""
    plans = dict.fromkeys((str(p.task.run_root), p.task.plan_id) for p in planned if getattr(p.task, "plan_id", None))
    states = []
    for run_root, plan_id in plans:
        problem = plan_file_problem(run_root, plan_id)
        state = "intact" if problem is None else f"{problem}: the run writes it anew before any task reads it"
        states.append({"plan": plan_id, "file": str(plan_path(run_root, plan_id)), "state": state})
    return states


def format_task_plan(planned: list[PlannedTask]) -> list[str]:
    counts = {status: sum(p.status == status for p in planned) for status in (DONE, RUN, STALE, KEPT)}
    lines = [f"run plan file {f['file']}: {f['state']}" for f in plan_files(planned)]
    lines.append(f"{len(planned)} tasks: {counts[DONE]} done, {counts[RUN]} will run, {counts[STALE]} stale, {counts[KEPT]} kept stale")
    width = max((len(p.family) for p in planned), default=0)
    for p in planned:
        where = f"{p.family}/{p.task.signature()}"
        detail = f" — {p.reason}" if p.reason else ""
        lines.append(f"  {p.status:<5} {p.family:<{width}} {p.label():<22} {where}{detail}")
    if any(p.family == "Tune" and p.status != DONE for p in planned):
        lines.append("  (the tuned protocol decides its later trainings as it runs: they are not listed)")
    return lines
