"""Each dataset recipe converts its fixture (published schema, tests/fixtures/recipes/) end to end into a
valid manifest: columns, pair counts, ids, groups, splits, text choices and skipped counts. The tests name
the hand-made items; the generated ones (make_fixtures) add to the counts."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from common.registry import Registry
from data_recipes import CAPTION_GROUP_RECIPES, RECIPES, build_recipe
from data_recipes.coco import find_official_files
from data_recipes.conceptual_captions import split_from_name
from data_recipes.manifest import ManifestError, check_manifest_columns, resolve_image_paths
from data_recipes.politics import first_sentences, iter_sentences, load_metadata
from tests.fixtures.recipes import make_fixtures as fixtures

# pairs of the generated part of each fixture
POLITICS_PER_SIDE = len(fixtures.POLITICS_ISSUES) * fixtures.POLITICS_PER_ISSUE
COCO_CAPTIONS = fixtures.COCO_IMAGES * fixtures.COCO_CAPTIONS_PER_IMAGE
FLICKR_CAPTIONS = fixtures.FLICKR_IMAGES * 5
CC_GENERATED = fixtures.CC_TRAIN_LINES + fixtures.CC_VALIDATION_LINES
HAND_MADE_GOODNEWS = "goodnews-5a0b1c2d3e4f5a6b7c8d9e0"  # prefix of the hand-made articles' pair ids


def split_sentences(text: str | None) -> list[str]:
    """All sentences of ``text`` (moved here from data_recipes.politics, where only this test used it)."""
    return list(iter_sentences(text))


def run_recipe(name: str, tmp_path: Path, raw: Path | None = None, **options):
    raw = raw if raw is not None else fixtures.make_fixture(name, tmp_path / "raw")
    return build_recipe(name, raw, tmp_path / "work", **options)


def assert_valid(result, expected_pairs: int) -> pd.DataFrame:
    """Columns check, unique ids, and every image path opens as an image."""
    manifest = check_manifest_columns(result.manifest)
    assert len(manifest) == expected_pairs
    assert manifest["pair_id"].is_unique
    for path in resolve_image_paths(manifest, result.image_root)["image_path"]:
        assert Path(path).is_absolute() and Path(path).is_file(), path
        with Image.open(path) as image:
            image.verify()
    return manifest


# --- sentence splitting (Politics, GoodNews text="article") ---------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Mr. Smith went to Washington. He met Sen. Jones at 3 p.m. on Jan. 5. The U.S. Senate voted.",
            [
                "Mr. Smith went to Washington.",
                "He met Sen. Jones at 3 p.m. on Jan. 5.",
                "The U.S. Senate voted.",
            ],
        ),
        (
            "The bill passed in the U.S. The president signed it.",
            ["The bill passed in the U.S.", "The president signed it."],
        ),
        (
            "Officials of the U.S. Department of State agreed. Others did not.",
            ["Officials of the U.S. Department of State agreed.", "Others did not."],
        ),
        (
            "John F. Kennedy spoke. Apple Inc. said nothing.",
            ["John F. Kennedy spoke.", "Apple Inc. said nothing."],
        ),
        (
            '"We will win," he said. "They lost." Then she left!',
            ['"We will win," he said.', '"They lost."', "Then she left!"],
        ),
        (
            "He is ranked No. 1 now. They said no. Then left.",
            ["He is ranked No. 1 now.", "They said no.", "Then left."],
        ),
        (
            "Prices rose 3.5 percent in Sept. 2019. Dr. Who agreed.",
            ["Prices rose 3.5 percent in Sept. 2019.", "Dr. Who agreed."],
        ),
        (
            "Headline without a period\n\nFirst  sentence\nhere. Second.",
            ["Headline without a period", "First sentence here.", "Second."],
        ),
        ("", []),
        (None, []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_first_sentences_keeps_n_and_rejects_zero():
    text = "One is here. Two is here. Three is here."
    assert first_sentences(text) == "One is here. Two is here."
    assert first_sentences(text, 1) == "One is here."
    assert first_sentences(text, 5) == text
    with pytest.raises(ValueError, match="n_sentences"):
        first_sentences(text, 0)


# --- Politics -----------------------------------------------------------------------------------


def test_politics_fixture_to_manifest(tmp_path):
    result = run_recipe("politics", tmp_path)
    manifest = assert_valid(result, expected_pairs=9 + 2 * POLITICS_PER_SIDE)
    assert result.notes["skipped"] == {"no_image": 1}
    assert all(path.startswith("imgs/") for path in manifest["image_path"])  # crawler paths re-rooted
    by_id = manifest.set_index("pair_id")
    assert by_id.loc["politics-left-immigration-0", "text"] == (
        "Children separated from their parents at the U.S. border are being held in shelters across the "
        "country. Mr. Trump blamed Democrats for the policy."
    )
    assert by_id.loc["politics-right-immigration-1", "text"] == (
        "A caravan of migrants reached the U.S. The group left Honduras last month."
    )
    assert (
        by_id.loc["politics-left-gun_control-0", "image_path"] == "imgs/LEFT/gun control/msnbc/77a1be02.jpg"
    )
    assert by_id.loc["politics-right-gun_control-2", "text"] == ""  # empty article: validation's job
    assert "side" not in manifest.columns
    truth = result.ground_truth
    assert list(truth.index) == list(manifest["pair_id"])
    assert truth["side"].value_counts().to_dict() == {
        "right": 5 + POLITICS_PER_SIDE,
        "left": 4 + POLITICS_PER_SIDE,
    }
    assert truth.loc["politics-left-immigration-1", "media_source"] == "huffpost"
    assert truth.loc["politics-right-gun_control-0", "issue"] == "gun control"


def test_politics_n_sentences_option(tmp_path):
    manifest = run_recipe("politics", tmp_path, n_sentences=1).manifest.set_index("pair_id")
    assert manifest.loc["politics-right-immigration-0", "text"] == (
        "President Trump renewed his call for border wall funding on Friday!"
    )


def _py2_str(payload: bytes) -> bytes:
    return b"U" + bytes([len(payload)]) + payload  # SHORT_BINSTRING: a Python 2 str


def test_politics_reads_python2_pickle_with_utf8_bytes(tmp_path):
    # {'left': {'immigration': [{'local_path': ..., 'content_text': 'Café ...'}]}} as Python 2 writes it
    body = (
        _py2_str(b"left")
        + b"}"
        + _py2_str(b"immigration")
        + b"]}"
        + _py2_str(b"local_path")
        + _py2_str(b"imgs/LEFT/immigration/cnn/a.jpg")
        + b"s"
        + _py2_str(b"content_text")
        + _py2_str("Café owners protested. Then they left.".encode())
        + b"s"
        + b"ass"
    )
    path = tmp_path / "py2.pkl"
    path.write_bytes(b"\x80\x02}" + body + b".")
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(path.read_bytes())
    data = load_metadata(path)
    assert data["left"]["immigration"][0]["content_text"] == "Café owners protested. Then they left."


def test_politics_needs_exactly_one_pickle(tmp_path):
    raw = fixtures.make_fixture("politics", tmp_path / "raw")
    (raw / "other.pkl").write_bytes(pickle.dumps({}))
    with pytest.raises(FileNotFoundError, match="metadata="):
        build_recipe("politics", raw, tmp_path / "work")
    result = build_recipe("politics", raw, tmp_path / "work", metadata="politics_metadata.pkl")
    assert len(result.manifest) == 9 + 2 * POLITICS_PER_SIDE


# --- GoodNews -----------------------------------------------------------------------------------


def test_goodnews_captions_with_published_splits(tmp_path):
    result = run_recipe("goodnews", tmp_path)
    manifest = assert_valid(result, expected_pairs=9 + fixtures.GOODNEWS_IMAGES).set_index("pair_id")
    assert result.notes["skipped"] == {} and result.notes["images_without_split"] == 0
    assert "group_id" not in manifest.columns
    article = "5a0b1c2d3e4f5a6b7c8d9e02"
    assert [i for i in manifest.index if article in i] == [f"goodnews-{article}_{ix}" for ix in (0, 2, 10)]
    assert manifest.loc[f"goodnews-{article}_10", "image_path"] == f"images/{article}_10.jpg"
    assert (
        manifest.loc[f"goodnews-{article}_10", "text"] == "The Centre Court roof was closed because of rain."
    )
    assert manifest.loc[f"goodnews-{article}_10", "split"] == "test"
    hand_made = manifest[manifest.index.str.startswith(HAND_MADE_GOODNEWS)]
    assert hand_made["split"].value_counts().to_dict() == {"train": 5, "test": 2, "val": 2}
    assert manifest.loc["goodnews-5a0b1c2d3e4f5a6b7c8d9e04_3", "text"] == ""  # blank caption kept


def test_goodnews_article_text_groups_images_of_an_article(tmp_path):
    manifest = run_recipe("goodnews", tmp_path, text="article").manifest.set_index("pair_id")
    first = manifest.loc["goodnews-5a0b1c2d3e4f5a6b7c8d9e01_0"]
    assert first["text"] == (
        "WASHINGTON \u2014 Senate Republicans on Tuesday unveiled a bill to overhaul the U.S. health care "
        "system. Mr. McConnell said a vote could come next week."
    )
    assert manifest.loc["goodnews-5a0b1c2d3e4f5a6b7c8d9e01_1", "text"] == first["text"]
    assert manifest["group_id"].nunique() == 4 + fixtures.GOODNEWS_ARTICLES
    assert (
        manifest.loc["goodnews-5a0b1c2d3e4f5a6b7c8d9e02_2", "group_id"] == "goodnews-5a0b1c2d3e4f5a6b7c8d9e02"
    )
    one = run_recipe("goodnews", tmp_path / "one", text="article", n_sentences=1).manifest.set_index(
        "pair_id"
    )
    assert one.loc["goodnews-5a0b1c2d3e4f5a6b7c8d9e03_0", "text"] == (
        "SANTA ROSA, Calif. \u2014 Wildfires tore through Northern California's wine country on Monday, "
        "forcing thousands to flee."
    )


def test_goodnews_without_split_file_and_bad_option(tmp_path):
    raw = fixtures.make_fixture("goodnews", tmp_path / "raw")
    (raw / "img_splits.json").unlink()
    result = build_recipe("goodnews", raw, tmp_path / "work")
    assert "split" not in result.manifest.columns and len(result.manifest) == 9 + fixtures.GOODNEWS_IMAGES
    with pytest.raises(ValueError, match="text="):
        build_recipe("goodnews", raw, tmp_path / "work", text="headline")


# --- COCO ---------------------------------------------------------------------------------------


def test_coco_official_annotations(tmp_path):
    result = run_recipe("coco", tmp_path, annotations="official")
    manifest = assert_valid(result, expected_pairs=21 + COCO_CAPTIONS).set_index("pair_id")
    assert "split" not in manifest.columns
    per_image = manifest.groupby("group_id").size()
    hand_made = {"coco-image-139": 5, "coco-image-285": 5, "coco-image-391895": 5, "coco-image-522418": 6}
    assert per_image[list(hand_made)].to_dict() == hand_made
    assert len(per_image) == 4 + fixtures.COCO_IMAGES and per_image.min() == fixtures.COCO_CAPTIONS_PER_IMAGE
    assert manifest.loc["coco-379917", "text"] == "A woman standing in a kitchen by a window"
    assert manifest.loc["coco-379917", "image_path"] == "val2017/000000000139.jpg"
    assert manifest.loc["coco-770337", "image_path"] == "train2017/000000391895.jpg"
    assert result.notes["files"] == ["captions_train2017.json", "captions_val2017.json"]


def test_coco_karpathy_split_on_2017_images(tmp_path):
    result = run_recipe("coco", tmp_path)  # auto: dataset_coco.json is there
    manifest = assert_valid(result, expected_pairs=21 + COCO_CAPTIONS)
    assert result.notes["annotations"] == "karpathy"
    per_group = manifest.groupby("group_id")["split"].agg(set).to_dict()
    hand_made = ("coco-image-391895", "coco-image-522418", "coco-image-139", "coco-image-285")
    assert {group: per_group[group] for group in hand_made} == {
        "coco-image-391895": {"test"},
        "coco-image-522418": {"train"},  # restval -> train
        "coco-image-139": {"val"},
        "coco-image-285": {"train"},
    }
    paths = manifest.groupby("group_id")["image_path"].first().to_dict()
    assert paths["coco-image-391895"] == "train2017/000000391895.jpg"  # 2014 name mapped to 2017 file
    generated = range(fixtures.COCO_FIRST_SENTID, fixtures.COCO_FIRST_SENTID + COCO_CAPTIONS)
    assert set(manifest["pair_id"]) == {f"coco-karpathy-{i}" for i in [*range(21), *generated]}


def test_coco_karpathy_on_2014_images_and_restval_option(tmp_path):
    raw = fixtures.make_coco(tmp_path / "raw", image_folders=("val2014",))
    result = build_recipe("coco", raw, tmp_path / "work", restval="val")
    manifest = assert_valid(result, expected_pairs=21 + COCO_CAPTIONS)
    assert manifest["image_path"].str.startswith("val2014/COCO_val2014_").all()
    assert set(manifest.loc[manifest["group_id"] == "coco-image-522418", "split"]) == {"val"}


def test_coco_prefers_newest_annotation_year_and_reports_missing_karpathy(tmp_path):
    raw = fixtures.make_fixture("coco", tmp_path / "raw")
    (raw / "annotations" / "captions_val2014.json").write_text(
        (raw / "annotations" / "captions_val2017.json").read_text()
    )
    assert [p.name for p in find_official_files(raw)] == ["captions_train2017.json", "captions_val2017.json"]
    (raw / "dataset_coco.json").unlink()
    with pytest.raises(FileNotFoundError, match="caption_datasets.zip"):
        build_recipe("coco", raw, tmp_path / "work", annotations="karpathy")


# --- Conceptual Captions --------------------------------------------------------------------------


def _tsv_captions(raw: Path) -> dict[str, str]:
    captions = {}
    for name in ("Train_GCC-training.tsv", "Validation_GCC-1.1.0-Validation.tsv"):
        for line in (raw / name).read_text().splitlines():
            caption, url = line.split("\t")
            captions[url] = caption
    return captions


def test_conceptual_captions_img2dataset_output(tmp_path):
    raw = fixtures.make_fixture("conceptual_captions", tmp_path / "raw")
    result = build_recipe("conceptual_captions", raw, tmp_path / "work", splits="folders")
    manifest = assert_valid(result, expected_pairs=13 + CC_GENERATED)
    assert result.notes["skipped"] == {"failed_to_download": 3, "failed_to_resize": 2}
    assert manifest["split"].value_counts().to_dict() == {
        "train": 9 + fixtures.CC_TRAIN_LINES,
        "val": 4 + fixtures.CC_VALIDATION_LINES,
    }
    assert "cc-train-000000002" not in set(manifest["pair_id"])  # a /404/ URL
    by_id = manifest.set_index("pair_id")
    assert (
        by_id.loc["cc-train-000010001", "text"]
        == "the jetty : different types of plants to establish a variety of ecosystems ."
    )
    assert by_id.loc["cc-val-000000003", "image_path"] == "val/00000/000000003.jpg"  # files format: in place
    extracted = Path(by_id.loc["cc-train-000020001", "image_path"])  # webdataset: extracted to work_dir
    assert extracted.is_relative_to(tmp_path / "work")
    assert set(manifest["text"]) <= set(_tsv_captions(raw).values())
    again = build_recipe("conceptual_captions", raw, tmp_path / "work", splits="folders")
    pd.testing.assert_frame_equal(again.manifest, result.manifest)


def test_conceptual_captions_splits_option(tmp_path):
    raw = fixtures.make_fixture("conceptual_captions", tmp_path / "raw")
    # the release's two downloads name train and val only: by default the pipeline splits every pair
    auto = build_recipe("conceptual_captions", raw, tmp_path / "work")
    assert "split" not in auto.manifest.columns and len(auto.manifest) == 13 + CC_GENERATED
    assert auto.notes["splits"] == "hash"
    assert auto.notes["folder_splits"] == {"train": "train", "val": "val"}
    # with a folder naming the test split too, the folders' splits are kept
    shutil.copytree(raw / "val", raw / "cc3m_test")
    three = build_recipe("conceptual_captions", raw, tmp_path / "work")
    assert three.notes["splits"] == "folders"
    n_val = 4 + fixtures.CC_VALIDATION_LINES
    assert three.manifest["split"].value_counts().to_dict() == {
        "train": 9 + fixtures.CC_TRAIN_LINES,
        "val": n_val,
        "test": n_val,
    }
    hashed = build_recipe("conceptual_captions", raw, tmp_path / "work", splits="hash")
    assert "split" not in hashed.manifest.columns and hashed.notes["splits"] == "hash"
    with pytest.raises(ValueError, match="splits="):
        build_recipe("conceptual_captions", raw, tmp_path / "work", splits="karpathy")


def test_conceptual_captions_parquet_bytes_and_files_without_metadata(tmp_path):
    tsv = fixtures.HERE / "conceptual_captions" / "Train_GCC-training.tsv"
    parquet_out = fixtures.simulate_img2dataset(
        tsv, tmp_path / "as_parquet", output_format="parquet", shard_size=4
    )
    result = build_recipe("conceptual_captions", parquet_out, tmp_path / "work")
    manifest = assert_valid(result, expected_pairs=9)
    assert "split" not in manifest.columns and manifest["pair_id"].str.match(r"^cc-\d{9}$").all()
    assert result.notes["skipped"] == {"failed_to_download": 2, "failed_to_resize": 1}

    files_out = fixtures.simulate_img2dataset(
        tsv, tmp_path / "files", output_format="files", save_metadata=False
    )
    result = build_recipe("conceptual_captions", files_out, tmp_path / "work2")
    assert_valid(result, expected_pairs=9)
    assert result.notes["skipped"] == {}  # without the parquet, failures leave no trace


def test_conceptual_captions_split_names_and_missing_output(tmp_path):
    assert [split_from_name(n) for n in ("train", "cc3m_validation", "test", "shards", None)] == [
        "train",
        "val",
        "test",
        None,
        None,
    ]
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="img2dataset"):
        build_recipe("conceptual_captions", tmp_path / "empty", tmp_path / "work")


# --- Flickr30k ----------------------------------------------------------------------------------


def test_flickr30k_token_file_and_karpathy_agree(tmp_path):
    token = run_recipe("flickr30k", tmp_path / "token", annotations="token")
    token_manifest = assert_valid(token, expected_pairs=15 + FLICKR_CAPTIONS)
    assert token.notes["skipped"] == {"malformed_line": 1}
    per_image = token_manifest.groupby("group_id").size()
    hand_made = ["flickr30k-1000092795", "flickr30k-10002456", "flickr30k-1000268201"]
    assert len(per_image) == 3 + fixtures.FLICKR_IMAGES and (per_image == 5).all()
    karpathy = run_recipe("flickr30k", tmp_path / "karpathy")
    karpathy_manifest = assert_valid(karpathy, expected_pairs=15 + FLICKR_CAPTIONS)
    assert karpathy.notes["annotations"] == "karpathy"
    merged = token_manifest.merge(karpathy_manifest, on="pair_id", suffixes=("_token", "_karpathy"))
    assert len(merged) == 15 + FLICKR_CAPTIONS and (merged["text_token"] == merged["text_karpathy"]).all()
    assert karpathy_manifest.groupby("group_id")["split"].first()[hand_made].tolist() == [
        "train",
        "val",
        "test",
    ]
    assert (
        token_manifest.set_index("pair_id").loc["flickr30k-10002456-3", "text"]
        == "Four men on top of a tall structure ."
    )


# --- pairs --------------------------------------------------------------------------------------


def test_pairs_csv(tmp_path):
    result = run_recipe("pairs", tmp_path)
    manifest = assert_valid(result, expected_pairs=8 + fixtures.PAIRS_ROWS)
    assert list(manifest["pair_id"]) == [f"pairs-{i}" for i in range(8 + fixtures.PAIRS_ROWS)]
    hand_made = manifest.iloc[:8]
    assert list(hand_made["split"].fillna("")) == [
        "train",
        "train",
        "val",
        "test",
        "",
        "train",
        "val",
        "train",
    ]
    assert list(hand_made["group_id"].fillna("")) == ["dog", "dog", "", "", "", "", "forest", "forest"]
    assert manifest.iloc[8:][["split", "group_id"]].isna().all().all()
    assert manifest.loc[3, "text"] == 'The city at night: lights, traffic and "noise".'
    assert manifest.loc[5, "text"] == ""
    assert set(manifest["source"]) == {"pairs.csv"}


def test_pairs_jsonl_and_parquet_with_absolute_paths(tmp_path):
    image = tmp_path / "elsewhere" / "img.jpg"
    fixtures.write_image(image)
    (tmp_path / "data").mkdir()
    fixtures.write_image(tmp_path / "data" / "rel.jpg")
    records = [
        {"pair_id": "a", "image_path": str(image), "text": "absolute", "split": "validation", "group_id": 7},
        {"pair_id": "b", "image_path": "rel.jpg", "text": "relative", "split": None, "group_id": None},
    ]
    jsonl = tmp_path / "data" / "my_pairs.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records))
    result = build_recipe("pairs", jsonl, tmp_path / "work")
    manifest = assert_valid(result, expected_pairs=2)
    assert list(manifest["pair_id"]) == ["a", "b"] and manifest.loc[0, "group_id"] == "7"
    assert manifest.loc[0, "split"] == "val" and pd.isna(manifest.loc[1, "split"])

    table = pd.DataFrame({"img": ["rel.jpg"], "caption": ["renamed columns"]})
    table.to_parquet(tmp_path / "data" / "pairs.parquet")
    result = build_recipe(
        "pairs", tmp_path / "data", tmp_path / "work", image_column="img", text_column="caption"
    )
    manifest = assert_valid(result, expected_pairs=1)
    assert manifest.loc[0, "pair_id"] == "pairs-0" and manifest.loc[0, "text"] == "renamed columns"


def test_pairs_reports_bad_input(tmp_path):
    raw = fixtures.make_fixture("pairs", tmp_path / "raw")
    with pytest.raises(ManifestError, match="image_column="):
        build_recipe("pairs", raw, tmp_path / "work", text_column="caption")
    (raw / "pairs.jsonl").write_text(json.dumps({"image_path": "x.jpg", "text": "t", "split": "holdout"}))
    with pytest.raises(FileNotFoundError, match="file="):
        build_recipe("pairs", raw, tmp_path / "work")
    with pytest.raises(ManifestError, match="holdout"):
        build_recipe("pairs", raw, tmp_path / "work", file="pairs.jsonl")


def test_every_recipe_module_registers_itself(tmp_path):
    assert set(RECIPES) == {
        "embedded",
        "politics",
        "goodnews",
        "coco",
        "conceptual_captions",
        "flickr30k",
        "pairs",
    }
    assert set(CAPTION_GROUP_RECIPES) == {"coco", "flickr30k"}
    with pytest.raises(KeyError, match="unknown dataset 'nope'"):
        build_recipe("nope", None, tmp_path)


def test_a_name_taken_by_another_entry_is_rejected():
    registry: Registry[object] = Registry("thing")
    registry.register("a", flag=True)(len)
    registry.register("a", flag=True)(len)  # the same object again is no clash
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a")(str)
    assert registry.names() == registry.names(flag=True) == ("a",) and registry.names(flag=False) == ()
