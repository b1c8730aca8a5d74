"""The package's Luigi defaults lie beneath every setting of the user's (pipeline/run/luigi_defaults.py), a
working folder cannot shadow the packages under ``python -m`` (pipeline/run/import_path.py), and a central
scheduler that is not there is one line (pipeline/run/scheduler.py, pipeline/run/failures.py). End to end, from
an installed wheel: tests/test_installed.py."""

from __future__ import annotations

import http.server
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from luigi.configuration import LuigiConfigParser, LuigiTomlParser
from luigi.rpc import RPCError

from pipeline.run.failures import OneLineInputErrors
from pipeline.run.import_path import SOURCE_ROOT, working_folder_first
from pipeline.run.luigi_defaults import DEFAULTS_FILE, apply_package_defaults, package_defaults
from pipeline.run.scheduler import unreachable
from task_engine.processes import child_environment

USER_FILE = """\
[core]
workers = 1
log_level = INFO

[resources]
gpu = 4

[retcode]
task_failed = 3
"""


def user_config(tmp_path: Path, text: str) -> LuigiConfigParser:
    """A fresh parser that has read one file of the user's, as Luigi's would have before ``pipeline`` is
    imported."""
    path = tmp_path / "luigi.cfg"
    path.write_text(text)
    config = LuigiConfigParser()
    config.read([str(path)])
    return config


def values(config: LuigiConfigParser) -> dict[tuple[str, str], str]:
    return {(section, key): value for section in config.sections() for key, value in config.items(section, raw=True)}


def test_the_defaults_lose_to_a_user_file_exactly_as_an_earlier_luigi_file_would(tmp_path):
    """Reference: Luigi itself reading the package's file first and the user's after it."""
    config = user_config(tmp_path, USER_FILE)
    applied = apply_package_defaults(config, argv=[])
    reference = LuigiConfigParser()
    reference.read([str(DEFAULTS_FILE), str(tmp_path / "luigi.cfg")])
    assert values(config) == values(reference)
    assert config.getint("core", "workers") == 1 and config.getint("retcode", "task_failed") == 3
    assert config.getint("retcode", "missing_data") == 20 and config.getboolean("core", "local_scheduler")
    assert "core.workers" not in applied and "retcode.not_run" in applied


def test_a_dashed_spelling_of_the_user_s_wins_over_the_package_s_key(tmp_path):
    """Luigi reads ``keep_alive`` before ``keep-alive``: an underscored key of ours must not hide the user's."""
    config = user_config(tmp_path, "[worker]\nkeep-alive = true\n[core]\nlog-level = DEBUG\n")
    apply_package_defaults(config, argv=[])
    assert config.getboolean("worker", "keep_alive") is True
    assert config.get("core", "log_level") == "DEBUG"


@pytest.mark.parametrize(
    ("text", "argv", "local"),
    [
        ("", [], True),  # nothing named: the local scheduler
        ("[core]\ndefault_scheduler_host = scheduler.example\n", [], None),
        ("[core]\ndefault-scheduler-url = http://scheduler.example:8082/\n", [], None),
        ("", ["FullRun", "--scheduler-host", "scheduler.example"], None),
        ("", ["FullRun", "--scheduler-port=8083"], None),
        ("[core]\nlocal_scheduler = false\n", [], False),
        ("[core]\nlocal_scheduler = true\ndefault_scheduler_host = scheduler.example\n", [], True),
    ],
)
def test_naming_a_central_scheduler_withdraws_the_local_default(tmp_path, text, argv, local):
    """None: ``local_scheduler`` is left unset, so Luigi's own default (the central scheduler) applies."""
    config = user_config(tmp_path, text)
    apply_package_defaults(config, argv=argv)
    assert config.getboolean("core", "local_scheduler", None) is local


def test_under_the_toml_parser_the_defaults_keep_toml_types():
    config = LuigiTomlParser()
    config.data = {"core": {"workers": 3}}
    apply_package_defaults(config, argv=[])
    assert config.data["core"]["workers"] == 3
    assert config.data["core"]["local_scheduler"] is True
    assert config.data["network_tasks"]["slots_per_gpu"] == 4 and config.data["retcode"]["task_failed"] == 30
    assert config.data["core"]["log_level"] == "WARNING"


