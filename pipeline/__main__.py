"""``python -m pipeline FullRun ...``: the ``luigi --module pipeline FullRun ...`` command, judged by its result.

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


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--module" not in argv:
        argv = ["--module", "pipeline", *argv]
    try:
        luigi.retcodes.run_with_retcodes(argv)
    except SystemExit as exit_:
        raise SystemExit(judged_by_result(exit_.code, argv)) from None


if __name__ == "__main__":
    main()
