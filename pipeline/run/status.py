"""What each task of a run will do: ``python -m pipeline plan`` (FullRun's arguments) prints the run plan
(:mod:`pipeline.config.plan`) and, per task, whether it is done, will
run (and why: new settings, a new upstream output) or is stale (made by other code), without running
anything. Tasks the tuned protocol decides while it runs (later rungs, the chosen settings' runs) are not
known before: the plan says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luigi

from pipeline.engine.outputs import read_json
from pipeline.engine.task import META_FILE, HashedTask

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


def settings_difference(task: HashedTask, limit: int = 40) -> str | None:
    """How this task's settings differ from the nearest output of its family in the run root (None when
    one has the same settings: then an upstream output is new)."""
    family_dir = task.output_dir().parent
    metas = sorted(family_dir.glob(f"*/{META_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
    mine = _flatten(json.loads(json.dumps(task.config(), default=str)))  # as _meta.json holds it (tuples as lists)
    best: list[str] | None = None
    for path in metas:
        try:
            theirs = _flatten(read_json(path).get("config", {}))
        except (OSError, ValueError):
            continue
        diff = [
            f"{key} {theirs.get(key, '-')} -> {mine.get(key, '-')}"
            for key in sorted(set(mine) | set(theirs))
            if mine.get(key) != theirs.get(key)
        ]
        if best is None or len(diff) < len(best):
            best = diff
    if best is None:
        return "new output (none of this task yet)"
    if not best:
        return None
    return "settings: " + "; ".join(best[:4]) + (f"; +{len(best) - 4} more" if len(best) > 4 else "")


def status_of(task: HashedTask, running: Iterable[HashedTask]) -> tuple[str, str]:
    """(status, reason) of one task, given the tasks before it that will run."""
    if task.output().exists():
        stale = task.stale_reason()
        if stale is None and task.complete():
            return DONE, ""
        if stale is None:
            return RUN, "its output is incomplete"
        return (KEPT, stale + " (kept: --keep-stale)") if task.keep_stale else (STALE, stale)
    new_upstream = sorted({u.get_task_family() for u in task.upstream() if u in running})
    difference = settings_difference(task)
    if difference is None:
        return RUN, "upstream: new " + ", ".join(new_upstream) if new_upstream else "upstream changed"
    return RUN, difference


def task_plan(root: luigi.Task) -> list[PlannedTask]:
    planned: list[PlannedTask] = []
    running: set[HashedTask] = set()
    for task in walk(root):
        status, reason = status_of(task, running)
        if status in (RUN, STALE):
            running.add(task)
        planned.append(PlannedTask(task, status, reason))
    return planned


def plan_summary(plan: dict[str, Any]) -> list[str]:
    """A few lines a person reads first: the profile, the changes, the grid."""
    lines = [f"profile {plan['profile']}, dataset {plan['dataset']['name']}, protocols {', '.join(plan['protocols'])}"]
    lines.append("changes: " + (", ".join(plan["changes"]) if plan["changes"] else "none (the profile as it is)"))
    lines.append(
        "variants: "
        + ", ".join(f"{name} (seeds {v['seeds']}, {'+'.join(v['protocols'])})" for name, v in plan["variants"].items())
    )
    return lines


def format_task_plan(planned: list[PlannedTask]) -> list[str]:
    counts = {status: sum(p.status == status for p in planned) for status in (DONE, RUN, STALE, KEPT)}
    lines = [f"{len(planned)} tasks: {counts[DONE]} done, {counts[RUN]} will run, {counts[STALE]} stale, {counts[KEPT]} kept stale"]
    width = max((len(p.family) for p in planned), default=0)
    for p in planned:
        where = f"{p.family}/{p.task.signature()}"
        detail = f" — {p.reason}" if p.reason else ""
        lines.append(f"  {p.status:<5} {p.family:<{width}} {p.label():<22} {where}{detail}")
    if any(p.family == "Tune" and p.status != DONE for p in planned):
        lines.append("  (the tuned protocol decides its later trainings as it runs: they are not listed)")
    return lines
