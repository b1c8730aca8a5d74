"""Every recipe's fixture (tests/fixtures/recipes/make_fixtures.py) through the smoke FullRun: a valid
manifest with exactly the pairs the fixture should give, a trained variant with finite losses, and a
report; the COCO fixture (several captions per image) also produces Table 2 (Thomas & Kovashka §4.3)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import luigi
import pytest

from data_recipes import CAPTION_GROUP_RECIPES
from data_recipes.manifest import check_manifest_columns
from data_recipes.validate import load_image_rgb
from models.training import HISTORY_FILE
from pipeline import FullRun, Split, Train
from pipeline.config.profiles import PROFILES
from pipeline.config.variants import TABLE_2, VARIANTS
from tests.fixtures.recipes import make_fixtures as fixtures
from tests.markdown_tables import section, table_row

SMOKE = PROFILES.get("smoke").settings()

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Expected:
    """What the smoke FullRun makes of a fixture: the pairs the recipe gives (``n_input``), what the recipe
    skips itself (its notes), the rejects by reason, and the near-duplicates the dedup removes."""

    n_input: int
    skipped: dict[str, int] = field(default_factory=dict)
    rejects: dict[str, int] = field(default_factory=dict)
    n_duplicates: int = 0
    variants: tuple[str, ...] = ("ours",)

    @property
    def n_kept(self) -> int:
        return self.n_input - sum(self.rejects.values()) - self.n_duplicates


EXPECTED = {
    # hand-made: 10 articles; one without an image (skipped), one with an empty article (rejected), two with
    # the same privacy-policy boilerplate (one removed as a duplicate); then the generated articles
    "politics": Expected(
        n_input=9
        + len(fixtures.POLITICS_SIDES) * len(fixtures.POLITICS_ISSUES) * fixtures.POLITICS_PER_ISSUE,
        skipped={"no_image": 1},
        rejects={"empty_text": 1},
        n_duplicates=1,
    ),
    # hand-made: 9 images, one with a blank caption; then the generated articles' images
    "goodnews": Expected(n_input=9 + fixtures.GOODNEWS_IMAGES, rejects={"empty_text": 1}),
    # Karpathy split: 4 hand-made images with 21 captions, generated images with 5 each; Table 2's grid
    "coco": Expected(n_input=21 + fixtures.COCO_IMAGES * fixtures.COCO_CAPTIONS_PER_IMAGE, variants=TABLE_2),
    # hand-made: 12 + 6 URLs of which 3 fail to download and 2 to resize; every generated URL succeeds
    "conceptual_captions": Expected(
        n_input=13 + fixtures.CC_TRAIN_LINES + fixtures.CC_VALIDATION_LINES,
        skipped={"failed_to_download": 3, "failed_to_resize": 2},
    ),
    # Karpathy split: 3 hand-made images and the generated ones, 5 captions each
    "flickr30k": Expected(n_input=15 + fixtures.FLICKR_IMAGES * 5),
    # hand-made: 8 rows, one with an empty text
    "pairs": Expected(n_input=8 + fixtures.PAIRS_ROWS, rejects={"empty_text": 1}),
}


@dataclass
class RecipeRun:
    task: FullRun
    result: luigi.execution_summary.LuigiRunResult
    trained: list[Train]
    split: Split


class TrainRecorder:
    """Collects the Train tasks that ran (SUCCESS after run())."""

    def __init__(self) -> None:
        self.trained: list[Train] = []

    def __call__(self, task: luigi.Task) -> None:
        if isinstance(task, Train):
            self.trained.append(task)


#: the recipe whose FullRun also runs the tuned protocol (a user's own table must take the whole path); the
#: others run the shared protocol only, which is what they test
TUNED_RECIPE = "pairs"


def run_full(recipe: str, raw_dir: Path, run_root: Path) -> RecipeRun:
    task = FullRun(
        profile="smoke",
        dataset=recipe,
        raw_dir=str(raw_dir),
        run_root=str(run_root),
        variants=list(EXPECTED[recipe].variants),
        protocol="both" if recipe == TUNED_RECIPE else "shared",
    )
    recorder = TrainRecorder()
    luigi.Task.event_handler(luigi.Event.SUCCESS)(recorder)
    try:
        result = luigi.build(
            [task], local_scheduler=True, detailed_summary=True, workers=1, log_level="WARNING"
        )
    finally:
        luigi.Task._event_callbacks[luigi.Task][luigi.Event.SUCCESS].discard(recorder)
    split = Split(profile="smoke", dataset=recipe, raw_dir=str(raw_dir), run_root=str(run_root))
    return RecipeRun(task, result, recorder.trained, split)


@pytest.fixture(scope="module")
def recipe_runs(tmp_path_factory):
    """One FullRun per recipe, built on first use and shared by the tests of this module."""
    runs: dict[str, RecipeRun] = {}

    def get(recipe: str) -> RecipeRun:
        if recipe not in runs:
            root = tmp_path_factory.mktemp(recipe)
            raw = fixtures.make_fixture(recipe, root / "raw")
            runs[recipe] = run_full(recipe, raw, root / "runs")
        return runs[recipe]

    return get


def read_history(train: Train) -> list[dict[str, float]]:
    with open(train.output_dir() / HISTORY_FILE, newline="") as handle:
        return [{key: float(value) for key, value in row.items()} for row in csv.DictReader(handle)]


@pytest.mark.parametrize("recipe", sorted(EXPECTED))
def test_recipe_fixture_trains_in_smoke_full_run(recipe, recipe_runs):
    run, expected = recipe_runs(recipe), EXPECTED[recipe]
    assert run.result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, run.result.summary_text

    report_json = json.loads(run.task.report_path().with_name("report.json").read_text())
    dataset, dedup = report_json["dataset"], report_json["dedup"]
    assert dataset["n_input"] == expected.n_input
    assert dataset["n_kept"] == expected.n_input - sum(expected.rejects.values())
    assert dataset["recipe_notes"]["skipped"] == expected.skipped
    assert dataset["rejects_by_reason"] == expected.rejects
    assert dedup["n_removed"] == expected.n_duplicates

    manifest = check_manifest_columns(run.split.manifest())
    assert len(manifest) == expected.n_kept
    assert manifest["pair_id"].is_unique
    assert (manifest["text"].str.strip() != "").all()
    assert set(manifest["split"]) == {"train", "val", "test"}
    for path in manifest["image_path"].unique():
        assert load_image_rgb(path).size == (fixtures.IMAGE_SIZE, fixtures.IMAGE_SIZE), path
    if recipe in CAPTION_GROUP_RECIPES:  # captions of one image never straddle two splits
        assert (manifest.groupby("group_id")["split"].nunique() == 1).all()

    planned = [variant for variant in expected.variants for _ in SMOKE.seeds_for(variant)]
    shared = [train for train in run.trained if not train.point]
    assert sorted(train.variant for train in shared) == sorted(planned)
    if recipe == TUNED_RECIPE:  # the tuned protocol on a user's own table: its trials and its report seeds
        payload = report_json["protocols"]
        assert set(payload["headlines"]) == {"shared", "tuned"} and len(payload["selections"]["ours"]["trials"]) == SMOKE.tuning.budget
    else:
        assert len(shared) == len(run.trained)
    for train in shared:
        history = read_history(train)
        assert [row["epoch"] for row in history] == [1.0, 2.0]  # the smoke profile's 2 epochs
        loss_columns = [column for column in history[0] if column.endswith("loss")]
        assert {"train_loss", "val_loss"} <= set(loss_columns)
        assert all(math.isfinite(row[column]) for row in history for column in loss_columns), history

    report = run.task.report_path()
    assert report.is_file() and report.with_name("report.html").is_file()
    assert "## Table 1" in report.read_text()


def test_coco_fixture_produces_table_2(recipe_runs):
    run = recipe_runs("coco")
    assert run.result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, run.result.summary_text
    manifest = run.split.manifest()
    captions_per_image = manifest.groupby("group_id").size()
    assert len(captions_per_image) == 4 + fixtures.COCO_IMAGES and captions_per_image.min() == 5
    # Karpathy's split: one hand-made test and one val image; generated: every period-th from the first
    # (test) and from the second (val), 5 captions each
    period, n_generated = fixtures.COCO_HELD_OUT_PERIOD, fixtures.COCO_IMAGES
    counts = manifest["split"].value_counts().to_dict()
    assert counts["test"] == 5 * (1 + len(range(0, n_generated, period)))
    assert counts["val"] == 5 * (1 + len(range(1, n_generated, period)))

    # the full ranking ranks each distinct image once, its five captions all positives (VSE++ protocol)
    payload = json.loads(run.task.report_path().with_name("report.json").read_text())
    assert {r["metrics"]["full_ranking"]["protocol"] for r in payload["per_run"]} == {"captions_per_image"}

    table_2 = section(run.task.report_path().read_text(), "Table 2")
    for variant in TABLE_2:
        row = table_row(table_2, VARIANTS[variant].label)
        image_to_text, text_to_image = float(row[1]), float(row[2])
        assert 0.0 <= image_to_text <= 1.0 and 0.0 <= text_to_image <= 1.0
