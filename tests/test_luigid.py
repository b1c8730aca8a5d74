"""Two FullRun processes sharing one central scheduler (``luigid``) and one run root, as two hosts would
(docs/scaling.md): every task runs once, in one of them, and the results equal a single process's run.

The two processes are started with ``python -m pipeline`` (``pipeline/__main__.py``), which judges a process by
the run's result: Luigi alone exits 10 (``already_running``, "run by another worker") or 25 (``not_run``) from a
process whose tasks the other one ran, even when the run finished; this entry point exits 0 then, when the root
task is complete. Both processes must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from pipeline import FullRun
from pipeline.tasks.report import all_upstream
from task_engine.task import META_FILE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
VARIANTS = ["ang_np_sym", "ours"]
SEEDS = [0]
RUN_TIMEOUT_S = 600
PYTHON_M_PIPELINE = (str(BIN / "python"), "-m", "pipeline")
LUIGI_COMMAND = (str(BIN / "luigi"), "--module", "pipeline")

# The package's default is the local scheduler unless one is named (--scheduler-host below would do); the file
# named by LUIGI_CONFIG_PATH says so explicitly, as a user's would (docs/scaling.md). keep_alive: a process with
# nothing runnable waits for the tasks other workers run instead of quitting; short waits keep the test quick;
# a failed task is retried only after luigid's retry_delay (15 min), so a process idle for 2 min gives up.
SHARED_CONFIG = """\
[core]
local_scheduler = false

[worker]
keep_alive = true
wait_interval = 0.2
wait_jitter = 0.3
max_keep_alive_idle_duration = 120 seconds
"""

# Luigi's execution-summary sections that mean something went wrong
FAILURE_SECTIONS = (
    "failed",
    "failed scheduling",
    "were missing external dependencies",
    "had failed dependencies",
    "had missing dependencies",
    "had dependencies whose scheduling failed",
)
SUMMARY_MARK = "===== Luigi Execution Summary ====="
SECTION_LINE = re.compile(r"^\s*\* (\d+) (.+):$")
FAMILY_LINE = re.compile(r"^\s*- (\d+) (\w+)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scheduler_api(port: int, method: str, **arguments) -> dict:
    query = urllib.parse.urlencode({"data": json.dumps(arguments)})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/{method}?{query}", timeout=5) as reply:
        return json.load(reply)["response"]


def stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def luigid(tmp_path):
    """A central scheduler on 127.0.0.1 at a free port, with its own state file and log; its port."""
    home = tmp_path / "luigid"
    (home / "log").mkdir(parents=True)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key != "LUIGI_CONFIG_PATH"}
    with open(home / "stdout.log", "wb") as output:
        process = subprocess.Popen(
            [str(BIN / "luigid"), "--address", "127.0.0.1", "--port", str(port)]
            + ["--state-path", str(home / "state.pickle"), "--logdir", str(home / "log")],
            cwd=home,  # not the repository: luigid reads no luigi.cfg of ours
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"luigid exited with {process.returncode}:\n{(home / 'stdout.log').read_text()}")
            try:
                scheduler_api(port, "task_list")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"luigid did not answer on port {port} within 30 s")
                time.sleep(0.1)
        yield port
    finally:
        stop(process)


def full_run(
    run_root: Path, log: Path, env: dict[str, str], *options: str, entry: tuple[str, ...] = PYTHON_M_PIPELINE
) -> subprocess.Popen:
    """``python -m pipeline FullRun`` (or ``entry``, e.g. Luigi's own command) on the smoke profile."""
    command = [*entry, "FullRun", "--profile", "smoke"]
    command += ["--run-root", str(run_root), "--variants", json.dumps(VARIANTS), "--seeds", json.dumps(SEEDS)]
    command += ["--protocol", "shared"]  # the shared grid: its graph is static (the tuned runs are dynamic)
    # the execution summary is logged at INFO; length 0 lists every task family
    command += ["--log-level", "INFO", "--execution-summary-summary-length", "0", *options]
    with open(log, "wb") as output:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)


def wait_all(processes: dict[str, subprocess.Popen], logs: dict[str, Path]) -> dict[str, int]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        for name, process in processes.items():
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} still running after {RUN_TIMEOUT_S} s:\n{tail(logs[name])}")
    finally:
        for process in processes.values():
            stop(process, grace_s=5)
    return {name: process.returncode for name, process in processes.items()}


def tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def execution_summary(log: Path) -> dict[str, Counter]:
    """One process's Luigi execution summary: tasks by family, per section ("ran successfully", ...)."""
    text = log.read_text(errors="replace")
    assert text.count(SUMMARY_MARK) == 2, f"no execution summary in {log.name}:\n{tail(log)}"
    sections: dict[str, Counter] = {}
    current = None
    for line in text.split(SUMMARY_MARK)[1].splitlines():
        if match := SECTION_LINE.match(line):
            current = sections.setdefault(match.group(2), Counter())
        elif (match := FAMILY_LINE.match(line)) and current is not None:
            current[match.group(2)] += int(match.group(1))
    return sections


def expected_tasks(run_root: Path) -> list:
    """Every task of the FullRun: its HashedTasks (each writes one output directory)."""
    task = FullRun(profile="smoke", run_root=str(run_root), variants=VARIANTS, seeds=SEEDS, protocol="shared")
    return all_upstream(task)


def meta_files(run_root: Path) -> set[str]:
    return {path.relative_to(run_root).as_posix() for path in run_root.rglob(META_FILE)}