def test_the_defaults_file_holds_what_the_docs_promise():
    defaults = package_defaults()
    assert defaults.getint("core", "workers") == 2 and defaults.getint("network_tasks", "slots_per_gpu") == 4
    assert not defaults.has_section("resources"), "[resources] gpu follows the host's GPUs (task_engine.gpus)"
    exit_statuses = {key: defaults.getint("retcode", key) for key in defaults.options("retcode")}
    assert exit_statuses == {
        "unhandled_exception": 4,
        "already_running": 10,
        "missing_data": 20,
        "not_run": 25,
        "task_failed": 30,
        "scheduling_error": 35,
    }


@pytest.mark.parametrize(
    ("argv", "first", "moved"),
    [
        (["-m"], "cwd", True),  # python -m pipeline in a folder of the user's
        (["-m"], "", True),
        (["-m"], "source", False),  # python -m pipeline in the repository
        (["/venv/bin/luigi"], "cwd", False),  # a console script: the working folder is not on the path
        (["-c"], "cwd", False),
    ],
)
def test_only_python_m_outside_the_repository_moves_the_working_folder(tmp_path, argv, first, moved):
    cwd = str(SOURCE_ROOT) if first == "source" else str(tmp_path)
    path = [cwd if first in ("cwd", "source") else "", "/usr/lib/python3.11", "/venv/site-packages"]
    assert working_folder_first(argv, path, cwd) is moved


def test_child_processes_outside_the_repository_get_no_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert child_environment({"A": "1"}) == {"A": "1", "PYTHONSAFEPATH": "1"}
    monkeypatch.chdir(SOURCE_ROOT)
    assert child_environment({"A": "1"}) == {"A": "1"}


@pytest.mark.slow
def test_a_child_process_in_a_folder_with_a_pipeline_py_still_runs_the_package_s(tmp_path, monkeypatch):
    """What the engine starts (the server of network tasks, ``python -m task_engine.fork_server``; torchrun's
    ``python -m pipeline...``) in a user's folder holding a ``pipeline.py`` and a ``task_engine.py``: without the
    working folder on its path (``PYTHONSAFEPATH``) the child imports the packages, not those files."""
    for name in ("pipeline", "task_engine"):
        (tmp_path / f"{name}.py").write_text(f"raise RuntimeError('the user s {name}.py was imported')\n")
    monkeypatch.chdir(tmp_path)
    command = [sys.executable, "-m", "task_engine.fork_server", "--help"]
    result = subprocess.run(command, env=child_environment(os.environ), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "--preload" in result.stdout, result.stderr


@pytest.mark.slow
def test_python_m_pipeline_in_a_folder_with_a_common_py_uses_the_package_s(tmp_path):
    """The real thing in this environment: a ``common.py`` beside ``python -m pipeline`` that raises on import."""
    (tmp_path / "common.py").write_text("raise RuntimeError('the user s common.py was imported')\n")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "plan", "--profile", "smoke", "--run-root", str(tmp_path / "runs")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Report" in result.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_scheduler_probe_tells_nothing_listening_from_a_server():
    assert "refused" in unreachable(f"http://127.0.0.1:{free_port()}/", attempts=2, wait_s=0.01, timeout_s=2)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert unreachable(f"http://127.0.0.1:{server.server_port}/", attempts=1, timeout_s=5) is None
    finally:
        server.shutdown()
    assert unreachable("http+unix://%2Fvar%2Frun%2Fluigid.sock/", attempts=1) is None  # Luigi's own finds out


def rpc_record(message: str) -> logging.LogRecord:
    try:
        raise RPCError("Errors (3 attempts) when connecting to remote scheduler 'http://localhost:8082'", OSError())
    except RPCError:
        return logging.LogRecord("luigi-interface", logging.ERROR, __file__, 1, message, (), sys.exc_info())


def test_a_lost_scheduler_is_one_line_not_two_tracebacks():
    one_line = OneLineInputErrors()
    assert one_line.filter(rpc_record("Luigi unexpected framework error while scheduling %s")) is False
    record = rpc_record("Uncaught exception in luigi")
    assert one_line.filter(record) is True
    text = logging.Formatter("%(levelname)s: %(message)s").format(record)
    assert text.count("\n") == 0 and "Traceback" not in text
    assert text.startswith("ERROR: Errors (3 attempts) when connecting to remote scheduler 'http://localhost:8082'")
    retry = logging.LogRecord("luigi-interface", logging.WARNING, __file__, 1, "Failed connecting", (), (None, None, None))
    assert one_line.filter(retry) and logging.Formatter().format(retry) == "Failed connecting"
