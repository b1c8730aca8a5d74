"""What the project reads back, it checks (issue 46, item 1): every field of a real ``model.json`` edited in
turn, and the whole file damaged, is refused in one line by ``crossmodal export``; every field of a bundle's
model record edited in turn by ``crossmodal evaluate`` and ``crossmodal serve``; the checks on hand-built
records; and a Train folder copied elsewhere loads and embeds as its Evaluate did (issue 47, item 4)."""

from __future__ import annotations

import ast
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.inference import embed_pairs
from models.record_check import ModelRecordError, record_checksum
from models.trained import ModelRecord, load_trained, read_record
from pipeline.engine.task import threads_per_worker
from pipeline.tasks.train_inputs import load_pair_data
from tests.cli_runs import crossmodal

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def leaves(value: Any, prefix: str = "") -> list[str]:
    """Every leaf's dotted path of a JSON value (an empty object or list is a leaf)."""
    if isinstance(value, dict) and value:
        return [path for key, item in value.items() for path in leaves(item, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def edited(value: Any) -> Any:
    """Another plausible value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 0.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + value[:1] if value else [1]
    if isinstance(value, dict):
        return {"x": 1}
    return 1  # null


def with_edit(payload: dict[str, Any], path: str) -> dict[str, Any]:
    changed = copy.deepcopy(payload)
    *parents, last = path.split(".")
    target = changed
    for key in parents:
        target = target[key]
    target[last] = edited(target[last])
    return changed


def run(*args: str) -> tuple[int, str]:
    done = crossmodal(*args, check=False)
    return done.returncode, done.stderr


def assert_one_line_refusal(code: int, stderr: str, *said: str) -> None:
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert any(phrase in lines[0] for phrase in said), lines[0]


@pytest.fixture(scope="module")
def run_parts(smoke_run):
    task, _, _, root = smoke_run
    search_index = task.requires().search_index()
    evaluate = search_index.requires()["evaluate"]
    return Path(root), search_index, evaluate, search_index.requires()["train"]


@pytest.fixture()
def train_copy(run_parts, tmp_path):
    """The SearchIndex's Train folder copied into a run root of links to the smoke run's other outputs."""
    root, _, _, train = run_parts
    mini = tmp_path / "runs"
    mini.mkdir()
    for family in root.iterdir():
        if family.name != "Train":
            (mini / family.name).symlink_to(family)
    target = mini / "Train" / train.output_dir().name
    shutil.copytree(train.output_dir(), target)
    return target


def test_every_field_of_a_trained_model_json_edited_is_refused_by_export(train_copy, tmp_path):
    record_file = train_copy / "model.json"
    original = json.loads(record_file.read_text())
    assert original["format"] == 2 and original["checksum"] == record_checksum(original)
    code, stderr = run("export", str(train_copy), str(tmp_path / "fine"))
    assert code == 0, stderr
    for path in leaves(original):
        record_file.write_text(json.dumps(with_edit(original, path)))
        code, stderr = run("export", str(train_copy), str(tmp_path / f"out-{path}"))
        assert_one_line_refusal(code, stderr, path, "changed since")
        assert not (tmp_path / f"out-{path}").exists(), "nothing is exported from an edited record"
    whole = {
        "empty": "",
        "a list": "[]",
        "deep": "[" * 100_000 + "]" * 100_000,
        "huge": json.dumps({**original, "extra": {"note": "x" * 2_000_000}}),
        "cut": json.dumps(original)[:40],
    }
    for name, text in whole.items():
        record_file.write_text(text)
        code, stderr = run("export", str(train_copy), str(tmp_path / f"whole-{name.replace(' ', '-')}"))
        assert_one_line_refusal(code, stderr, "model.json")


def test_every_field_of_a_bundles_model_record_edited_is_refused_by_evaluate_and_serve(run_parts, smoke_test_table, tmp_path, monkeypatch):
    _, search_index, _, _ = run_parts
    table_dir, _, _ = smoke_test_table
    bundle = tmp_path / "bundle"
    shutil.copytree(search_index.output_path("bundle"), bundle)
    manifest_file = bundle / "bundle.json"
    manifest = json.loads(manifest_file.read_text())
    index = search_index.output_path("index")

    def refuse_to_bind(*_: Any) -> None:
        raise AssertionError("serve got as far as binding its address with an edited bundle")

    monkeypatch.setattr("serving.arguments.bind_socket", refuse_to_bind)
    table = str(table_dir / "pairs.csv")
    paths = [f"model.{path}" for path in leaves(manifest["model"])] + ["image.image_size", "image.mean", "text.max_tokens"]
    for path in paths:
        manifest_file.write_text(json.dumps(with_edit(manifest, path)))
        code, stderr = run("evaluate", str(bundle), "--table", table, "--out", str(tmp_path / "eval"))
        assert_one_line_refusal(code, stderr, path)
        code, stderr = run("serve", str(index), "--bundle", str(bundle), "--port", "0")
        assert_one_line_refusal(code, stderr, path)
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda r: r.update(format=7), "format"),
        (lambda r: r["encoder"].update(embed_dim="wide"), "encoder.embed_dim"),
        (lambda r: r.update(model="vsee"), "model"),
        (lambda r: r["encoder"].update(backbone="resnet5"), "encoder.backbone"),
        (lambda r: r["encoder"].update(trunk="partly"), "encoder.trunk"),
        (lambda r: r.update(mean=[float("nan"), 0.5, 0.5]), "mean"),
        (lambda r: r.update(std=[0.5, 0.0, 0.5]), "std"),
        (lambda r: r.update(max_text_tokens=0), "max_text_tokens"),
        (lambda r: r.update(image_size=4), "image_size"),
        (lambda r: r.update(features="spatial"), "features"),
        (lambda r: r["vocabulary"].update(file="/etc/passwd"), "vocabulary.file"),
        (lambda r: r["vocabulary"].update(size=3), "vocabulary.size"),
        (lambda r: r.update(frozen_trunk=None), "frozen_trunk"),
        (lambda r: r.update(surprise=1), "unknown field"),
        (lambda r: r.update(image_size=64), "checksum"),
    ],
)
def test_the_record_check_names_the_field(run_parts, edit, said):
    record = json.loads(run_parts[3].output_path("model").read_text())
    edit(record)
    with pytest.raises(ModelRecordError, match=said):
        ModelRecord.from_json(record)


def test_a_copied_train_folder_loads_and_embeds_as_its_evaluate_did(run_parts, tmp_path):
    """The Train folder alone, moved away from its run root, holds its record, vocabulary and weights."""
    _, _, evaluate, train = run_parts
    alone = tmp_path / "elsewhere" / "my-model"
    shutil.copytree(train.output_dir(), alone)
    record = read_record(alone / "model.json")
    assert record.vocabulary["file"] == "vocab.json" and (alone / "vocab.json").is_file()
    model, _ = load_trained(record, alone / "model_best.pt")
    data, manifest = load_pair_data(evaluate.requires(), record.max_text_tokens)
    vocab = json.loads((alone / record.vocabulary["file"]).read_text())
    assert vocab == train.requires()["words"].vocabulary()[0]
    rows = evaluate.load("test_rows")
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_per_worker())  # as the Evaluate ran (a serve test in this process sets 1)
    try:
        out = embed_pairs(model, torch.device("cpu"), data, rows, record.image_size)
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(out["image"], evaluate.load("test_image"))
    assert np.array_equal(out["text"], evaluate.load("test_text"))


def test_one_reader_of_a_model_checkpoint():
    """Export, Evaluate, COCOS, the search index and training's best checkpoint read a model checkpoint through
    ``models.trained.read_model_checkpoint``: ``torch.load`` elsewhere reads a training state (resume), ImageNet
    weights or a bundle's weights file, never a model checkpoint."""
    found = {}
    for package in ("pipeline", "serving", "models", "evaluation", "common", "data_recipes"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(ast.unparse(node.args[0]))
    assert found == {
        "models/trained.py": {"checkpoint"},
        "models/training/checkpoint.py": {"self.work_dir / loaded", "path"},
        "models/backbones.py": {"_lite0_weights_file()"},
        "serving/bundle.py": {"path / WEIGHTS_FILE"},
    }