def evaluations(run_root: Path) -> dict[tuple[str, str], bytes]:
    """Evaluate's metrics.json by (variant, seed), as written."""
    found = {}
    for meta_path in run_root.glob(f"Evaluate/*/{META_FILE}"):
        params = json.loads(meta_path.read_text())["params"]
        found[(params["variant"], params["seed"])] = (meta_path.parent / "metrics.json").read_bytes()
    return found


TIMING_KEY = re.compile(r"seconds|wall_time|per_second")


def without_timings(value):
    """report.json without the wall times and speeds, which differ from run to run."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not TIMING_KEY.search(k)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def without_run_root(text: str, run_root: Path) -> str:
    """A report with its run root's path (in the closing ``crossmodal serve`` command) written as ``<run root>``."""
    return text.replace(str(run_root.resolve()), "<run root>").replace(str(run_root), "<run root>")


def mask_timings(markdown: str) -> str:
    """report.md with the cells of its ``... (s)`` columns and its ``*seconds*: ``/``*wall_time*: `` lines
    masked."""
    lines, timed, in_table = [], set(), False
    for line in markdown.splitlines():
        cells = line.strip().strip("|").split("|")
        if not line.startswith("|"):
            in_table = False
            key = line.split(":")[0]
            if TIMING_KEY.search(key):
                line = f"{key}: #"
        elif not in_table:  # a table's header row
            in_table = True
            timed = {i for i, cell in enumerate(cells) if cell.strip().endswith(" (s)")}
        else:
            line = "|".join("#" if i in timed else cell for i, cell in enumerate(cells))
        lines.append(line)
    return "\n".join(lines)


def test_two_processes_on_one_luigid_run_each_task_once_and_match_a_single_process(tmp_path, luigid):
    shared, alone = tmp_path / "shared", tmp_path / "alone"
    config = tmp_path / "shared.cfg"
    config.write_text(SHARED_CONFIG)
    base_env = {key: value for key, value in os.environ.items() if key != "LUIGI_CONFIG_PATH"}
    base_env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    shared_env = {**base_env, "LUIGI_CONFIG_PATH": str(config)}
    scheduler = ["--scheduler-host", "127.0.0.1", "--scheduler-port", str(luigid)]
    logs = {name: tmp_path / f"{name}.log" for name in ("host-a", "host-b", "alone", "check")}

    # two "hosts" (their own pid-lock folders, one worker each) and, beside them, a single local-scheduler run
    processes = {
        host: full_run(
            shared,
            logs[host],
            shared_env,
            *scheduler,
            "--workers",
            "1",
            "--lock-pid-dir",
            str(tmp_path / host),
        )
        for host in ("host-a", "host-b")
    }
    processes["alone"] = full_run(
        alone, logs["alone"], base_env, "--lock-pid-dir", str(tmp_path / "alone-lock"), entry=LUIGI_COMMAND
    )
    statuses = wait_all(processes, logs)

    tasks = expected_tasks(shared)
    expected_families = Counter(task.get_task_family() for task in tasks) + Counter({"FullRun": 1})
    expected_outputs = {f"{task.get_task_family()}/{task.signature()}/{META_FILE}" for task in tasks}

    assert statuses["alone"] == 0, tail(logs["alone"])
    summaries = {host: execution_summary(logs[host]) for host in ("host-a", "host-b")}
    for host, summary in summaries.items():
        assert statuses[host] == 0, f"{host} exited {statuses[host]}:\n{tail(logs[host])}"
        failures = {section: summary[section] for section in FAILURE_SECTIONS if section in summary}
        assert not failures, f"{host}: {failures}\n{tail(logs[host])}"
        assert summary.get("ran successfully"), (
            f"{host} ran nothing: the work was not shared\n{tail(logs[host])}"
        )

    # each task ran exactly once, in one of the two processes (a task run twice would be counted twice)
    ran = summaries["host-a"]["ran successfully"] + summaries["host-b"]["ran successfully"]
    assert ran == expected_families, (ran, expected_families)
    # one complete output per task, nothing half-written, and the single process wrote the same set
    assert meta_files(shared) == expected_outputs
    assert not list(shared.rglob("*.partial")), "an unfinished output directory is left"
    assert meta_files(alone) == expected_outputs
    # luigid saw every task done, none failed
    done = scheduler_api(luigid, "task_list", status="DONE")
    assert len(done) == len(tasks) + 1, sorted(done)
    assert not scheduler_api(luigid, "task_list", status="FAILED")

    # Luigi's own command, run again on the shared run, finds everything done (exit 0, nothing run)
    check = full_run(
        shared,
        logs["check"],
        shared_env,
        *scheduler,
        "--lock-pid-dir",
        str(tmp_path / "check"),
        entry=LUIGI_COMMAND,
    )
    assert wait_all({"check": check}, logs) == {"check": 0}, tail(logs["check"])
    assert "ran successfully" not in execution_summary(logs["check"])

    # the same results as the single process: metrics byte for byte, the report but for its wall times
    shared_metrics, alone_metrics = evaluations(shared), evaluations(alone)
    assert set(shared_metrics) == {(variant, str(seed)) for variant in VARIANTS for seed in SEEDS}
    assert shared_metrics == alone_metrics
    report = expected_tasks(shared)[-1]
    assert report.get_task_family() == "Report"
    relative = report.output_dir().relative_to(shared)
    shared_json, alone_json = (
        json.loads(without_run_root((root / relative / "report.json").read_text(), root))
        for root in (shared, alone)
    )
    assert without_timings(shared_json) == without_timings(alone_json)
    shared_md, alone_md = (
        without_run_root((root / relative / "report.md").read_text(), root) for root in (shared, alone)
    )
    assert mask_timings(shared_md) == mask_timings(alone_md)
