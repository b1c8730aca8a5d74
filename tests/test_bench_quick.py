"""Every benchmark script the docs cite runs in the normal suite, in its quick mode (issue 47, item 7): the
scripts that make their own inputs here (synthetic batches, galleries, generated data), each through its
``main`` with the documented ``--quick`` flag, in this process (a script started as a child process would
import torch and the pipeline again, ~10 s each on two busy cores). What is checked is that the script runs
and that its output has the shape and the invariants its docs state; no speed is asserted (speed is
measured in ``benchmarks/``). The scripts that read a run root are in tests/test_bench_run_root.py,
bench_scaling.py in tests/test_bench_scaling.py. Every cited script is also started as the docs start it,
``python benchmarks/<name>.py --help``, so an import that works only in this process fails here too.

A quick run writes no file under ``benchmarks/results/`` unless told where (``--out``/``--json``): the
committed results stay the full runs'.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
# the scripts import one another by bare name, as they do when run as ``python benchmarks/x.py``
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

#: each script a doc cites (``benchmarks/<name>.py``) and the test module running its quick mode
QUICK_TESTS = {
    "angular_study": "test_bench_run_root.py",
    "bench_audit": "test_bench_run_root.py",
    "bench_child_start": "test_bench_quick.py",
    "bench_dedup": "test_bench_quick.py",
    "bench_epoch": "test_bench_quick.py",
    "bench_gru": "test_bench_quick.py",
    "bench_losses": "test_bench_quick.py",
    "bench_neighbor_recall": "test_bench_run_root.py",
    "bench_pq_stages": "test_bench_quick.py",
    "bench_scaling": "test_bench_scaling.py",
    "bench_search": "test_bench_quick.py",
    "bench_step_sync": "test_bench_quick.py",
    "bench_train_throughput": "test_bench_quick.py",
    "bench_trunk_cost": "test_bench_quick.py",
    "bench_trunk_resolution": "test_bench_quick.py",
    "bf16_check": "test_gpu_check.py",
    "compare_evaluations": "test_bench_run_root.py",
    "compare_run_roots": "test_bench_run_root.py",
    "embedded_guessability": "test_bench_quick.py",
    "gpu_check": "test_bench_quick.py",
    "gpu_host_wheels": "test_bench_quick.py",
    "make_pairs_table": "test_bench_quick.py",
    "selection_metric_study": "test_bench_run_root.py",
    "trunk_stages_study": "test_bench_run_root.py",
    "tuning_stability": "test_bench_run_root.py",
}


def cited_scripts() -> set[str]:
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "datasets").glob("*.md")]
    return {name for doc in docs for name in re.findall(r"benchmarks/(\w+)\.py", doc.read_text())}


def test_every_script_the_docs_cite_has_a_quick_test():
    cited = cited_scripts()
    assert cited, "no benchmarks/<name>.py found in the docs: the pattern is wrong"
    assert cited <= set(QUICK_TESTS), f"cited without a quick test: {sorted(cited - set(QUICK_TESTS))}"
    for name, module in QUICK_TESTS.items():
        assert (BENCHMARKS / f"{name}.py").exists(), name
        assert name in (ROOT / "tests" / module).read_text(), f"{module} does not run {name}"


#: one child process imports the libraries once, then forks per script and runs it as ``python benchmarks/<name>.py
#: --help`` would: its own folder first on ``sys.path``, the repository root not on it, no ``benchmarks`` imported
STARTS_AS_A_SCRIPT = """
import io, os, runpy, sys
from pathlib import Path
import faiss, luigi, numpy, pandas, torch  # noqa: F401 - imported once, before the forks
import pipeline, serving.bundle, evaluation.statistics, data_recipes  # noqa: F401
folder, failed = Path(sys.argv[1]), []
for name in sys.argv[2:]:
    pid = os.fork()
    if pid == 0:
        # as ``python <script>``: the script's folder first, the repository root (cwd, PYTHONPATH) nowhere
        sys.path = [str(folder)] + [p for p in sys.path[1:] if Path(p or ".").resolve() != folder.parent]
        for module in [m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")]:
            del sys.modules[module]
        sys.argv, sys.stdout = [str(folder / f"{name}.py"), "--help"], io.StringIO()
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = stop.code or 0
        except BaseException as error:  # noqa: BLE001 - reported by name
            print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        failed.append(name)
print(" ".join(failed))
"""


@pytest.mark.slow
def test_every_cited_script_starts_as_a_script():
    """``python benchmarks/<name>.py --help`` for every cited script: its imports resolve as a script's do
    (the tests below call ``main`` in this process, where the repository root is importable anyway)."""
    import subprocess

    names = sorted(QUICK_TESTS)
    done = subprocess.run(
        [sys.executable, "-c", STARTS_AS_A_SCRIPT, str(BENCHMARKS), *names],
        cwd=ROOT / "tests",  # not the repository root, which ``-c`` would put on sys.path
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [], f"not started as scripts: {done.stdout.strip()}\n{done.stderr[-3000:]}"


def script(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.{name}")


def results_files() -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in RESULTS.rglob("*")}


@pytest.fixture(autouse=True)
def untouched_results_and_threads(monkeypatch, tmp_path):
    """Each script runs in a scratch working directory (a relative default path would land there), leaves
    ``benchmarks/results`` as it was, and gets the torch thread count it may change restored."""
    before, threads = results_files(), torch.get_num_threads()
    monkeypatch.chdir(tmp_path)
    yield
    torch.set_num_threads(threads)
    assert results_files() == before, "a quick run wrote under benchmarks/results"
    assert not (tmp_path / "benchmarks").exists(), "a quick run wrote its default results file"


def test_bench_epoch_quick():
    result = script("bench_epoch").main(["--quick"])
    cases = {"ang_np_sym/in_batch", "ours/in_batch", "ours/extra_rows"}
    assert result["pairs_per_epoch"] == 128 and set(result["seconds"]) == cases
    assert all(len(times) == 1 and times[0] > 0 for times in result["seconds"].values())
    assert result["ratio_vs_baseline"]["ang_np_sym/in_batch"] == 1.0


@pytest.mark.slow
def test_bench_trunk_cost_quick():
    result = script("bench_trunk_cost").main(["--quick"])
    assert [(row["image_size"], row["stages"]) for row in result["rows"]] == [(96, 0), (96, 1)]
    frozen, top1 = result["rows"]
    assert frozen["x_frozen"] == 1.0 and top1["x_frozen"] > 0 and top1["map"] == [192, 3, 3]
    assert all(row["epoch_cpu_seconds"] > 0 and row["cache_cpu_ms_per_image"] > 0 for row in result["rows"])


@pytest.mark.slow
def test_bench_child_start_quick(monkeypatch, tmp_path):
    """A server of its own (this test's key), started from the repository root, where the script's no-op network
    task is importable by its module's name (``benchmarks.bench_child_start``, as its ``__main__`` runs it)."""
    from task_engine import fork_server

    key = f"{fork_server.RUN_ID}-{tmp_path.name}"
    monkeypatch.setattr(fork_server, "server_key", lambda: key)
    monkeypatch.chdir(ROOT)
    result = script("bench_child_start").main(["--quick"])
    assert "smoke" not in result  # --quick: no FullRuns
    start = result["start"]
    assert all(start[part] > 0 for part in ("interpreter_ms", "server_start_ms", "child_task_ms"))
    assert start["inline_task_ms"] >= 0  # a task that does nothing, in this process: 0.00 ms rounded


def test_gpu_host_wheels_prunes_a_package_s_tests_and_their_record_lines(tmp_path):
    """gpu_host_wheels.py downloads wheels and builds annoy (the network, minutes): its quick check is the one step
    that rewrites a published wheel, leaving a package's tests out of the archive and out of its RECORD."""
    wheels = script("gpu_host_wheels")
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    record = "pkg-1.0.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/__init__.py", "x = 1\n")
        archive.writestr("pkg/test/data.bin", b"0" * 10_000)
        archive.writestr(record, f"pkg/__init__.py,sha256=a,6\npkg/test/data.bin,sha256=b,10000\n{record},,\n")
    assert wheels.pruned_wheel(wheel, "pkg/test/") > 0
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(archive.namelist()) == ["pkg-1.0.dist-info/RECORD", "pkg/__init__.py"]
        assert archive.read(record).decode().splitlines() == ["pkg/__init__.py,sha256=a,6", f"{record},,"]


@pytest.mark.slow
def test_bench_gru_quick():
    result = script("bench_gru").main(["--quick"])
    assert result["blocks"] == 1
    for what in ("gru", "step"):
        assert set(result["median_ms"][what]) == {"nn.GRU (packed)", "models.recurrent"}
        assert all(ms > 0 for ms in result["median_ms"][what].values())
        assert result["native_vs_recurrent"][what] > 0


def test_bench_step_sync_quick(tmp_path):
    out = tmp_path / "step_sync.json"
    result = script("bench_step_sync").main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["blocks"] == 1 and result["steps_per_block"] == 3
    assert set(result["median_ms_per_step"]) == {"no sync", "per-step sync"}
    assert result["per_step_sync_vs_no_sync"] > 0


def test_bench_losses_quick():
    from models.losses import LOSSES

    # no address-space limit: it would bind this test process, not a benchmark's own
    result = script("bench_losses").main(["--quick", "--memory-limit-gib", "0"])
    assert result["meta"]["dim"] == 32 and result["meta"]["repeats"] == 1
    timed = {row["loss"] for row in result["rows"]}
    refused = {entry["loss"] for entry in result["skipped"] if entry["batch_size"] is None}
    assert timed | refused == set(LOSSES) and not timed & refused  # every registered loss, timed or refused
    assert all(row["batch_size"] == 20 and row["ours_ms"] > 0 for row in result["rows"])
    assert any("pml_ms" in row for row in result["rows"])  # the pytorch-metric-learning side ran too


@pytest.mark.slow
def test_bench_train_throughput_quick():
    result = script("bench_train_throughput").main(["--quick"])
    assert result["image_size"] == 32 and result["batch_size_per_process"] == 8 and result["timed_steps"] == 2
    rates = result["images_per_second"]
    assert set(rates) == {"plain_fp32_loop", "fast_loop", "compute_only", "loader_only"}
    assert all(rate > 0 for rate in rates.values())
    assert result["fast_vs_plain_fp32"] == pytest.approx(rates["fast_loop"] / rates["plain_fp32_loop"])


@pytest.mark.slow
def test_bench_trunk_resolution_quick():
    rows = script("bench_trunk_resolution").main(["--quick"])
    assert [row["image_size"] for row in rows] == [64, 96]
    for row in rows:
        assert row["images_per_second"] > 0 and 0 <= row["topic_precision_at_10"] <= 1


@pytest.mark.slow
def test_bench_pq_stages_quick(tmp_path):
    out = tmp_path / "pq.json"
    rows = script("bench_pq_stages").main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == rows
    by_variant = {row["variant"]: row for row in rows}
    assert by_variant["exact"]["recall@10"] == 1.0 and by_variant["exact"]["exact_p99_over_p99"] == 1.0
    assert len(by_variant) == 12 and all(row["items"] == 2_000 for row in rows)
    # re-ranked with exact distances at a depth beyond the gallery: every item is scored, so nothing is missed
    assert by_variant["pq 32x4, rerank 24000"]["recall@10"] == 1.0


@pytest.mark.slow
def test_bench_dedup_quick():
    result = script("bench_dedup").main(["--quick"])
    assert [row["n_docs"] for row in result["speed"]] == [1_000, 2_000]  # and no 1M run
    assert all(row["same_clusters_as_naive"] for row in result["speed"])
    for row in result["accuracy"]:
        assert row["n_docs"] == 1_000 and 0 <= row["pair_recall_vs_exact"] <= 1


@pytest.mark.slow
def test_bench_search_quick(tmp_path):
    out = tmp_path / "search.json"
    result = script("bench_search").main(["--quick", "--out", str(out)])
    assert [row["items"] for row in result["sizes"]] == [2_000, 10_000]
    assert all(row["queries"] == 50 and 0 < row["annoy"]["recall@10"] <= 1 for row in result["sizes"])
    assert [row["items"] for row in result["exact_search_by_size"]] == [2_000, 10_000, 30_000]
    assert "over 50 queries" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_embedded_guessability_quick():
    figures = script("embedded_guessability").main(["--quick"])
    assert figures["n_pairs"] == 400 and figures["n_train"] + figures["n_test"] <= 400
    for name in ("text_naive_bayes", "image_motif_rule", "image_pixels_logistic"):
        assert 0 <= figures[name] <= 1
    assert figures["text_naive_bayes"] > figures["chance_uniform"]  # the text names its topic


def test_make_pairs_table_quick(tmp_path):
    import pandas as pd

    path = script("make_pairs_table").main(["--quick", "--out", str(tmp_path / "table")])
    table, truth = pd.read_csv(path), pd.read_csv(path.parent / "ground_truth.csv")
    assert len(table) == len(truth) == 120 and list(table.columns) == ["image_path", "text"]
    assert all((path.parent / image).is_file() for image in table["image_path"])
    assert truth["reillustrated"].any() and not truth["reillustrated"].all()
    assert (truth["image_path"] == table["image_path"]).all()


@pytest.mark.slow
def test_gpu_check_cpu_lane_quick(tmp_path):
    """The GPU check's CPU lane, parts a (equality: the CPU's own floor, static vs plain step) and b (the step
    against a bare ResNet at toy size); c (a smoke FullRun with 4 workers) and d (``pytest -m cuda``, which
    collects this whole suite) take minutes here and prove nothing a GPU would add."""
    out = tmp_path / "gpu_check.json"
    with pytest.raises(SystemExit) as exit_status:
        script("gpu_check").main(["--cpu-lane", "--parts", "a,b", "--out", str(out)])
    result = json.loads(out.read_text())
    assert exit_status.value.code == 0 and result["ok"], result["summary"]
    assert result["cpu_lane"] and set(result["parts"]) == {"equality", "speed"}
    assert "no GPU figure" in result["summary"]["a"]
