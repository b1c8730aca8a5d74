"""``crossmodal export`` reads a Report's run index instead of guessing (issue 31): in a run root holding
two reports it exports from the named one (the newest by default, said on stderr), refuses a request the
index does not settle with one line listing the candidates, and says how to get an index for a report
written before reports recorded one."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import luigi

from pipeline import FullRun
from pipeline.config.profiles import PROFILES
from serving.cli import main
from tests.luigi_runs import build

SMOKE = PROFILES.get("smoke").settings()

OTHER_LEARNING_RATE = 0.0123


def export(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["export", *args])
    return code, err.getvalue()


def learning_rate(bundle: Path) -> float:
    return json.loads((bundle / "bundle.json").read_text())["train"]["learning_rate"]


def test_export_follows_the_named_report_and_refuses_what_its_index_does_not_settle(smoke_run, tmp_path):
    smoke, _, _, smoke_root = smoke_run
    root = tmp_path / "runs"
    shutil.copytree(smoke_root, root)
    first = smoke.requires().signature()
    for report in (root / "Report").iterdir():  # other tests add reports to the shared smoke run root
        if report.name != first:
            shutil.rmtree(report)
    # a second study in the same run root: Ours alone, shared protocol, another learning rate
    second_run = FullRun(
        profile="smoke",
        run_root=str(root),
        variants=["ours"],
        seeds=[0],
        protocol="shared",
        variant_overrides={"ours": {"train": {"learning_rate": OTHER_LEARNING_RATE}}},
    )
    result, _ = build([second_run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    second = second_run.requires().signature()
    assert sorted(p.name for p in (root / "Report").iterdir()) == sorted([first, second])
    index = json.loads((root / "Report" / second / "run_index.json").read_text())["runs"]
    assert [(r["variant"], r["seed"], r["protocol"]) for r in index] == [("ours", 0, "shared")]
    assert index[0]["point"] == {}, "a shared run has no trial point: the change is the run plan's"
    link = json.loads((root / "Report" / second / "report.json").read_text())["run_plan"]
    plan = json.loads((root / link["file"]).read_text())["summary"]  # the one plan file the report links
    assert plan["variants"]["ours"]["train"]["learning_rate"] == OTHER_LEARNING_RATE

    # the newest report by default, said
    code, err = export(str(root), str(tmp_path / "newest"), "--variant", "ours")
    assert code == 0 and learning_rate(tmp_path / "newest") == OTHER_LEARNING_RATE
    assert f"exporting from report {second}" in err and "the newest of 2" in err and first in err

    # the first report ran Ours under both protocols: asking without a protocol is refused, listing both
    code, err = export(str(root), str(tmp_path / "ambiguous"), "--variant", "ours", "--report", first[:6])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "under both protocols" in err and "shared seed 0" in err and "tuned seed 0" in err
    assert not (tmp_path / "ambiguous").exists()
    code, _ = export(
        str(root),
        str(tmp_path / "shared"),
        "--variant",
        "ours",
        "--report",
        first[:6],
        "--protocol",
        "shared",
    )
    assert code == 0 and learning_rate(tmp_path / "shared") == SMOKE.train.learning_rate

    # a hash prefix that names no report, a variant the report did not run: one line each
    code, err = export(str(root), str(tmp_path / "x"), "--report", "zzzz")
    assert code == 2 and "matches no report" in err and first in err and second in err
    code, err = export(str(root), str(tmp_path / "x"), "--variant", "ang_np_sym", "--report", second[:6])
    assert code == 2 and "holds no run of variant 'ang_np_sym'; its variants: ours" in err

    # a report whose index was removed, or whose metadata is damaged: one line each
    (root / "Report" / second / "run_index.json").unlink()
    code, err = export(str(root), str(tmp_path / "old"), "--variant", "ours", "--report", second[:6])
    assert code == 2 and err.count("\n") == 1 and "run_index.json is missing from a finished output" in err
    (root / "Report" / second / "_meta.json").write_text("{not json")
    code, err = export(str(root), str(tmp_path / "old"), "--variant", "ours")
    assert code == 2 and err.count("\n") == 1 and "_meta.json is damaged" in err
    # and the pipeline takes a report with damaged metadata as incomplete: the same command rebuilds it in place
    assert not second_run.requires().complete()
    result, ran = build([second_run])
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert ran.families() == ["FullRun", "Report"]
    assert (root / "Report" / second / "run_index.json").is_file()
