"""The run folder's one module (common/run_folder.py, issue 52 item 3): no layout name is spelled anywhere else, and
its readers of ``_meta.json``, ``history.csv`` and the plan's file refuse what is damaged in one line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from common import run_folder
from common.hashing import stable_hash
from common.run_folder import RunFolderError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "data_recipes", "models", "evaluation", "serving", "pipeline", "benchmarks")
#: every name of the layout, and the one module that spells it
LAYOUT = {
    run_folder.META_FILE: "common/run_folder.py",
    run_folder.CODE_MARKER: "common/run_folder.py",
    run_folder.HISTORY_FILE: "common/run_folder.py",
    run_folder.PLAN_FOLDER: "common/run_folder.py",
    run_folder.PLAN_FILE: "common/run_folder.py",
    ".partial": "common/files.py",
}


def spelled_names(path: Path) -> set[str]:
    """The layout names ``path``'s code spells as a string (a path component of one: ``"*/_meta.json"`` too),
    docstrings and messages (text with spaces) left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    exported = {  # the names a module exports (``__all__ = ["RunPlan", ...]``) are names, not files
        id(element)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for element in getattr(node.value, "elts", [])
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | exported:
            if " " in node.value:
                continue
            parts = set(node.value.replace("*", "").split("/"))
            found |= {name for name in LAYOUT if name in parts or (name == ".partial" and node.value.endswith(name))}
    return found


def test_no_layout_name_is_spelled_twice():
    spelled = {
        name: sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py") if name in spelled_names(path))
        for name in LAYOUT
    }
    assert spelled == {name: [module] for name, module in LAYOUT.items()}


def test_the_check_finds_a_name_spelled_again(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Reads _meta.json."""\nMETA = "_meta.json"\nGLOB = "*/_meta.json"\nSAY = "no _meta.json here"\nP = "x.partial"\n')
    assert spelled_names(sample) == {"_meta.json", ".partial"}


def output(root: Path, family: str, signature: str, meta: object) -> Path:
    folder = root / family / signature
    folder.mkdir(parents=True)
    (folder / run_folder.META_FILE).write_text(meta if isinstance(meta, str) else json.dumps(meta))
    return folder


def test_meta_is_read_within_bounds_and_refused_in_one_line(tmp_path):
    good = output(tmp_path, "Train", "a" * 12, {"config": {"seed": 3}, "outputs": {"model": "model.json"}})
    assert run_folder.read_meta(good)["config"] == {"seed": 3} and run_folder.meta_field(good, "config", "seed") == 3
    cases = {
        "not JSON": ("{not json", "_meta.json is damaged: it is not JSON"),
        "deep": ("[" * 100_000 + "]" * 100_000, "_meta.json is damaged: it nests arrays or objects 100000 deep; at most 64"),
        "huge number": ('{"a": ' + "9" * 5000 + "}", "_meta.json is damaged: it holds an integer of 5,000 digits"),
        "a list": ("[]", "_meta.json is damaged (not a JSON object)"),
    }
    for index, (text, said) in enumerate(cases.values()):
        folder = output(tmp_path, "Evaluate", f"{index:012d}", text)
        with pytest.raises(RunFolderError) as refused:
            run_folder.read_meta(folder)
        assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)[:300]
        assert run_folder.meta_or_none(folder) is None
    with pytest.raises(RunFolderError, match="is not a finished task output"):
        run_folder.read_meta(tmp_path / "Train" / ("b" * 12))
    with pytest.raises(RunFolderError, match=r"damaged \(it has no config.train\)"):
        run_folder.meta_field(good, "config", "train")


def test_a_declared_output_and_an_upstream_folder_stay_in_their_run_root(tmp_path):
    root = tmp_path / "copied"
    prepared = output(root, "PrepareDataset", "c" * 12, {"outputs": {}})
    train = output(
        root,
        "Train",
        "d" * 12,
        {"outputs": {"model": "model.json", "escape": "../../x.json"}, "upstream": {"PrepareDataset": f"/elsewhere/runs/PrepareDataset/{'c' * 12}", "Split": "../../etc"}},
    )
    (train / "model.json").write_text("{}")
    assert run_folder.declared_output(train, "model") == train / "model.json"
    assert run_folder.upstream_folder(train, "PrepareDataset") == prepared  # the recorded run root was another
    with pytest.raises(RunFolderError, match="names output 'escape' outside its folder"):
        run_folder.declared_output(train, "escape")
    with pytest.raises(RunFolderError, match="names no output 'weights'"):
        run_folder.declared_output(train, "weights")
    with pytest.raises(RunFolderError, match="its upstream Split is '../../etc'"):
        run_folder.upstream_folder(train, "Split")


def test_the_last_history_row_is_read_or_none_while_it_is_written(tmp_path):
    (tmp_path / run_folder.HISTORY_FILE).write_text("epoch,val_nway_r1\n1,0.4\n2,0.5\n")
    assert run_folder.last_history_row(tmp_path, "val_nway_r1") == (2, 0.5)
    (tmp_path / run_folder.HISTORY_FILE).write_text("epoch,val_nway_r1\n1,0.4\n2")  # a row cut short
    assert run_folder.last_history_row(tmp_path, "val_nway_r1") == (1, 0.4)
    (tmp_path / run_folder.HISTORY_FILE).write_text("epoch,val_nway_r1\n" + "9" * 5000 + ",1\n")
    assert run_folder.last_history_row(tmp_path, "val_nway_r1") is None  # an epoch beyond any int: unreadable, no traceback
    assert run_folder.last_history_row(tmp_path / "none", None) == (0, None)


@pytest.mark.parametrize("given", ["", "../../elsewhere/RunPlan/0123456789ab", "0123456789AB", "0123456789a", " 0123456789ab"])
def test_a_plan_id_is_twelve_hex_digits_and_never_a_path(given, tmp_path):
    with pytest.raises(RunFolderError, match=r"expected a run plan's id, 12 hex digits") as refused:
        run_folder.check_plan_id(given)
    assert "\n" not in str(refused.value)
    with pytest.raises(RunFolderError):
        run_folder.plan_path(tmp_path, given)
    assert run_folder.plan_path(tmp_path, "0123456789ab") == tmp_path / "RunPlan" / "0123456789ab" / "run_plan.json"


def test_a_plan_record_is_its_id_s_and_a_summary_is_read_only_from_one(tmp_path):
    content = {field: [field] for field in run_folder.PLAN_ID_FIELDS}
    plan_id = stable_hash(content)
    path = run_folder.plan_path(tmp_path, plan_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**content, "summary": {"profile": "smoke", "dataset": {"name": "embedded"}}}))
    assert run_folder.read_plan_record(tmp_path, plan_id)[0]["profile"] == ["profile"]
    train = output(tmp_path, "Train", "e" * 12, {"params": {"plan": plan_id}})
    assert run_folder.plan_summary_of(train) == {"profile": "smoke", "dataset": {"name": "embedded"}}
    for text, problem in [
        (json.dumps({**content, "grid": ["edited"]}), "edited: its content is not the plan its name says"),
        ("[" * 100_000 + "]" * 100_000, "beyond what is read: it nests arrays or objects 100000 deep"),
        ("{", "not JSON, or cut off"),
    ]:
        path.write_text(text)
        data, said = run_folder.read_plan_record(tmp_path, plan_id)
        assert data is None and said.startswith(problem), said
        assert run_folder.plan_summary_of(train) == {}
    assert run_folder.read_plan_record(tmp_path, "f" * 12) == (None, "missing")
