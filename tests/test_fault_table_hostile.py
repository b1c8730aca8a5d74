"""The fault table (issue 53), hostile values and files: class 1, JSON nested thousands deep or holding a number of
thousands of digits, on the command line (``python -m pipeline settings|plan``, the ``luigi`` command) and in each
kind of file the project reads back (a raw annotation file, a bundle's ``bundle.json``, an index's ``index.json``,
a run root's ``_meta.json`` and ``metrics.json`` under ``crossmodal export``); class 3, values that slipped through
(``--plan ''`` or a path, whitespace around a value, ``settings`` accepting what ``plan`` refuses). Each row: one
line, exit 2, nothing written. ``before`` is what each probe did at 7295e00 (the issue's report); the shared parts
are tests/fault_table.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.__main__ import main
from tests.fault_table import (
    Fault,
    assert_refused,
    assert_the_luigi_command_refuses,
    half_written,
    run_command,
)

BIG = "9" * 5000  # Python refuses to read an integer of more than 4300 digits: a ValueError, not a line
DEEP_LIST = "[" * 30_000 + "]" * 30_000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000
DEEP_FILE = "[" * 100_000 + "]" * 100_000
CRASHED = "exit 1, traceback: "

COMMAND_LINE_ROWS = [
    Fault("a 5000-digit --set value", "deep or huge", ["--set", f"neighbors.k={BIG}"], 2, "--set neighbors.k holds an integer of 5,000 digits; at most 100", before=CRASHED + "ValueError: Exceeds the limit (4300 digits)"),
    Fault("a 5000-digit learning rate", "deep or huge", ["--set", f"train.learning_rate={BIG}"], 2, "--set train.learning_rate holds an integer of 5,000 digits", before=CRASHED + "ValueError: Exceeds the limit (4300 digits)"),
    Fault("a 5000-digit sweep value", "deep or huge", ["--sweep", f"neighbors.k=10,{BIG}"], 2, "--sweep neighbors.k holds an integer of 5,000 digits", before=CRASHED + "ValueError: Exceeds the limit (4300 digits)"),
    Fault("a --set object 5000 deep", "deep or huge", ["--set", f"data.options.x={DEEP_OBJECT}"], 2, "--set data.options.x nests arrays or objects 5000 deep; at most 32", before=CRASHED + "RecursionError"),
    Fault("--seeds 30000 deep", "deep or huge", ["--seeds", DEEP_LIST], 2, "--seeds: the value nests arrays or objects 30000 deep; at most 32", before=CRASHED + "RecursionError"),
    Fault("--variants 30000 deep", "deep or huge", ["--variants", DEEP_LIST], 2, "--variants: the value nests arrays or objects 30000 deep", before=CRASHED + "RecursionError"),
    Fault("--dataset-options 30000 deep", "deep or huge", ["--dataset-options", DEEP_LIST], 2, "--dataset-options: the value nests arrays or objects 30000 deep", before=CRASHED + "RecursionError"),
    Fault("--variant-overrides 30000 deep", "deep or huge", ["--variant-overrides", DEEP_LIST], 2, "--variant-overrides: the value nests arrays or objects 30000 deep", before=CRASHED + "RecursionError"),
    Fault("--shards 30000 deep", "deep or huge", ["--shards", DEEP_LIST], 2, "--shards: the value nests arrays or objects 30000 deep", before=CRASHED + "RecursionError"),
    Fault("a 5000-digit seed", "deep or huge", ["--seeds", f"[{BIG}]"], 2, "--seeds: the value holds an integer of 5,000 digits", before="exit 2, worded as not a JSON list"),
]


@pytest.mark.parametrize("fault", COMMAND_LINE_ROWS, ids=Fault.id)
def test_plan_refuses_a_deep_or_huge_value_in_one_line(fault, tmp_path):
    root = tmp_path / "runs"
    assert_refused(run_command(main, ["plan", "--profile", "smoke", "--run-root", str(root), *fault.args]), fault)
    assert not root.exists(), "planning writes nothing"


@pytest.mark.parametrize("fault", [row for row in COMMAND_LINE_ROWS if row.args[0] == "--set"], ids=Fault.id)
def test_settings_refuses_a_deep_or_huge_value_in_one_line(fault):
    assert_refused(run_command(main, ["settings", "--profile", "smoke", *fault.args]), fault)


@pytest.mark.slow  # a luigi command in a process of its own
@pytest.mark.parametrize("fault", [COMMAND_LINE_ROWS[0], COMMAND_LINE_ROWS[4]], ids=Fault.id)
def test_the_luigi_command_refuses_it_before_any_task(fault, tmp_path):
    """The ``luigi`` command parses ``--seeds`` with Luigi's own ``json.loads``: the bounded reader sees it first."""
    assert_the_luigi_command_refuses(fault, tmp_path / "runs")


