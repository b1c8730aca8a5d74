"""The one JSON reader (common/bounded_json.py, issue 53 item 1): its depth count against a naive character-by-character
reference (strings, escapes and the pieces a long text is read in), its three bounds and their one-line refusals,
JSON Lines, and a scan of the code that fails on any other ``json.load(s)`` call."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pytest

from common import bounded_json
from common.bounded_json import (
    COMMAND_LINE,
    RECORD,
    BoundedJsonError,
    JsonLimits,
    NotJsonError,
    json_depth,
    loads_bounded,
    loads_bounded_lines,
    read_bounded,
)

ROOT = Path(__file__).resolve().parents[1]
#: the packages whose JSON reads go through the bounded reader
SCANNED = ("common", "data_recipes", "models", "evaluation", "serving", "pipeline", "benchmarks")
#: the calls left to ``json.loads``, each with why it reads no outside input
NOT_OUTSIDE_INPUT = {
    "common/bounded_json.py": "the bounded reader itself",
    # the engine's own processes talking to each other, and its package data (issue 52 moves the engine; its
    # spawned child's answer and parameters are written by this code for this code)
    "pipeline/engine/spawn.py": "the answer of the child process the engine started",
    "pipeline/engine/child.py": "the parameters the engine's parent process wrote",
    "pipeline/engine/code_versions.py": "the package's own code_versions.json (a maintainer's record)",
}


def naive_depth(text: str) -> int:
    """The nesting depth, one character at a time: the reference the vectorised count must equal."""
    depth = deepest = 0
    inside = escaped = False
    for char in text:
        if inside:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def random_json(rng: random.Random, level: int = 0) -> object:
    """Values whose strings hold brackets, quotes and runs of backslashes (the escapes the count must follow)."""
    leaves = [1, None, [], {}, "a\\\"[{", "\\\\", "x]}\\", "\\\\\\\"[", "\\" * 7 + "[", '"', "}}]]"]
    roll = rng.random()
    if level > 6 or roll < 0.3:
        return rng.choice(leaves)
    if roll < 0.65:
        return [random_json(rng, level + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k[", '\\"{', "z", "\\\\"]) + str(i): random_json(rng, level + 1) for i in range(rng.randint(0, 3))}


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 4 << 20])
def test_the_depth_equals_a_character_by_character_count_whatever_the_pieces(piece, monkeypatch):
    """Read in pieces of one byte up: a backslash run or a string that crosses a piece's end is carried over."""
    monkeypatch.setattr(bounded_json, "_SCAN_CHUNK", piece)
    rng = random.Random(piece)
    for _ in range(200):
        text = json.dumps(random_json(rng))
        assert json_depth(text.encode()) == naive_depth(text), text
    assert json_depth(b'["\\\\"]') == 1 and json_depth(b'["\\"]]"]') == 1 and json_depth(b'"[[["') == 0


def test_each_bound_is_one_line_naming_what_was_read():
    what = "--set neighbors.k"
    with pytest.raises(BoundedJsonError, match=r"^--set neighbors.k holds an integer of 5,000 digits; at most 100$") as big:
        loads_bounded("9" * 5000, what, COMMAND_LINE)  # Python's own limit is 4300: a ValueError, not this line
    assert big.value.bound == "digits"
    with pytest.raises(BoundedJsonError, match=r"holds an integer of 101 digits") as negative:
        loads_bounded("[1, -" + "9" * 101 + "]", what, COMMAND_LINE)
    assert negative.value.bound == "digits"
    assert loads_bounded("9" * 100, what, COMMAND_LINE) == int("9" * 100)
    assert loads_bounded('"' + "9" * 500 + '"', what, COMMAND_LINE) == "9" * 500  # digits in a string are text
    with pytest.raises(BoundedJsonError, match=r"nests arrays or objects 30000 deep; at most 32$") as deep:
        loads_bounded("[" * 30000 + "]" * 30000, what, COMMAND_LINE)
    assert deep.value.bound == "depth" and not isinstance(deep.value, NotJsonError)
    with pytest.raises(BoundedJsonError, match=r"is 1,048,577 bytes; at most 1,048,576 are read"):
        loads_bounded(" " * (1 << 20) + "1", what, COMMAND_LINE)
    with pytest.raises(NotJsonError, match=r"^--set neighbors.k is not JSON \(Expecting"):
        loads_bounded("[1,", what, COMMAND_LINE)
    value = loads_bounded("[" * 32 + "]" * 32, what, COMMAND_LINE)  # at the limit: read
    for _ in range(31):
        value = value[0]
    assert value == []


