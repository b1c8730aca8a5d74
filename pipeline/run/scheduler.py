"""A run pointed at a central scheduler (``luigid``) asks it once, before any work, whether it answers.

Without this, Luigi finds out at its first request: it retries each request 3 times 30 s apart
(``[core] rpc-retry-attempts``, ``rpc-retry-wait``), so a scheduler that is not there costs about two minutes
and ends in an ``RPCError`` traceback with exit status 4. ``FullRun`` started from the command line calls
:func:`check_scheduler` when Luigi's settings select the central scheduler: nothing answering at its URL after
:data:`PROBE_ATTEMPTS` tries :data:`PROBE_WAIT_S` apart (each waiting up to ``[core] rpc-connect-timeout``,
10 s by default) is one ``error:`` line and ``[retcode] unhandled_exception`` (4). A scheduler lost later in a
run is Luigi's retry, then one line too (:mod:`pipeline.run.failures`).
"""

from __future__ import annotations

import functools
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import luigi.configuration
import luigi.interface
import luigi.retcodes
from luigi.cmdline_parser import CmdlineParser

PROBE_ATTEMPTS = 3
PROBE_WAIT_S = 5.0


def scheduler_url(env: luigi.interface.core) -> str:
    """The URL Luigi will send its requests to (its rule: ``--scheduler-url``, else host and port)."""
    if env.scheduler_url != "":
        return env.scheduler_url
    return f"http://{env.scheduler_host}:{env.scheduler_port:d}/"


def unreachable(
    url: str, attempts: int = PROBE_ATTEMPTS, wait_s: float = PROBE_WAIT_S, timeout_s: float | None = None
) -> str | None:
    """Why nothing answers HTTP at ``url`` after ``attempts`` tries ``wait_s`` apart; None when something does
    (any HTTP status: ``luigid`` answers ``/`` with a redirect to its page)."""
    if urlsplit(url).scheme not in ("http", "https"):
        return None  # e.g. http+unix://: Luigi's own requests find out
    if timeout_s is None:
        timeout_s = luigi.configuration.get_config().getfloat("core", "rpc-connect-timeout", 10.0)
    reason = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(wait_s)
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):
                return None
        except urllib.error.HTTPError:
            return None
        except OSError as error:  # URLError (refused, unknown host) and timeouts
            reason = str(getattr(error, "reason", error))
    return reason


@functools.cache
def _unreachable_once(url: str) -> str | None:
    """:func:`unreachable`, asked once per process (FullRun is built again when ``python -m pipeline`` judges
    the result)."""
    return unreachable(url)


def check_scheduler() -> None:
    """On the ``luigi``/``python -m pipeline`` command line, with the central scheduler: one ``error:`` line and
    exit ``[retcode] unhandled_exception`` when nothing answers at its URL. Nothing from code (``luigi.build``)."""
    if CmdlineParser.get_instance() is None:
        return
    env = luigi.interface.core()
    if env.local_scheduler:
        return
    url = scheduler_url(env)
    reason = _unreachable_once(url)
    if reason is None:
        return
    print(
        f"error: no Luigi scheduler answers at {url} ({PROBE_ATTEMPTS} tries {PROBE_WAIT_S:g} s apart: {reason}); "
        "start luigid there, point the run at yours (--scheduler-host, --scheduler-port, or [core] "
        "default_scheduler_host in your luigi.cfg), or run on this host alone with --local-scheduler (docs/scaling.md)",
        file=sys.stderr,
    )
    raise SystemExit(luigi.retcodes.retcode().unhandled_exception)