RAW_FILE_ROWS = [
    Fault("a pairs table line 5000 deep", "deep or huge", ("pairs", "pairs.jsonl"), 2, "pairs.jsonl nests arrays or objects 5001 deep; at most 64", before="PrepareShard: RecursionError traceback"),
    Fault("a pairs table line with a 5000-digit number", "deep or huge", ("pairs", "pairs.jsonl"), 2, "pairs.jsonl line 2 holds an integer of 5,000 digits", before="PrepareShard: ValueError traceback (4300 digits)"),
    Fault("a COCO annotation file 100000 deep", "deep or huge", ("coco", "annotations/captions_val2017.json"), 2, "captions_val2017.json nests arrays or objects 100001 deep; at most 64", before="PrepareShard: RecursionError traceback"),
]


@pytest.mark.parametrize("fault", RAW_FILE_ROWS, ids=Fault.id)
def test_a_raw_file_beyond_the_bounds_is_one_line_of_its_recipe(fault, tmp_path):
    """What PrepareShard reports as ``ERROR: PrepareShard failed: <line>`` (pipeline/run/failures.py)."""
    from data_recipes import RECIPE_BUILDERS
    from pipeline.run.failures import INPUT_ERRORS

    recipe, name = fault.args
    raw = tmp_path / "raw"
    (raw / name).parent.mkdir(parents=True)
    if recipe == "pairs":
        value = '{"a": ' * 5000 + "1" + "}" * 5000 if "deep" in fault.name else BIG
        (raw / name).write_text('{"image_path": "a.png", "text": "a caption"}\n' + '{"image_path": "b.png", "text": ' + value + "}\n")
    else:
        (raw / name).write_text('{"images": ' + DEEP_FILE + "}")
    with pytest.raises(INPUT_ERRORS) as refused:
        RECIPE_BUILDERS[recipe](raw, tmp_path / "work")
    message = str(refused.value)
    assert fault.said in message and "\n" not in message, message[:500]


def deep_copy_of(folder: Path, tmp_path: Path, name: str) -> Path:
    """A copy of a bundle or index folder whose file ``name`` is nested 100,000 deep."""
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    (copy / name).write_text(DEEP_FILE)
    return copy


