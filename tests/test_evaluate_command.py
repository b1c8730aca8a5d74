"""``crossmodal evaluate``: bundles scored on a labelled table with the pipeline's own metrics — exactly
Evaluate's numbers on the pipeline's own test split — paired differences, counted rejects, and one line
and exit status 2 for a table or bundle that cannot be used."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pipeline import Evaluate, Train
from pipeline.config.profiles import PROFILES
from serving.bundle import MANIFEST_FILE, export_bundle
from serving.cli import main
from serving.runs import bundle_parts

SMOKE = PROFILES.get("smoke").settings()

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def test_split_table(smoke_test_table):
    return smoke_test_table


def run(*args: str) -> int:
    return main(["evaluate", *args])


def test_on_the_pipelines_test_split_it_reproduces_evaluate_exactly(test_split_table, tmp_path):
    folder, search_index, n_test = test_split_table
    out = tmp_path / "out"
    bundle = str(search_index.output_path("bundle"))
    assert run(bundle, "--table", str(folder / "pairs.csv"), "--out", str(out), "--redraws", str(SMOKE.eval.redraws)) == 0
    scored = json.loads((out / "metrics.json").read_text())
    metrics = scored["bundles"][0]["metrics"]
    evaluated = search_index.clone(Evaluate).load("metrics")
    assert scored["table"]["n_kept"] == n_test == evaluated["n_test"]
    n = evaluated["retrieval"]["n_way"]
    assert metrics[f"{n}-way R@1 I→T"]["mean"] == evaluated["retrieval"]["i2t"]
    assert metrics[f"{n}-way R@1 T→I"]["mean"] == evaluated["retrieval"]["t2i"]
    full = evaluated["full_ranking"]["all"]
    for k in (1, 5, 10):
        assert metrics[f"R@{k} I→T"]["mean"] == full[f"i2t_r@{k}"] and metrics[f"R@{k} T→I"]["mean"] == full[f"t2i_r@{k}"]
    assert metrics["median rank I→T"]["median"] == full["i2t_medr"] and metrics["rsum"]["value"] == full["rsum"]
    assert scored["bundles"][0]["protocol"] == evaluated["full_ranking"]["protocol"]
    # every interval holds its estimate
    assert all(m["ci_low"] <= m.get("mean", m.get("value", m.get("median"))) <= m["ci_high"] for m in metrics.values())


def test_two_bundles_are_compared_pair_by_pair_and_every_bad_row_is_counted(test_split_table, smoke_run, tmp_path):
    folder, search_index, n_test = test_split_table
    other = tmp_path / "ang"
    report = smoke_run[0].requires().signature()  # the smoke run's own report: other tests add theirs
    export = ["export", str(search_index.run_root), str(other), "--variant", "ang_np_sym", "--protocol", "shared"]
    assert main([*export, "--report", report]) == 0
    out = tmp_path / "out"
    assert run(str(search_index.output_path("bundle")), str(other), "--table", str(folder / "pairs.csv"), "--out", str(out)) == 0
    scored = json.loads((out / "metrics.json").read_text())
    assert scored["table"]["rejects_by_reason"] == {"not_an_image": 1, "whitespace_text": 1}
    rejects = pd.read_csv(out / "rejects.csv")
    assert sorted(rejects["pair_id"]) == ["blank", "html"]
    first, second = scored["bundles"]
    assert "difference_from_first" not in first
    difference = second["difference_from_first"]["5-way R@1 I→T"]
    assert difference["mean_difference"] == pytest.approx(
        second["metrics"]["5-way R@1 I→T"]["mean"] - first["metrics"]["5-way R@1 I→T"]["mean"]
    )
    # format-2 bundles carry their run's Doc2Vec: neighbor preservation with its chance level
    assert first["neighbor_preservation"] == {"k": 10, "chance": pytest.approx(10 / (n_test - 1))}
    assert "NP text @10" in second["metrics"]
    report = (out / "report.md").read_text()
    assert "## Ang+NP+Sym (ang) − Ours (bundle) (the first model)" in report and "not_an_image 1" in report


def test_a_bundle_without_doc2vec_still_scores_and_says_why_neighbor_preservation_was_skipped(test_split_table, tmp_path):
    """A bundle exported from a Train folder with no Evaluate beside it carries no Doc2Vec model."""
    folder, search_index, _ = test_split_table
    bare = tmp_path / "bare"
    parts = bundle_parts(search_index.clone(Train).output_dir(), search_index.clone(Evaluate).output_dir())
    # exported as from a Train folder alone (an edited bundle.json is refused: tests/test_model_records.py)
    export_bundle(replace(parts, doc2vec=None, doc2vec_infer_epochs=None), bare)
    assert json.loads((bare / MANIFEST_FILE).read_text())["text"]["doc2vec"] is None
    assert run(str(bare), "--table", str(folder / "pairs.csv"), "--out", str(tmp_path / "out")) == 0
    scored = json.loads((tmp_path / "out" / "metrics.json").read_text())["bundles"][0]
    assert "holds no Doc2Vec model" in scored["neighbor_preservation_skipped"] and "NP text @10" not in scored["metrics"]


@pytest.mark.parametrize("problem", ["missing column", "unreadable table", "other bundle version", "too few rows", "no table"])
def test_a_table_or_bundle_that_cannot_be_used_is_one_line_and_exit_2(problem, test_split_table, tmp_path, capsys):
    folder, search_index, _ = test_split_table
    bundle, table = str(search_index.output_path("bundle")), folder / "pairs.csv"
    rows = pd.read_csv(table)
    if problem == "missing column":
        table = tmp_path / "pairs.csv"
        rows.drop(columns=["text"]).to_csv(table, index=False)
    elif problem == "unreadable table":
        table = tmp_path / "pairs.parquet"
        table.write_bytes(b"PAR1 this is not a parquet file")
    elif problem == "other bundle version":
        bundle = str(tmp_path / "v9")
        shutil.copytree(search_index.output_path("bundle"), bundle)
        manifest = json.loads((Path(bundle) / MANIFEST_FILE).read_text())
        (Path(bundle) / MANIFEST_FILE).write_text(json.dumps({**manifest, "format_version": 9}))
    elif problem == "too few rows":
        table = tmp_path / "pairs.csv"
        rows.head(4).assign(image_path=[str(folder / p) for p in rows.head(4)["image_path"]]).to_csv(table, index=False)
    else:
        table = tmp_path / "nowhere.csv"
    assert run(bundle, "--table", str(table), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("crossmodal evaluate: ") and "Traceback" not in err


def test_two_bundles_of_one_variant_are_named_apart_and_the_direction_is_said(test_split_table, tmp_path):
    folder, search_index, _ = test_split_table
    again = tmp_path / "again"
    shutil.copytree(search_index.output_path("bundle"), again)
    out = tmp_path / "out"
    assert run(str(search_index.output_path("bundle")), str(again), "--table", str(folder / "pairs.csv"), "--out", str(out)) == 0
    first, second = json.loads((out / "metrics.json").read_text())["bundles"]
    assert (first["name"], second["name"]) == ("Ours (bundle)", "Ours (again)")
    assert second["difference_is"] == "Ours (again) − Ours (bundle)"
    report = (out / "report.md").read_text()
    assert "Ours (again) − Ours (bundle) (the first model)" in report and "Ours − Ours" not in report
    assert "Δ = Ours (again) minus Ours (bundle)" in report
