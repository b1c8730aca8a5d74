import os

import pytest

# Two cores on CI: keep BLAS/torch from oversubscribing them, and the runs offline-safe.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
# Idle OpenMP threads sleep instead of spinning: on a shared machine spinning threads slowed tests ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One smoke FullRun shared by the test modules that read its outputs (the pipeline tests, serving):
    ``(task, result, ran tasks, run root)``."""
    from pipeline import FullRun
    from tests.luigi_runs import build

    root = tmp_path_factory.mktemp("runs")
    task = FullRun(profile="smoke", run_root=str(root))
    result, ran = build([task])
    return task, result, ran, root