def test_a_limit_at_its_edge_is_read_and_one_past_it_is_refused():
    limits = JsonLimits(max_bytes=10, max_depth=2, max_int_digits=3)
    assert loads_bounded("[[999]]", "x", limits) == [[999]]
    for text, bound in [("[[[1]]]", "depth"), ("[1000]", "digits"), ("[1,2,3,4,5]", "bytes")]:
        with pytest.raises(BoundedJsonError) as refused:
            loads_bounded(text, "x", limits)
        assert refused.value.bound == bound, text


def test_a_file_is_read_no_further_than_its_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 600_000 + "1]")
    with pytest.raises(BoundedJsonError, match=rf"^{path} is 1,048,577 bytes; at most 1,048,576"):
        read_bounded(path, JsonLimits(1 << 20, 8))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BoundedJsonError, match=r"deep.json nests arrays or objects 100000 deep; at most 64"):
        read_bounded(tmp_path / "deep.json", RECORD)


def test_json_lines_are_checked_once_and_a_bad_line_is_named(tmp_path):
    text = '{"a": 1}\n\n{"a": "\udcff"}\n'  # a byte that was not UTF-8 stays for the row checks to reject
    assert list(loads_bounded_lines(text, "pairs.jsonl")) == [(1, {"a": 1}), (3, {"a": "\udcff"})]
    with pytest.raises(NotJsonError, match=r"^pairs.jsonl line 2 is not JSON"):
        list(loads_bounded_lines('{"a": 1}\n{"a":\n', "pairs.jsonl"))
    with pytest.raises(BoundedJsonError, match=r"^pairs.jsonl nests arrays or objects 5000 deep; at most 64"):
        list(loads_bounded_lines('{"a": 1}\n' + "[" * 5000 + "]" * 5000 + "\n", "pairs.jsonl"))


def json_load_calls(path: Path) -> list[int]:
    """Lines of ``path`` that call ``json.load``/``json.loads`` (or name them from ``json``), a round trip of the
    project's own value (``json.loads(json.dumps(...))``) left out."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "json" and {a.name for a in node.names} & {"load", "loads"}:
            found.append(node.lineno)
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func = node.func
        if isinstance(func.value, ast.Name) and func.value.id == "json" and func.attr in ("load", "loads"):
            argument = node.args[0] if node.args else None
            round_trip = (
                isinstance(argument, ast.Call)
                and isinstance(argument.func, ast.Attribute)
                and isinstance(argument.func.value, ast.Name)
                and (argument.func.value.id, argument.func.attr) == ("json", "dumps")
            )
            if not round_trip:
                found.append(node.lineno)
    return found


def test_no_json_is_parsed_outside_the_bounded_reader():
    """Every ``json.load(s)`` in the project's packages is the bounded reader's, or one of the few listed with why
    they read no outside input."""
    calls = {
        str(path.relative_to(ROOT)): lines
        for package in SCANNED
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := json_load_calls(path))
    }
    unlisted = {path: lines for path, lines in calls.items() if path not in NOT_OUTSIDE_INPUT}
    assert unlisted == {}, f"parse these with common.bounded_json (loads_bounded / read_bounded): {unlisted}"
    assert set(NOT_OUTSIDE_INPUT) <= set(calls), "a listed exception no longer parses JSON: drop it from the list"


def test_the_scan_finds_what_it_must(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json\nfrom json import loads\njson.loads(text)\njson.load(handle)\njson.loads(json.dumps(value))\n"
    )
    assert json_load_calls(sample) == [2, 3, 4]
