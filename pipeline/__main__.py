"""``python -m pipeline FullRun ...``: the ``luigi --module pipeline FullRun ...`` command, judged by its result;
``python -m pipeline plan ...`` (FullRun's arguments, and ``--json``): the resolved plan and what each task would
do, without running anything; ``python -m pipeline settings [--profile P] [--set ...] [--json]``: every setting,
its value, range, kind and meaning (:mod:`pipeline.run.settings_list`); ``python -m pipeline code-versions
[--record | --bump FAMILY ...]``: each task family's code against its recorded fingerprint
(:mod:`task_engine.code_identity`, docs/usage.md). ``crossmodal-pipeline ...`` is the same command as a console script: it works in a
folder that holds a ``pipeline.py`` of its own, which ``python -m pipeline`` would run instead.

Luigi judges a process by what it saw: in a run shared through ``luigid`` a process whose tasks another
process ran exits 10 (``[retcode] already_running``: "run by another worker") or 25 (``not_run``), even when
the whole run finished. This entry point runs Luigi exactly as the ``luigi`` command does and, when it would
exit with one of those two codes, exits 0 if the root task is complete by then (every output it needs is
there), so each cooperating process of a finished shared run exits 0. Every other status is Luigi's own.
"""

from __future__ import annotations

import sys

import luigi.retcodes
from luigi.cmdline_parser import CmdlineParser


def judged_by_result(code: object, argv: list[str]) -> object:
    """``code``, or 0 when it only says other workers did the work and the root task is complete."""
    with CmdlineParser.global_instance(argv) as parser:
        retcodes = luigi.retcodes.retcode()
        cooperative = {retcodes.already_running, retcodes.not_run} - {0}
        if code in cooperative and parser.get_task_obj().complete():
            return 0
    return code


def show_plan(argv: list[str]) -> int:
    """Print the run plan of ``FullRun <argv>`` and each task's status; ``--json``: the plan as JSON."""
    import json

    from pipeline.config.plan import plan_summary
    from pipeline.run.status import format_task_plan, plan_files, task_plan

    as_json = "--json" in argv
    argv = [arg for arg in argv if arg != "--json"]
    # planning runs nothing, so it asks no scheduler (pipeline.run.scheduler)
    with CmdlineParser.global_instance(["--local-scheduler", "--module", "pipeline", "FullRun", *argv]) as parser:
        run = parser.get_task_obj()  # resolves and checks the plan: one line, exit 2
        planned = task_plan(run.requires())
        plan = {**run.run_plan.summary(), "plan": run.plan_id, "plan_files": plan_files(planned)}
        if as_json:
            plan["tasks"] = [
                {"task": f"{p.family}/{p.task.signature()}", "label": p.label(), "status": p.status, "reason": p.reason}
                for p in planned
            ]
            print(json.dumps(plan, indent=2, sort_keys=True, default=str))
            return 0
        print("\n".join([*plan_summary(plan), *format_task_plan(planned)]))
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"]:
        raise SystemExit(show_plan(argv[1:]))
    if argv[:1] == ["settings"]:
        from pipeline.run.settings_list import main as list_settings

        raise SystemExit(list_settings(argv[1:]))
    if argv[:1] == ["code-versions"]:
        import pipeline.tasks  # noqa: F401 - declares the code base the engine fingerprints
        from task_engine.code_identity import main as code_versions

        raise SystemExit(code_versions(argv[1:], prog="python -m pipeline code-versions"))
    if "--module" not in argv:
        argv = ["--module", "pipeline", *argv]
    try:
        luigi.retcodes.run_with_retcodes(argv)
    except SystemExit as exit_:
        raise SystemExit(judged_by_result(exit_.code, argv)) from None


if __name__ == "__main__":
    main()
