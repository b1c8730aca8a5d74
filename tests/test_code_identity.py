"""The recorded code identity of each task family (``pipeline/tasks/code_versions.json``): a change to what a task
runs cannot land without a maintainer deciding whether its outputs must be recomputed."""

import sys
from pathlib import Path

import pytest

import pipeline.tasks  # noqa: F401 - declares the code base the engine fingerprints
from task_engine.code_identity import (
    changed_families,
    closure,
    fingerprint,
    normalised_source,
    task_families,
)
from task_engine.code_versions import recorded


def test_every_task_s_code_matches_its_recorded_fingerprint():
    """When this fails: run ``python -m pipeline code-versions``; for each family it lists, ``--bump FAMILY``
    if what the task computes changed (its outputs and their downstream are recomputed by the next run),
    or ``--record`` if it computes the same (a refactor: nothing is recomputed). docs/usage.md."""
    python = recorded().get("python")
    if python != f"{sys.version_info.major}.{sys.version_info.minor}":
        pytest.skip(f"fingerprints were recorded with Python {python}; syntax trees differ between versions")
    changed = changed_families()
    assert changed == {}, (
        f"task code changed without a decision: {changed}. Run `python -m pipeline code-versions --bump "
        "<families>` if their results change, `--record` if not (docs/usage.md, 'Code changes')"
    )


def test_every_family_is_recorded_and_starts_at_version_one_or_more():
    families = recorded()["families"]
    assert set(task_families()) == set(families)
    assert all(entry["version"] >= 1 for entry in families.values())


def test_the_fingerprint_ignores_documentation_and_formatting_but_not_code(tmp_path):
    original = tmp_path / "a.py"
    original.write_text('"""doc"""\n\ndef f(x):\n    """what f does"""\n    return x + 1  # why\n')
    reformatted = tmp_path / "b.py"
    reformatted.write_text('"""other doc"""\ndef f( x ):\n    # a comment\n    return (x + 1)\n')
    changed = tmp_path / "c.py"
    changed.write_text('"""doc"""\n\ndef f(x):\n    return x + 2\n')
    assert normalised_source(original) == normalised_source(reformatted)
    assert normalised_source(original) != normalised_source(changed)


def test_a_loss_is_part_of_what_a_train_runs_and_the_report_is_not():
    from pipeline.tasks.data import Split
    from pipeline.tasks.report import Report
    from pipeline.tasks.training import Train

    assert "models.losses.within_modality" in closure(Train.__module__), "found through the losses' registry scan"
    assert {"models.vse", "models.pvse"} <= set(closure(Train.__module__)), "imported by name by the model registry"
    assert "pipeline.tasks.report" not in closure(Train.__module__), "only what the task's module imports"
    assert "evaluation.report.headline" in closure(Report.__module__)
    assert "evaluation.report.headline" not in closure(Split.__module__)
    assert len({fingerprint(Train), fingerprint(Split), fingerprint(Report)}) == 3


def test_the_versions_file_is_the_project_s_beside_its_tasks():
    from task_engine.code_versions import code_base

    assert code_base().versions_file == Path(__file__).resolve().parent.parent / "pipeline" / "tasks" / "code_versions.json"
    assert recorded()["families"]["Train"]["fingerprint"]
