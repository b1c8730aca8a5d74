"""How a task that fails on the user's input is reported: one ``ERROR:`` line naming the task and what to fix,
instead of Luigi's 30-line traceback (kept for everything else, where it is what a developer needs).

Luigi's worker logs a failed task with ``logger.exception`` on the ``luigi-interface`` logger; the filter
below rewrites those records when the exception is one of :data:`INPUT_ERRORS`, whose messages already say
what is wrong and how to fix it. The exit status is unchanged (``[retcode] task_failed``,
pipeline/run/luigi_defaults.cfg).

A central scheduler that stops answering is one line too: Luigi logs the ``RPCError`` twice with its traceback
("unexpected framework error while scheduling", then "Uncaught exception in luigi", exit ``[retcode]
unhandled_exception``); the first is dropped and the second says which scheduler and what to do. Luigi's note
of each retry keeps its line, without the ``NoneType: None`` it adds (it logs ``exc_info`` outside an
``except``). A FullRun asks the scheduler before any work (:mod:`pipeline.run.scheduler`).
"""

from __future__ import annotations

import logging

from luigi.rpc import RPCError

from common.bounded_json import BoundedJsonError
from common.run_folder import RunFolderError
from data_recipes.manifest import ManifestError
from data_recipes.validate import RejectBudgetExceeded
from models.record_check import ModelRecordError
from pipeline.config.checks import RunConfigurationError
from pipeline.engine.outputs import DiskFullError

#: failures caused by the input or the machine, not by a bug: a schema problem, too many rejected rows, a full
#: disk, a bad name, a raw folder that is not there, a model record edited or damaged since training, a JSON file
#: beyond the bounds it is read within (a raw annotation file nested thousands deep), a run folder's file damaged
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ManifestError,
    BoundedJsonError,
    RunFolderError,
    ModelRecordError,
    RejectBudgetExceeded,
    DiskFullError,
    RunConfigurationError,
    FileNotFoundError,
)
LUIGI_LOGGER = "luigi-interface"
#: the record of an error met while scheduling; Luigi raises it again and logs it once more as uncaught
SCHEDULING_ERROR = "unexpected framework error while scheduling"


class OneLineInputErrors(logging.Filter):
    """Turns the worker's ``failed <task>`` record for an input error into ``<Family> failed: <message>``, and a
    scheduler's ``RPCError`` into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info == (None, None, None):
            record.exc_info = None  # "exc_info=True" outside an except: nothing to show
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RPCError):
            return self.one_line_scheduler_error(record, error)
        if isinstance(error, INPUT_ERRORS) and "failed" in str(record.msg):
            task = record.args[-1] if isinstance(record.args, tuple) and record.args else None
            family = getattr(task, "task_family", "a task")
            record.msg = "%s failed: %s"
            record.args = (family, " ".join(str(error).split()))
            record.exc_info = None
            record.exc_text = None
        return True

    @staticmethod
    def one_line_scheduler_error(record: logging.LogRecord, error: RPCError) -> bool:
        if SCHEDULING_ERROR in str(record.msg):
            return False  # said once, as the uncaught exception that follows
        record.msg = "%s; is luigid running there? Rerun when it is (done tasks are kept), or with --local-scheduler"
        record.args = (" ".join(str(error.args[0] if error.args else error).split()),)
        record.exc_info = None
        record.exc_text = None
        return True


def install_one_line_input_errors() -> None:
    """Add the filter to Luigi's logger once (importing ``pipeline`` does this)."""
    logger = logging.getLogger(LUIGI_LOGGER)
    if not any(isinstance(f, OneLineInputErrors) for f in logger.filters):
        logger.addFilter(OneLineInputErrors())
