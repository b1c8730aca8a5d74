"""Each setting declared once (issue 47): ``python -m pipeline settings`` lists every path of the tree exactly once
with its value, range or choices, kind and description, read from the declarations; docs/usage.md's table is that
listing and stays current; a profile states only what differs from the defaults and a value of a profile out of
range is refused when the run is planned, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from common.settings import info_of
from pipeline.__main__ import main
from pipeline.config.changes import apply_change
from pipeline.config.checks import RunConfigurationError
from pipeline.config.profiles import PROFILES, Profile
from pipeline.config.run_settings import RunSettings
from pipeline.config.settings_json import as_json
from pipeline.run.settings_list import TABLE_END, TABLE_START
from tests.fault_table import run_command

ROOT = Path(__file__).resolve().parents[1]


def settings_command(*args: str) -> subprocess.CompletedProcess:
    """The command in a process of its own (no recipe or variant a test registered is listed)."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "settings", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def declared_leaves(node: object, prefix: str = "") -> list[str]:
    """Every field of the tree that is no group, by path (a naive walk of the dataclasses)."""
    paths = []
    for field in fields(node):
        value = getattr(node, field.name)
        paths += declared_leaves(value, f"{prefix}{field.name}.") if is_dataclass(value) else [f"{prefix}{field.name}"]
    return paths


def test_every_path_is_listed_once_with_its_value_range_kind_and_description():
    done = settings_command("--profile", "demo", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    paths = [row["path"] for row in rows]
    assert len(paths) == len(set(paths)), "a path is listed twice"
    listed = {path.split(".<")[0] for path in paths}
    assert set(declared_leaves(RunSettings())) == listed, "every declared setting is listed, and nothing else"
    assert all(row["description"] and row["accepts"] and row["kind"] for row in rows)
    by_path = {row["path"]: row for row in rows}
    assert by_path["train.epochs"]["value"] == 20 and by_path["train.epochs"]["accepts"] == ">= 1"
    assert by_path["dedup.threshold"]["accepts"] == "in (0, 1]"
    assert by_path["train.num_workers"]["kind"] == "operational" and by_path["train.amp"]["kind"] == "significant"
    assert by_path["train.trunk_batchnorm"]["kind"] == "significant when the trunk trains"
    assert "top<k>" in by_path["train.trunk"]["accepts"] and "val_nway_r1" in by_path["train.selection"]["accepts"]
    assert not by_path["seeds_by_variant"]["settable"] and by_path["seeds"]["settable"]
    assert by_path["data.options.<name>"]["settable"]


def test_the_listing_shows_a_profile_and_the_run_s_changes():
    done = run_command(main, ["settings", "--profile", "smoke", "--set", "neighbors.k=30"])
    assert done.status == 0
    assert "* neighbors.k = 30" in done.stdout and "* train.epochs = 2" in done.stdout
    assert "  dedup.threshold = 0.7" in done.stdout, "a default is not marked"


def test_a_typo_is_one_line_that_points_to_the_listing():
    done = run_command(main, ["settings", "--set", "doc2vec.windw=3"])
    assert done.status == 2 and done.stderr.count("\n") == 1
    assert "did you mean 'window'" in done.stderr and "python -m pipeline settings lists every path" in done.stderr


def test_docs_usage_table_is_the_generated_one():
    text = (ROOT / "docs" / "usage.md").read_text()
    table = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    done = settings_command("--markdown")
    assert done.returncode == 0, done.stderr
    assert table == done.stdout.strip(), "docs/usage.md's settings table is stale: paste `python -m pipeline settings --markdown`"


def test_a_profile_value_out_of_range_is_refused_by_plan_in_one_line(tmp_path):
    bad = Profile("out-of-range", {"dedup.threshold": 0.7, "train": {"epochs": 0}})
    with PROFILES.temporarily(bad.name, bad):
        done = run_command(main, ["plan", "--profile", bad.name, "--run-root", str(tmp_path / "runs")])
        listed = run_command(main, ["settings", "--profile", bad.name])
    assert done.status == 2 and done.stderr == "error: profile 'out-of-range': train.epochs: must be >= 1, got 0\n"
    assert listed.status == 2 and listed.stderr == done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", PROFILES.names())
def test_a_profile_states_only_what_differs_from_the_defaults(name):
    """Each of a profile's changes, applied in order from the defaults, changes the settings: none restates a
    default (or an earlier change), so the default lives in its declaration alone."""
    settings = RunSettings()
    for path, value in PROFILES.get(name).changes.items():
        node = settings
        for part in path.split("."):
            node = getattr(node, part, None)
        items = value.items() if is_dataclass(node) else [(None, value)]
        for key, item in items:
            where = f"{path}.{key}" if key else path
            changed = apply_change(settings, where, item, from_profile=True)
            assert as_json(changed) != as_json(settings), f"profile {name}: {where}={item!r} is what it was already"
            settings = changed


def test_a_setting_only_a_profile_sets_is_no_run_change():
    with pytest.raises(RunConfigurationError, match="the run has no setting 'loss_defaults'"):
        apply_change(RunSettings(), "loss_defaults.pvse_mil.max_violation", True)
    changed = apply_change(RunSettings(), "loss_defaults.pvse_mil.max_violation", False, from_profile=True)
    assert changed.loss_defaults == {"pvse_mil": {"max_violation": False}}


def test_every_field_of_the_tree_is_declared():
    """A field added without ``setting(...)`` (no description, no range) would not list: refused here."""

    def walk(node: object) -> None:
        for field in fields(node):
            info_of(field)  # a TypeError for an undeclared field
            if is_dataclass(getattr(node, field.name)):
                walk(getattr(node, field.name))

    walk(RunSettings())
