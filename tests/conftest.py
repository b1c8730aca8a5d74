import os

import pytest

# Two cores on CI: keep BLAS/torch from oversubscribing them, and the runs offline-safe.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
# Idle OpenMP threads sleep instead of spinning: on a shared machine spinning threads slowed tests ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")


#: the fixture of the session's smoke FullRun: a test that reads a pipeline run's outputs is in the slow lane
PIPELINE_RUN_FIXTURE = "smoke_run"


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow"`` deselects
def pytest_collection_modifyitems(config, items):
    """A test that reads the session's smoke run (directly or through another fixture) is ``slow``: the fast lane
    (``pytest -m "not slow"``) never starts the run. Tests marked ``cuda`` run only where a CUDA device is present;
    elsewhere (CI) they are skipped."""
    for item in items:
        if PIPELINE_RUN_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `pytest -m cuda` on a GPU host)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture
def spawn_mode():
    """Every network task produces in a process of its own, as on a GPU host (``--network-tasks-process spawn``)."""
    import luigi

    config = luigi.configuration.get_config()
    config.set("network_tasks", "process", "spawn")
    try:
        yield
    finally:
        config.remove_option("network_tasks", "process")


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


@pytest.fixture(scope="session")
def smoke_test_table(smoke_run, tmp_path_factory):
    """The smoke run's test split as a pairs table (its cached thumbnails as PNG files), plus two bad rows,
    and the SearchIndex's bundle (Ours, seed 0)."""
    task, _, _, root = smoke_run
    import numpy as np
    import pandas as pd
    from PIL import Image

    search_index = task.requires().search_index()
    manifest = search_index.requires()["split"].manifest()
    test = manifest[manifest["split"] == "test"]
    images = search_index.requires()["prepared"].images()
    folder = tmp_path_factory.mktemp("table")
    rows = []
    for pair_id, row, text in zip(test["pair_id"], test["cache_row"], test["text"], strict=True):
        Image.fromarray(np.asarray(images[row])).save(folder / f"{pair_id}.png")
        rows.append({"pair_id": pair_id, "image_path": f"{pair_id}.png", "text": text})
    (folder / "page.png").write_text("<html>not a photo</html>")
    bad = [
        {"pair_id": "html", "image_path": "page.png", "text": "a caption whose image is a web page"},
        {"pair_id": "blank", "image_path": rows[0]["image_path"], "text": "   "},
    ]
    pd.DataFrame(rows + bad).to_csv(folder / "pairs.csv", index=False)
    return folder, search_index, len(rows)