BUNDLE_SAYS = "bundle.json is corrupt: it nests arrays or objects 100000 deep; at most 64; export the bundle again"
INDEX_SAYS = "index.json is JSON that nests arrays or objects 100000 deep; at most 64: the index is damaged"
FILE_ROWS = [
    Fault("evaluate on a bundle.json 100000 deep", "deep or huge", ["evaluate", "{bundle}", "--table", "{table}", "--out", "{out}"], 2, BUNDLE_SAYS, before=CRASHED + "RecursionError"),
    Fault("index with a bundle.json 100000 deep", "deep or huge", ["index", "{bundle}", "--table", "{table}", "--out", "{out}"], 2, BUNDLE_SAYS, before=CRASHED + "RecursionError"),
    Fault("audit on a bundle.json 100000 deep", "deep or huge", ["audit", "{bundle}", "--table", "{table}", "--out", "{out}"], 2, BUNDLE_SAYS, before=CRASHED + "RecursionError"),
    Fault("search with a bundle.json 100000 deep", "deep or huge", ["search", "{index}", "--text", "a protest", "--bundle", "{bundle}"], 2, BUNDLE_SAYS, before=CRASHED + "RecursionError"),
    Fault("serve with a bundle.json 100000 deep", "deep or huge", ["serve", "{index}", "--bundle", "{bundle}"], 2, BUNDLE_SAYS, before=CRASHED + "RecursionError"),
    Fault("search on an index.json 100000 deep", "deep or huge", ["search", "{deep_index}", "--text", "a protest"], 2, INDEX_SAYS, before=CRASHED + "RecursionError"),
    Fault("serve on an index.json 100000 deep", "deep or huge", ["serve", "{deep_index}"], 2, INDEX_SAYS, before=CRASHED + "RecursionError"),
    Fault("index into an index.json 100000 deep", "deep or huge", ["index", "{good_bundle}", "--table", "{table}", "--out", "{deep_index}"], 2, INDEX_SAYS, before=CRASHED + "RecursionError"),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault", FILE_ROWS, ids=Fault.id)
def test_crossmodal_refuses_a_bundle_or_index_file_nested_100000_deep(fault, smoke_test_table, tmp_path, monkeypatch):
    import uvicorn

    from serving.cli import main as crossmodal

    folder, search_index, _ = smoke_test_table
    monkeypatch.setattr(uvicorn.Server, "run", lambda *_, **__: pytest.fail("the command started serving"))
    values = {
        "bundle": deep_copy_of(search_index.output_path("bundle"), tmp_path / "b", "bundle.json"),
        "good_bundle": search_index.output_path("bundle"),
        "index": search_index.output_path("index"),
        "deep_index": deep_copy_of(search_index.output_path("index"), tmp_path / "i", "index.json"),
        "table": folder / "pairs.csv",
        "out": tmp_path / "out",
    }
    done = run_command(crossmodal, [str(arg).format(**{k: str(v) for k, v in values.items()}) for arg in fault.args])
    assert_refused(done, fault)
    assert not (tmp_path / "out").exists() and half_written(tmp_path) == []


EXPORT_ROWS = [
    Fault("export from a Report _meta.json 100000 deep", "deep or huge", ("Report", "_meta.json"), 2, "_meta.json is damaged: it nests arrays or objects 100000 deep; at most 64: run its task again", before=CRASHED + "RecursionError"),
    Fault("export from an Evaluate _meta.json 100000 deep", "deep or huge", ("Evaluate", "_meta.json"), 2, "_meta.json is damaged: it nests arrays or objects 100000 deep", before=CRASHED + "RecursionError"),
    Fault("export from a Train _meta.json 100000 deep", "deep or huge", ("Train", "_meta.json"), 2, "_meta.json is damaged: it nests arrays or objects 100000 deep", before=CRASHED + "RecursionError"),
    Fault("export from an Evaluate metrics.json 100000 deep", "deep or huge", ("Evaluate", "metrics.json"), 2, "metrics.json is damaged: it nests arrays or objects 100000 deep", before=CRASHED + "RecursionError"),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault", EXPORT_ROWS, ids=Fault.id)
def test_export_refuses_a_run_root_file_nested_100000_deep(fault, smoke_run, tmp_path):
    from serving.cli import main as crossmodal
    from tests.luigi_runs import copied_root

    root = copied_root(smoke_run, tmp_path)
    family, name = fault.args
    for folder in (root / family).iterdir():  # every output of the family: the export reads the one it needs
        if (folder / name).is_file():
            (folder / name).write_text(DEEP_FILE)
    out = tmp_path / "bundle"
    done = run_command(crossmodal, ["export", str(root), str(out), "--variant", "ours", "--protocol", "shared"])
    assert_refused(done, fault)
    assert not out.exists() and half_written(tmp_path) == []
    shutil.rmtree(root)


PLAN_ID_ROWS = [
    Fault("an empty --plan", "slipped through", ["FullRun", "--plan", ""], 2, "--plan '': expected a run plan's id, 12 hex digits", before="not refused: a 125-task demo run started into the root"),
    Fault("a --plan that is a path", "slipped through", ["FullRun", "--plan", "../../elsewhere/RunPlan/0123456789ab"], 2, "--plan '../../elsewhere/RunPlan/0123456789ab': expected a run plan's id", before="read from outside RunPlan/"),
    Fault("a --plan of other letters", "slipped through", ["Train", "--plan", "zzzz", "--variant", "ours", "--seed", "0"], 2, "--plan 'zzzz': expected a run plan's id", before="exit 2 naming the missing file RunPlan/zzzz"),
    Fault("an empty --plan to plan", "slipped through", ["plan", "--plan", ""], 2, "--plan '': expected a run plan's id", before="exit 0: planned the default demo run"),
]


@pytest.mark.parametrize("fault", PLAN_ID_ROWS, ids=Fault.id)
def test_plan_takes_only_a_plan_s_id(fault, tmp_path):
    root = tmp_path / "runs"
    done = run_command(main, [*fault.args, "--run-root", str(root)])
    assert_refused(done, fault)
    assert not root.exists(), "nothing ran, nothing was written"


def planned(*changes: str) -> dict:
    done = run_command(main, ["plan", "--profile", "smoke", "--json", *[arg for change in changes for arg in ("--set", change)]])
    assert done.status == 0, done.stderr
    return json.loads(done.stdout)


def test_whitespace_around_a_value_is_no_plan_of_its_own():
    """Before: ``' top1'`` and ``'top1 '`` gave the Train hash of ``top1`` but a RunPlan id of their own."""
    plain = planned("train.trunk=top1")
    for spelled in ["train.trunk= top1", "train.trunk=top1 ", 'train.trunk=" top1"', "  train.trunk = top1"]:
        other = planned(spelled)
        assert (other["plan"], other["changes"], other["tasks"]) == (plain["plan"], ["train.trunk=top1"], plain["tasks"]), spelled
    assert planned("train.trunk=frozen")["plan"] != plain["plan"]


SETTINGS_ROWS = [
    Fault("settings with a trunk the backbone has too few stages for", "slipped through", ["--set", "train.trunk=top99"], 2, "train.trunk=top99: backbone 'efficientnet_lite0' has 7 stages", before="exit 0: listed, where plan refused it"),
    Fault("settings with a label two variants share", "slipped through", ["--set", "variants.ours.label=Ang+NP+Sym"], 2, "variant labels ['Ang+NP+Sym'] name several variants", before="exit 0: listed, where plan refused it"),
    Fault("settings with Doc2Vec without an output layer", "slipped through", ["--set", "doc2vec.hs=0", "--set", "doc2vec.negative=0"], 2, "no output layer to train", before="exit 0: listed, where plan refused it"),
]


@pytest.mark.parametrize("fault", SETTINGS_ROWS, ids=Fault.id)
def test_settings_refuses_what_plan_refuses_in_the_same_line(fault, tmp_path):
    listed = run_command(main, ["settings", "--profile", "smoke", *fault.args])
    assert_refused(listed, fault)
    plan = run_command(main, ["plan", "--profile", "smoke", "--run-root", str(tmp_path / "runs"), *fault.args])
    assert (plan.status, plan.stderr) == (listed.status, listed.stderr)
