"""The package as a user gets it: a wheel built from this checkout, installed into an environment of its own and
run from folders that are not the repository (docs/usage.md, "Installed or cloned").

The environment reuses this one's installed dependencies (a ``.pth`` line naming this environment's
site-packages; nothing is downloaded) but not this checkout: the editable install's finder is not loaded there,
so every module comes from the wheel. From an empty folder, and from one holding a ``common.py``, ``models.py``
and ``evaluation.py`` that raise on import, the documented commands keep their exit statuses and their one-line
errors; a ``luigi.cfg`` of the user's wins over the package's defaults.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "pipeline", "models", "data_recipes", "evaluation", "serving", "task_engine")
RUN_TIMEOUT_S = 1800
SHADOWING_MODULES = ("common", "models", "evaluation")
#: a console script like the one pip writes for ``luigi``, for the new environment's interpreter
LUIGI_SCRIPT = "#!{python}\nimport sys\nfrom luigi.cmdline import luigi_run\nsys.exit(luigi_run())\n"
#: Luigi's settings as a run in the working folder would see them
SHOW_SETTINGS = """\
import json, sys
import pipeline
import luigi.interface, luigi.retcodes
from luigi.cmdline_parser import CmdlineParser
with CmdlineParser.global_instance(["--module", "pipeline", "FullRun", *sys.argv[1:]]):
    core, retcodes = luigi.interface.core(), luigi.retcodes.retcode()
    print(json.dumps({"workers": core.workers, "local_scheduler": core.local_scheduler,
                      "task_failed": retcodes.task_failed, "pipeline": pipeline.__file__}))
"""


class Installed:
    """The throwaway environment: its ``bin`` folder, site-packages and the wheel it was installed from."""

    def __init__(self, bin_dir: Path, site_packages: Path, wheel: Path) -> None:
        self.bin, self.site_packages, self.wheel = bin_dir, site_packages, wheel

    def run(self, command: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``command`` (``luigi``, ``crossmodal``, ``crossmodal-pipeline`` or ``python``) of the environment."""
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LUIGI_CONFIG_PATH", "PYTHONSAFEPATH")}
        return subprocess.run(
            [str(self.bin / command), *args],
            cwd=cwd,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )


def source_copy(destination: Path) -> Path:
    """The checkout's packages, tests and benchmarks, pyproject.toml and README.md, without caches: the wheel is
    built from it, so the build writes nothing into the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for entry in ROOT.iterdir():
        if (entry / "__init__.py").exists():
            shutil.copytree(entry, destination / entry.name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    work = tmp_path_factory.mktemp("installed")
    source = source_copy(work / "source")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work / "wheel"), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "wheel").glob("crossmodal_neighborhoods-*.whl")

    env = work / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=300)
    python = env / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    # this environment's dependencies (pip among them), after the new environment's own site-packages
    (site_packages / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps", "--no-index",
         "--ignore-installed", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    luigi = env / "bin" / "luigi"
    luigi.write_text(LUIGI_SCRIPT.format(python=python))
    luigi.chmod(0o755)
    return Installed(env / "bin", site_packages, wheel)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """An empty folder; one whose common.py, models.py and evaluation.py raise on import; a bad pairs table."""
    base = tmp_path_factory.mktemp("folders")
    empty, shadowing = base / "empty", base / "shadowing"
    empty.mkdir()
    shadowing.mkdir()
    for name in SHADOWING_MODULES:
        (shadowing / f"{name}.py").write_text(f"raise RuntimeError('the user s own {name}.py was imported')\n")
    table = base / "no_text_column.csv"
    table.write_text("image_path,caption\na.png,a caption in a column of another name\n")
    return {"empty": empty, "shadowing": shadowing, "table": table, "runs": base / "runs"}


def error_lines(result: subprocess.CompletedProcess, prefix: str) -> list[str]:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return [line for line in (result.stdout + result.stderr).splitlines() if line.startswith(prefix)]


def test_the_wheel_holds_every_file_of_the_packages_and_nothing_of_the_tests(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    in_checkout = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert in_checkout - names == set()
    for needed in ("pipeline/tasks/code_versions.json", "pipeline/run/luigi_defaults.cfg", "serving/static/index.html"):
        assert needed in names
    assert any(name.startswith("data_recipes/embedded/") for name in names)
    assert not [name for name in names if name.split("/")[0] in ("tests", "benchmarks")]
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "crossmodal = serving.cli:main" in scripts and "crossmodal-pipeline = pipeline.__main__:main" in scripts


def test_the_environment_runs_the_wheel_not_the_checkout(installed, folders):
    probe = "import common, pipeline, serving, task_engine; print(pipeline.__file__, common.__file__, serving.__file__, task_engine.__file__)"
    result = installed.run("python", "-c", probe, cwd=folders["empty"])
    assert result.returncode == 0, result.stderr
    assert all(Path(path).is_relative_to(installed.site_packages) for path in result.stdout.split())
    assert installed.run("python", "-c", "import tests", cwd=folders["empty"]).returncode != 0


@pytest.mark.parametrize("folder", ["empty", "shadowing"])
def test_the_documented_commands_from_a_folder_of_the_user_s(installed, folders, folder):
    """The second folder reuses the first's run root: its FullRun finds everything done."""
    cwd, runs, table = folders[folder], folders["runs"], folders["table"]
    smoke = ("FullRun", "--profile", "smoke", "--run-root", str(runs))

    run = installed.run("luigi", "--module", "pipeline", *smoke, cwd=cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = runs.glob("Report/*/report.md")
    assert f"Report: {report.resolve()}" in run.stdout
    assert "Traceback" not in run.stderr

    bad_table = ("--dataset", "pairs", "--raw-dir", str(table), "--run-root", str(runs / "bad"))
    for command in (("luigi", "--module", "pipeline"), ("python", "-m", "pipeline")):
        failed = installed.run(*command, "FullRun", "--profile", "smoke", *bad_table, cwd=cwd)
        assert failed.returncode == 30, failed.stdout + failed.stderr
        (line,) = error_lines(failed, "ERROR:")
        assert line.startswith("ERROR: PrepareShard failed:") and "lacks column(s) ['text']" in line

    bad_set = installed.run("luigi", "--module", "pipeline", *smoke, "--set", "neighbors.kk=1", cwd=cwd)
    assert bad_set.returncode == 2, bad_set.stdout + bad_set.stderr
    assert error_lines(bad_set, "error:") == [
        "error: neighbors has no setting 'kk' (did you mean 'k'?); valid: k, n_trees, recall_queries, sample_k, "
        "search_k (python -m pipeline settings lists every path)"
    ]

    plan = installed.run("python", "-m", "pipeline", "plan", "--profile", "smoke", "--run-root", str(runs), cwd=cwd)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "Report" in plan.stdout and "Traceback" not in plan.stderr

    help_ = installed.run("crossmodal", "--help", cwd=cwd)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: crossmodal"), help_.stderr


def test_a_luigi_cfg_of_the_user_s_wins_over_the_package_s(installed, folders, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "luigi.cfg").write_text("[core]\nworkers = 1\n\n[retcode]\ntask_failed = 3\n")

    def settings(cwd: Path, *flags: str) -> dict:
        result = installed.run("python", "-c", SHOW_SETTINGS, *flags, cwd=cwd)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    package = settings(folders["empty"])
    assert (package["workers"], package["local_scheduler"], package["task_failed"]) == (2, True, 30)
    assert Path(package["pipeline"]).is_relative_to(installed.site_packages)
    assert (settings(own)["workers"], settings(own)["task_failed"]) == (1, 3)
    assert settings(own, "--workers", "3")["workers"] == 3  # a flag wins over both files

    # the exit status a run returns is the user's too
    bad_table = ("--dataset", "pairs", "--raw-dir", str(folders["table"]), "--run-root", str(tmp_path / "runs"))
    failed = installed.run("luigi", "--module", "pipeline", "FullRun", "--profile", "smoke", *bad_table, cwd=own)
    assert failed.returncode == 3, failed.stdout + failed.stderr


def test_a_central_scheduler_that_is_not_there_is_one_line_and_exit_4(installed, folders):
    """``--scheduler-host`` alone selects the central scheduler (no file of the user's); nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = installed.run(
        "luigi", "--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", str(folders["runs"]),
        "--scheduler-host", "127.0.0.1", "--scheduler-port", str(port), cwd=folders["empty"],
    )  # fmt: skip
    assert result.returncode == 4, result.stdout + result.stderr
    (line,) = error_lines(result, "error:")
    assert line.startswith(f"error: no Luigi scheduler answers at http://127.0.0.1:{port}/")
    assert result.stdout == "", "nothing scheduled, nothing drawn"


def test_a_pipeline_py_of_the_user_s_leaves_the_console_scripts_working(installed, folders, tmp_path):
    """``python -m pipeline`` runs a ``pipeline.py`` beside it (Python's rule, docs/usage.md); the console
    scripts, the ``luigi`` command among them, do not look there."""
    for name in ("pipeline", "serving", "data_recipes"):
        (tmp_path / f"{name}.py").write_text(f"raise RuntimeError('the user s own {name}.py was imported')\n")
    runs = str(folders["runs"])
    plan = installed.run("crossmodal-pipeline", "plan", "--profile", "smoke", "--run-root", runs, cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    run = installed.run("luigi", "--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", runs, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in plan.stderr + run.stderr
