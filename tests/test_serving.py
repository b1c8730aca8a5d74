"""Using a trained model (issue 14): the smoke FullRun's bundle and test-split index, the ``crossmodal`` command
line, and ``crossmodal serve`` started as a real server on a free port, queried over HTTP and loaded in a
headless chromium.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import luigi
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from models.training import Trainer, TrainingData
from pipeline import Evaluate, Train
from pipeline.tasks.train_inputs import load_pair_data, load_trained_model
from serving.bundle import BundleError, load_bundle
from serving.embed import Embedder
from serving.gallery import read_gallery, table_manifest
from serving.index import GalleryIndex, embed_into
from serving.neighbors import ANNOY_SEARCH_K, ANNOY_TREES
from serving.search import Searcher
from tests.cli_runs import crossmodal
from tests.disks import fill, tmpfs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUERY = "protest over the unemployment rate in texas"


@pytest.fixture(scope="module")
def pipeline_index(smoke_run):
    """The SearchIndex task of the smoke FullRun (the headline method's first seed)."""
    task, result, _, _ = smoke_run
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    search_index = task.requires().search_index()
    assert search_index.complete()
    return search_index


@pytest.fixture(scope="module")
def gallery(tmp_path_factory, pipeline_index):
    """Test-split photos as files and a pairs table over them, with a non-image, a truncated photo, a missing
    file and a text-only row."""
    folder = tmp_path_factory.mktemp("gallery")
    manifest = pipeline_index.requires()["split"].manifest()
    test = manifest[manifest["split"] == "test"].head(24)
    images = pipeline_index.requires()["prepared"].images()
    rows = []
    for pair_id, row, text in zip(test["pair_id"], test["cache_row"], test["text"], strict=True):
        Image.fromarray(np.asarray(images[row])).save(folder / f"{pair_id}.png")
        rows.append({"pair_id": pair_id, "image_path": f"{pair_id}.png", "text": text})
    (folder / "notes.txt").write_text("not a photo")
    whole = (folder / f"{test['pair_id'].iloc[0]}.png").read_bytes()
    (folder / "cut.png").write_bytes(whole[: len(whole) // 2])
    rows += [
        {"pair_id": "html", "image_path": "notes.txt", "text": "a caption whose image is a text file"},
        {"pair_id": "cut", "image_path": "cut.png", "text": "a caption whose image was cut off"},
        {"pair_id": "gone", "image_path": "nowhere.png", "text": "a caption whose image is missing"},
        {
            "pair_id": "words",
            "image_path": "",
            "text": "an article on the unemployment rate, without a photo",
        },
    ]
    pd.DataFrame(rows).to_csv(folder / "pairs.csv", index=False)
    return folder, test


# ----------------------------------------------------------------------------------------- bundle


def test_bundle_embeds_the_test_split_exactly_as_evaluate_did(pipeline_index):
    """The exported bundle (trunk included) embeds pixels and words into Evaluate's test embeddings."""
    bundle = load_bundle(pipeline_index.output_path("bundle"))
    evaluate = pipeline_index.requires()["evaluate"]
    manifest = pipeline_index.requires()["split"].manifest()
    rows = evaluate.load("test_rows")
    test = manifest.iloc[rows]
    embedder = Embedder(bundle)
    images = embedder.embed_pixels(
        pipeline_index.requires()["prepared"].images()[test["cache_row"].to_numpy()]
    )
    texts = embedder.embed_texts(test["text"].tolist())
    np.testing.assert_allclose(images[:, 0], evaluate.load("test_image"), atol=1e-4)
    np.testing.assert_allclose(texts[:, 0], evaluate.load("test_text"), atol=1e-5)
    image = bundle.manifest["image"]
    assert (image["backbone"], image["trunk"], image["features"], image["image_size"]) == (
        "efficientnet_lite0",
        "frozen",
        "pooled",
        32,
    )
    manifest = bundle.manifest
    assert manifest["metrics"]["n_test"] == len(rows) and manifest["variant"]["label"] == "Ours"
    index = GalleryIndex.open(pipeline_index.output_path("index"))
    assert len(index.items) == len(rows) and index.meta["search"]["image"]["backend"] == "exact"


def test_training_validation_and_serving_embed_the_same_pairs_into_the_same_vectors(tmp_path, pipeline_index):
    """One inference path: the validation pass of a Trainer holding the trained model (cached trunk features)
    and the exported bundle (pixels through its trunk) give the same vectors for the validation pairs."""
    train = pipeline_index.requires()["train"]
    inputs = train.requires()
    data, manifest = load_pair_data(inputs, train.train_settings().max_text_tokens)
    model, _ = load_trained_model({**inputs, "train": train})
    split = manifest["split"].to_numpy()
    train_positions = np.flatnonzero(split == "train")
    training = TrainingData(
        data,
        train_positions,
        np.flatnonzero(split == "val"),
        inputs["neighbors"].sampling_pool(train_positions, 5),
        validation_score=lambda image, text: {"val_rsum": 0.0},
    )
    settings = replace(train.train_settings(), selection="val_rsum")
    # a Trainer around the trained model itself (not a run from its record's first weights)
    trainer = Trainer(model, train.variant_spec().build_losses(), training, settings, seed=0, work_dir=tmp_path, progress=False)
    validated, _ = trainer.validate()
    val = manifest.iloc[trainer.val_positions]
    embedder = Embedder(load_bundle(pipeline_index.output_path("bundle")))
    images = embedder.embed_pixels(inputs["prepared"].images()[val["cache_row"].to_numpy()])
    np.testing.assert_allclose(images[:, 0], validated.image, atol=1e-4)
    np.testing.assert_allclose(embedder.embed_texts(val["text"].tolist())[:, 0], validated.text, atol=1e-5)


def test_a_pvse_bundle_keeps_its_spatial_trunk_and_k_embeddings(tmp_path, pipeline_index):
    """PVSE attends over the trunk's map (cached in half precision) and gives K embeddings per item: its bundle
    embeds the test split into its Evaluate's [N, K, D] embeddings too."""
    pvse = pipeline_index.clone(Train, variant="pvse")
    crossmodal("export", str(pvse.output_dir()), str(tmp_path / "pvse"))
    bundle = load_bundle(tmp_path / "pvse")
    assert bundle.image["features"] == "spatial" and bundle.manifest["embedding"]["per_item"] == 2
    evaluate = pipeline_index.clone(Evaluate, variant="pvse")
    test = pipeline_index.requires()["split"].manifest().iloc[evaluate.load("test_rows")]
    embedder = Embedder(bundle)
    images = embedder.embed_pixels(
        pipeline_index.requires()["prepared"].images()[test["cache_row"].to_numpy()]
    )
    np.testing.assert_allclose(images, evaluate.load("test_image"), atol=1e-3)
    np.testing.assert_allclose(
        embedder.embed_texts(test["text"].tolist()), evaluate.load("test_text"), atol=1e-5
    )


def test_export_cli_writes_the_pipelines_bundle_and_refuses_a_broken_one(tmp_path, pipeline_index):
    train_dir = pipeline_index.requires()["train"].output_dir()
    done = crossmodal("export", str(train_dir), str(tmp_path / "bundle"))
    assert "Exported Ours (seed 0" in done.stdout
    exported = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert exported["bundle_id"] == load_bundle(pipeline_index.output_path("bundle")).bundle_id

    corrupt = tmp_path / "corrupt"
    shutil.copytree(tmp_path / "bundle", corrupt)
    weights = bytearray((corrupt / "weights.pt").read_bytes())
    weights[len(weights) // 2] ^= 0xFF
    (corrupt / "weights.pt").write_bytes(bytes(weights))
    with pytest.raises(BundleError, match="weights.pt is corrupt"):
        load_bundle(corrupt)

    other_version = tmp_path / "other_version"
    shutil.copytree(tmp_path / "bundle", other_version)
    manifest = json.loads((other_version / "bundle.json").read_text())
    (other_version / "bundle.json").write_text(json.dumps({**manifest, "format_version": 99}))
    failed = crossmodal(
        "index", str(other_version), "--images", str(tmp_path), "--out", str(tmp_path / "i"), check=False
    )
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "bundle format version 99; this version of crossmodal reads versions 3" in failed.stderr
    failed = crossmodal("export", str(tmp_path), str(tmp_path / "again"), check=False)
    assert failed.returncode == 2 and "neither a Train output" in failed.stderr


# ----------------------------------------------------------------------------------------- index


def test_index_skips_and_lists_bad_images_and_grows_without_reembedding(tmp_path, pipeline_index, gallery):
    folder, test = gallery
    bundle = str(pipeline_index.output_path("bundle"))
    out = tmp_path / "index"
    done = crossmodal("index", bundle, "--table", str(folder / "pairs.csv"), "--out", str(out))
    assert f"Indexed {len(test) + 1} new items ({len(test)} images, {len(test) + 1} texts)" in done.stdout
    assert "html: not_an_image" in done.stdout and "cut: truncated_image" in done.stdout
    assert "gone: missing_image" in done.stdout
    assert "image search: exact" in done.stdout
    first = GalleryIndex.open(out)
    old_images = first.vectors["image"].copy()

    done = crossmodal("index", bundle, "--images", str(folder), "--out", str(out))
    grown = GalleryIndex.open(out)
    # the folder's photos are new image-only items; its text and cut files are rejected as in the pipeline
    assert f"Indexed {len(test)} new items ({len(test)} images, 0 texts)" in done.stdout
    assert "notes.txt: not_an_image" in done.stdout and "cut.png: truncated_image" in done.stdout
    assert len(grown.items) == len(first.items) + len(test)
    assert np.array_equal(grown.vectors["image"][: len(old_images)], old_images), (
        "old items kept as they were"
    )
    assert [entry["added"] for entry in grown.meta["history"]] == [len(test) + 1, len(test)]
    # a photo file and its table row are the same picture: the same embedding
    by_id = grown.items.set_index("item_id")
    pair_id = test["pair_id"].iloc[3]
    np.testing.assert_array_equal(
        grown.vectors["image"][by_id.at[pair_id, "image_row"]],
        grown.vectors["image"][by_id.at[f"{pair_id}.png", "image_row"]],
    )
    again = crossmodal("index", bundle, "--images", str(folder), "--out", str(out))
    assert "Indexed 0 new items" in again.stdout and "duplicate_pair_id" in again.stdout


def test_an_index_above_the_crossover_searches_with_pq_and_hnsw_or_annoy_on_request_and_finds_the_same_items(
    tmp_path, pipeline_index, gallery
):
    folder, _ = gallery
    bundle = load_bundle(pipeline_index.output_path("bundle"))
    found = {}
    for name, exact_up_to, backend in (
        ("exact", 10_000, "auto"),
        ("pq", 5, "auto"),
        ("hnsw", 10_000, "hnsw"),
        ("annoy", 10_000, "annoy"),
    ):
        index = GalleryIndex.create(tmp_path / name, bundle, exact_up_to=exact_up_to, backend=backend)
        batch = read_gallery(table_manifest(folder / "pairs.csv", tmp_path), int(bundle.image["cache_size"]))
        embed_into(index, Embedder(bundle), batch, "the gallery table")
        reopened = GalleryIndex.open(tmp_path / name)
        assert reopened.meta["search"]["image"]["backend"] == name
        assert (tmp_path / name / "image.ann").exists() == (name == "annoy")
        assert (tmp_path / name / "image.hnsw").exists() == (name == "hnsw")
        assert (tmp_path / name / "image.pq").exists() == (name == "pq")
        found[name] = [hit.item_id for hit in Searcher(reopened, bundle).by_text(QUERY, 8)]
    assert found["annoy"] == found["exact"] == found["hnsw"] == found["pq"]
    assert {"M", "ef_construction", "ef_search"} <= set(
        GalleryIndex.open(tmp_path / "hnsw").meta["search"]["text"]
    )
    assert {"sub_quantizers", "bits", "rerank"} <= set(
        GalleryIndex.open(tmp_path / "pq").meta["search"]["text"]
    )
    annoy = GalleryIndex.open(tmp_path / "annoy").meta["search"]["text"]
    assert (annoy["n_trees"], annoy["search_k"]) == (ANNOY_TREES, ANNOY_SEARCH_K)


def test_index_backend_hnsw_and_pq_end_to_end(
    tmp_path, pipeline_index, gallery
):
    folder, _ = gallery
    bundle = str(pipeline_index.output_path("bundle"))
    table = str(folder / "pairs.csv")
    for backend in ("exact", "pq", "hnsw"):
        done = crossmodal(
            "index", bundle, "--table", table, "--out", str(tmp_path / backend), "--backend", backend
        )
        assert f"image search: {backend}" in done.stdout and "asked for with --backend" in done.stdout
    assert "image search: hnsw (M " in done.stdout
    assert json.loads((tmp_path / "pq" / "index.json").read_text())["search"]["image"]["rerank"] > 0
    meta = json.loads((tmp_path / "hnsw" / "index.json").read_text())
    assert meta["backend"] == "hnsw" and meta["search"]["image"]["ef_search"] > 0
    # search and serve read the backend from the index: no flag
    ranked = {
        backend: [
            hit["item_id"]
            for hit in json.loads(
                crossmodal("search", str(tmp_path / backend), "--text", QUERY, "-k", "8", "--json").stdout
            )["results"]
        ]
        for backend in ("exact", "pq", "hnsw")
    }
    assert ranked["hnsw"] == ranked["exact"] == ranked["pq"]
    assert Searcher.open(tmp_path / "hnsw").summary()["search"] == {"image": "hnsw", "text": "hnsw"}
    # an existing index switches backend when asked, and drops the graph files it no longer uses
    crossmodal(
        "index", bundle, "--images", str(folder), "--out", str(tmp_path / "hnsw"), "--backend", "exact"
    )
    assert not (tmp_path / "hnsw" / "image.hnsw").exists()
    # an index asked for exact search grows by that choice
    grown = crossmodal("index", bundle, "--images", str(folder), "--out", str(tmp_path / "exact"))
    assert "image search: exact" in grown.stdout


def test_search_cli_finds_a_photo_by_its_own_caption_and_reads_bad_queries(pipeline_index, gallery):
    index = str(pipeline_index.output_path("index"))
    searcher = Searcher.open(Path(index))
    as_json = json.loads(crossmodal("search", index, "--text", QUERY, "-k", "5", "--json").stdout)["results"]
    assert [hit["rank"] for hit in as_json] == [1, 2, 3, 4, 5]
    assert [hit["item_id"] for hit in as_json] == [hit.item_id for hit in searcher.by_text(QUERY, 5)]
    scores = [hit["score"] for hit in as_json]
    assert scores == sorted(scores, reverse=True)
    plain = crossmodal("search", index, "--text", QUERY, "-k", "5").stdout.splitlines()
    assert [line.split()[2] for line in plain] == [hit["item_id"] for hit in as_json]
    folder, test = gallery
    photo = folder / f"{test['pair_id'].iloc[0]}.png"
    by_image = json.loads(
        crossmodal("search", index, "--image", str(photo), "--against", "image", "--json").stdout
    )
    assert by_image["results"][0]["item_id"] == test["pair_id"].iloc[0]
    assert by_image["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    unknown = crossmodal("search", index, "--text", "qqqq zzzz", check=False)
    assert (
        unknown.returncode == 2 and "none of the words" in unknown.stderr and "vocabulary" in unknown.stderr
    )


# ----------------------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


MAX_UPLOAD_MB = 0.05


@pytest.fixture(scope="module")
def server(pipeline_index):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    index = str(pipeline_index.output_path("index"))
    command = [
        "-m",
        "serving.cli",
        "serve",
        index,
        "--port",
        str(port),
        "--max-upload-mb",
        str(MAX_UPLOAD_MB),
    ]
    process = subprocess.Popen(
        [sys.executable, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stdout.read()}")
        try:
            httpx.get(f"{base}/api/health", timeout=2).raise_for_status()
            break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        process.kill()
        raise RuntimeError("the server did not answer within 120 s")
    yield base, index
    process.terminate()
    process.wait(timeout=30)


def relative_to_gallery(hits: list[dict], index: str) -> list[dict]:
    """The CLI's hits (the local user's absolute paths) as the API shows them: relative to the gallery root."""
    paths = GalleryIndex.open(Path(index)).items["path"].astype(str)
    root = os.path.commonpath([os.path.dirname(p) for p in paths if os.path.isabs(p)])
    return [{**hit, "path": os.path.relpath(hit["path"], root)} for hit in hits]


def test_api_answers_as_the_cli_does(server, gallery):
    base, index = server
    api = httpx.get(f"{base}/api/search/text", params={"q": QUERY, "k": 7}).json()["results"]
    cli = json.loads(crossmodal("search", index, "--text", QUERY, "-k", "7", "--json").stdout)["results"]
    assert all(not os.path.isabs(hit["path"]) for hit in api)
    assert api == relative_to_gallery(cli, index)
    long_text = httpx.post(f"{base}/api/search/text", json={"q": QUERY, "k": 7}).json()["results"]
    assert long_text == api
    folder, test = gallery
    photo = folder / f"{test['pair_id'].iloc[2]}.png"
    with open(photo, "rb") as handle:
        uploaded = httpx.post(
            f"{base}/api/search/image", params={"k": 4}, files={"file": ("p.png", handle, "image/png")}
        )
    assert uploaded.status_code == 200
    cli = json.loads(crossmodal("search", index, "--image", str(photo), "-k", "4", "--json").stdout)[
        "results"
    ]
    assert uploaded.json()["results"] == relative_to_gallery(cli, index)
    item = test["pair_id"].iloc[2]
    similar = httpx.get(f"{base}/api/search/item", params={"id": item, "against": "image"}).json()["results"]
    assert len(similar) == 10 and item not in [hit["item_id"] for hit in similar]
    thumbnail = httpx.get(f"{base}/api/items/thumbnail", params={"id": item})
    assert thumbnail.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(thumbnail.content)).size == (32, 32)
    health = httpx.get(f"{base}/api/health").json()
    n_test = len(indexed_items(server))
    assert (health["status"], health["items"], health["images"], health["texts"]) == (
        "ok",
        n_test,
        n_test,
        n_test,
    )


def indexed_items(server) -> pd.DataFrame:
    _, index = server
    return GalleryIndex.open(Path(index)).items


def _truncated_png(folder: Path) -> bytes:
    data = next(folder.glob("*.png")).read_bytes()
    return data[: len(data) // 2]


def _noise_png(side: int) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_bad_input_gets_a_4xx_with_a_json_message_and_the_server_keeps_answering(server, gallery):
    base, _ = server
    folder, _ = gallery
    text = f"{base}/api/search/text"
    upload = f"{base}/api/search/image"
    large = _noise_png(200)
    assert len(large) > MAX_UPLOAD_MB * 1024 * 1024
    cases = [
        (httpx.get(text, params={"q": ""}), 400, "empty_text"),
        (httpx.get(text, params={"q": "   \t "}), 400, "empty_text"),
        (httpx.get(text, params={"q": "!!! ???"}), 400, "no_words"),
        (httpx.get(text, params={"q": "qqqq zzzz"}), 400, "no_known_word"),
        (httpx.get(text, params={"q": QUERY, "k": 0}), 400, "bad_k"),
        (httpx.post(upload, files={"file": ("a.png", b"<html>no</html>", "image/png")}), 422, "not_an_image"),
        (
            httpx.post(upload, files={"file": ("t.png", _truncated_png(folder), "image/png")}),
            422,
            "truncated_image",
        ),
        (httpx.post(upload, files={"file": ("big.png", large, "image/png")}), 413, "too_large"),
        (httpx.post(upload, data={"other": "x"}), 400, "no_file"),
        (httpx.get(f"{base}/api/search/item", params={"id": "no-such-item"}), 404, "unknown_item"),
        (httpx.get(f"{base}/api/items/thumbnail", params={"id": "no-such-item"}), 404, "unknown_item"),
        (httpx.post(f"{base}/api/search/vector", json={"vector": [0.1] * 64}), 400, "width_mismatch"),
    ]
    for response, status, reason in cases:
        assert (response.status_code, response.json()["reason"]) == (status, reason), response.text
        assert response.json()["error"]
    assert "vocabulary" in cases[3][0].json()["error"]
    assert httpx.get(f"{base}/api/health").json()["status"] == "ok"
    assert httpx.get(text, params={"q": QUERY}).status_code == 200


def test_fifty_concurrent_requests_are_all_answered(server):
    base, _ = server
    expected = httpx.get(f"{base}/api/search/text", params={"q": QUERY, "k": 5}).json()

    def ask(i: int) -> tuple[int, dict]:
        url = f"{base}/api/search/text?" + urllib.parse.urlencode({"q": QUERY, "k": 5})
        with urllib.request.urlopen(url, timeout=120) as response:
            return response.status, json.loads(response.read())

    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(ask, range(50)))
    assert [status for status, _ in answers] == [200] * 50
    assert all(payload == expected for _, payload in answers)


def test_a_bundle_that_does_not_match_the_index_is_refused(tmp_path, pipeline_index, server):
    _, index = server
    other = tmp_path / "other_bundle"
    baseline_train = pipeline_index.clone(Train, variant="ang_np_sym")
    crossmodal("export", str(baseline_train.output_dir()), str(other))
    refused = crossmodal("search", index, "--text", QUERY, "--bundle", str(other), check=False)
    assert refused.returncode == 2 and "is not the one index" in refused.stderr
    wider = tmp_path / "wider_index"
    shutil.copytree(index, wider)
    meta = json.loads((wider / "index.json").read_text())
    meta["bundle"].update({"width": 64, "bundle_id": "another", "backbone": "resnet50"})
    meta["bundle_path"] = str(pipeline_index.output_path("bundle"))
    (wider / "index.json").write_text(json.dumps(meta))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    serve = [sys.executable, "-m", "serving.cli", "serve", str(wider), "--port", str(free_port())]
    refused = subprocess.run(serve, capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "width 64 != 32" in refused.stderr and "backbone resnet50 != efficientnet_lite0" in refused.stderr


def chromium_or_skip() -> str:
    """The headless browser's path; on CI its absence is a failure (.ci/run installs it)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI; .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI installs it and runs this test")
    return chromium


def test_the_page_shows_result_thumbnails_in_a_headless_browser(server):
    chromium = chromium_or_skip()
    base, _ = server
    top = httpx.get(f"{base}/api/search/text", params={"q": QUERY, "k": 10}).json()["results"]
    url = f"{base}/?" + urllib.parse.urlencode({"q": QUERY})
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    thumbnails = [part.split('"')[0] for part in dom.split('<img class="thumb" src="')[1:]]
    expected = ["/api/items/thumbnail?id=" + urllib.parse.quote(hit["item_id"], safe="") for hit in top]
    assert thumbnails == expected, dom[:2000]
    assert "10 results for" in dom


def test_a_bundle_embeds_with_the_tokenizer_it_was_trained_with(tmp_path, pipeline_index):
    """A bundle records its tokenizer version; a version this code does not have is refused in one line."""
    from common.tokenizer import TOKENIZER_VERSION

    bundle = load_bundle(pipeline_index.output_path("bundle"))
    assert bundle.tokenizer_version == TOKENIZER_VERSION == 2
    assert Embedder(bundle).tokenize("München café") == ["münchen", "café"]
    old = tmp_path / "old"
    shutil.copytree(pipeline_index.output_path("bundle"), old)
    manifest = json.loads((old / "bundle.json").read_text())
    manifest["text"]["tokenizer_version"] = 9
    (old / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="tokenizer version 9; this version of crossmodal has tokenizers 2"):
        load_bundle(old)


# ----------------------------------------------------------------------------------------- faults (issue 32)


def test_vector_and_long_text_queries_are_validated_and_bounded(server):
    base, _ = server
    width = httpx.get(f"{base}/api/health").json()["width"]
    vector = f"{base}/api/search/vector"
    text = f"{base}/api/search/text"
    nan_body = '{"vector": [' + ", ".join(["NaN"] + ["0.1"] * (width - 1)) + "]}"
    article = " ".join([QUERY] * 12_000)  # about 500 KB: too long for a URL, fine as a body
    cases = [
        (httpx.post(vector, json={"vector": [[0.1] * width, [0.1] * (width - 1)]}), 400, "ragged_vector"),
        (httpx.post(vector, json={"vector": ["a"] * width}), 400, "not_a_number"),
        (
            httpx.post(vector, content=nan_body, headers={"content-type": "application/json"}),
            400,
            "not_finite",
        ),
        (httpx.post(vector, json={"vector": [0.0] * width}), 400, "zero_vector"),
        (httpx.post(vector, json={"vector": [[0.1] * width] * 65}), 400, "too_many_rows"),
        (httpx.post(vector, json={"vector": [[0.1] * width] * 20_000}), 413, "too_large"),
        (
            httpx.post(vector, content=b"{not json", headers={"content-type": "application/json"}),
            400,
            "invalid_json",
        ),
        (httpx.post(vector, json=[0.1] * width), 400, "invalid_json"),
        (httpx.post(vector, json={"k": 3}), 400, "no_vector"),
        (httpx.post(vector, json={"vector": [0.1] * width, "k": "ten"}), 400, "bad_k"),
        (httpx.post(text, json={"k": 3}), 400, "no_text"),
        (httpx.post(text, json={"q": article + article + article}), 413, "too_large"),
    ]
    for response, status, reason in cases:
        assert (response.status_code, response.json()["reason"]) == (status, reason), response.text
    tiny = httpx.post(vector, json={"vector": [1e-30] * width, "k": 3})  # tiny but with a direction
    assert tiny.status_code == 200 and len(tiny.json()["results"]) == 3
    long = httpx.post(text, json={"q": article, "k": 3}, timeout=60)
    assert long.status_code == 200 and len(long.json()["results"]) == 3
    assert httpx.get(f"{base}/api/health").json()["status"] == "ok"


def test_an_empty_upload_names_no_server_path_and_api_docs_are_off_by_default(server):
    base, _ = server
    empty = httpx.post(f"{base}/api/search/image", files={"file": ("e.png", b"", "image/png")})
    assert empty.status_code == 422 and "crossmodal-upload-" not in empty.text and "/tmp" not in empty.text
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{base}{path}").status_code == 404
    item = indexed_items(server)["item_id"].iloc[0]
    shown = httpx.get(f"{base}/api/items", params={"id": item}).json()["path"]
    assert not os.path.isabs(shown)


def start_server(index: str, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    """``crossmodal serve`` in a process; its first printed lines once it answers (or its exit)."""
    command = [sys.executable, "-m", "serving.cli", "serve", index, *extra]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    process = subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    deadline = time.time() + 120
    while time.time() < deadline and len(lines) < 2:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
    return process, lines


@pytest.fixture(scope="module")
def exposed(pipeline_index):
    """The server bound to every interface, with no token given: it generates one and prints it once."""
    port = free_port()
    index = str(pipeline_index.output_path("index"))
    process, lines = start_server(index, "--host", "0.0.0.0", "--port", str(port), "--api-docs")
    assert process.poll() is None, process.stderr.read()
    token = lines[1].split("?token=")[1]
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while httpx.get(f"{base}/static/app.js").status_code != 200 and time.time() < deadline:
        time.sleep(0.3)
    yield base, token, lines
    process.terminate()
    process.wait(timeout=30)


def test_a_server_off_loopback_requires_its_token_on_every_route(exposed):
    base, token, lines = exposed
    assert lines[0].startswith("Serving ") and "generated token" in lines[1]
    for path in (
        "/",
        "/api/health",
        f"/api/search/text?q={QUERY}",
        "/api/items?id=x",
        "/docs",
        "/openapi.json",
    ):
        refused = httpx.get(f"{base}{path}")
        assert refused.status_code == 401 and refused.json()["reason"] == "unauthorized", path
    assert httpx.get(f"{base}/api/health", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
    assert httpx.get(f"{base}/static/style.css").status_code == 200  # no data in the page's assets
    bearer = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{base}/api/health", headers=bearer).status_code == 200
    # the token keeps a rebound page out, so any Host is answered (a proxy may use any name)
    assert httpx.get(f"{base}/api/health", headers={**bearer, "Host": "archive.example"}).status_code == 200
    assert httpx.get(f"{base}/api/health", headers={"X-Crossmodal-Token": token}).status_code == 200
    page = httpx.get(f"{base}/", params={"token": token})
    assert page.status_code == 200 and "crossmodal_token" in page.headers["set-cookie"]
    assert "httponly" in page.headers["set-cookie"].lower()
    assert httpx.get(f"{base}/api/health", cookies={"crossmodal_token": token}).status_code == 200
    docs = httpx.get(f"{base}/docs", headers=bearer)
    assert docs.status_code == 200 and "http" not in docs.text.split("<body>")[1].replace("/openapi.json", "")
    paths = httpx.get(f"{base}/openapi.json", headers=bearer).json()["paths"]
    assert {"/api/search/text", "/api/search/vector", "/api/search/image"} <= set(paths)


def test_the_page_works_with_the_token_in_a_headless_browser(exposed):
    chromium = chromium_or_skip()
    base, token, _ = exposed
    top = httpx.get(
        f"{base}/api/search/text", params={"q": QUERY, "k": 10}, headers={"Authorization": f"Bearer {token}"}
    ).json()["results"]
    url = f"{base}/?" + urllib.parse.urlencode({"token": token, "q": QUERY})
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom"]
    dom = subprocess.run([chromium, *flags, url], capture_output=True, text=True, timeout=120).stdout
    thumbnails = [part.split('"')[0] for part in dom.split('<img class="thumb" src="')[1:]]
    expected = ["/api/items/thumbnail?id=" + urllib.parse.quote(hit["item_id"], safe="") for hit in top]
    assert thumbnails == expected, dom[:2000]
    assert "10 results for" in dom


@pytest.mark.parametrize("problem", ["absolute paths off loopback", "port in use", "short token"])
def test_serve_refuses_unsafe_or_impossible_settings_in_one_line(problem, pipeline_index):
    index = str(pipeline_index.output_path("index"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        extra = {
            "absolute paths off loopback": [
                "--host",
                "0.0.0.0",
                "--port",
                str(free_port()),
                "--absolute-paths",
            ],
            "port in use": ["--port", port],
            "short token": ["--port", str(free_port()), "--token", "abc"],
        }[problem]
        done = subprocess.run(
            [sys.executable, "-m", "serving.cli", "serve", index, *extra],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
        )
    assert done.returncode == 2 and "Serving" not in done.stdout, done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "damage", ["index.json not JSON", "vectors cut off", "items missing", "thumbnails grown", "hnsw cut off"]
)
def test_a_damaged_index_is_refused_in_one_line_that_says_rebuild(damage, tmp_path, pipeline_index, gallery):
    folder, _ = gallery
    bundle = str(pipeline_index.output_path("bundle"))
    index = tmp_path / "index"
    backend = ["--backend", "hnsw"] if damage == "hnsw cut off" else []
    crossmodal("index", bundle, "--table", str(folder / "pairs.csv"), "--out", str(index), *backend)
    assert crossmodal("search", str(index), "--text", QUERY).returncode == 0
    if damage == "index.json not JSON":
        (index / "index.json").write_text('{"format": "crossmodal-index", "format_ver')
    elif damage == "vectors cut off":
        data = (index / "image_vectors.npy").read_bytes()
        (index / "image_vectors.npy").write_bytes(data[: len(data) // 2])
    elif damage == "items missing":
        (index / "items.parquet").unlink()
    elif damage == "thumbnails grown":
        with open(index / "thumbnails.npy", "ab") as handle:
            handle.write(b"\0" * 100)
    else:
        data = (index / "image.hnsw").read_bytes()
        (index / "image.hnsw").write_bytes(data[:100])
    done = crossmodal("search", str(index), "--text", QUERY, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "rebuild" in done.stderr, done.stderr
    if damage == "items missing":
        assert "items.parquet is missing" in done.stderr


def test_indexing_nothing_usable_is_an_error_and_writes_no_index(tmp_path, pipeline_index):
    bundle = str(pipeline_index.output_path("bundle"))
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "notes.txt").write_text("not a photo")
    done = crossmodal("index", bundle, "--images", str(photos), "--out", str(tmp_path / "index"), check=False)
    assert done.returncode == 2 and "nothing to index" in done.stderr and "not_an_image=1" in done.stderr
    assert not (tmp_path / "index" / "index.json").exists()


@pytest.fixture
def full_disk(tmp_path):
    """A real 256 KiB tmpfs, filled to the last byte."""
    with tmpfs(tmp_path / "disk", "256k") as disk:
        fill(disk)
        yield disk


@pytest.mark.parametrize("command", ["export", "index", "evaluate", "audit"])
def test_a_full_disk_in_any_command_is_one_line_exit_3_and_leaves_nothing_half_written(
    command, full_disk, pipeline_index, gallery
):
    folder, _ = gallery
    bundle = str(pipeline_index.output_path("bundle"))
    table = str(folder / "pairs.csv")
    out = full_disk / "out"
    args = {
        "export": ["export", str(pipeline_index.requires()["train"].output_dir()), str(out)],
        "index": ["index", bundle, "--table", table, "--out", str(out)],
        "evaluate": ["evaluate", bundle, "--table", table, "--out", str(out)],
        "audit": ["audit", bundle, "--table", table, "--out", str(out)],
    }[command]
    done = crossmodal(*args, check=False)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no space left on device while writing {full_disk}" in lines[0], done.stderr
    left = [p for p in full_disk.rglob("*") if p.is_file() and p.name != "filler"]
    assert not list(full_disk.glob("*.partial")) and not [p for p in left if p.suffix == ".tmp"], left
    if command == "export":
        assert not out.exists()


@pytest.mark.parametrize(
    "args, said",
    [
        (["serve", "{index}", "--port", "70000"], "--port must be from 0 to 65535"),
        (["serve", "{index}", "--max-upload-mb", "-1"], "--max-upload-mb must be a positive number"),
        (["serve", "{index}", "--log-level", "loud"], "--log-level must be one of"),
        (["search", "{index}", "--text", QUERY, "-k", "0"], "-k must be from 1 to 1000"),
        (["audit", "{bundle}", "--table", "{table}", "--out", "{out}", "--top", "-3"], "--top must be >= 0"),
        (["audit", "{bundle}", "--table", "{table}", "--out", "{out}", "--flag-share", "2"], "--flag-share"),
        (
            ["evaluate", "{bundle}", "--table", "{table}", "--out", "{out}", "--redraws", "0"],
            "--redraws must be >= 1",
        ),
        (["evaluate", "{bundle}", "--table", "{out}/none.csv", "--out", "{out}"], "no table at"),
        (["index", "{bundle}", "--table", "{out}/none.csv", "--out", "{out}"], "no table at"),
    ],
)
def test_every_argument_is_checked_before_any_work(args, said, pipeline_index, gallery, tmp_path):
    folder, _ = gallery
    values = {
        "index": str(pipeline_index.output_path("index")),
        "bundle": str(pipeline_index.output_path("bundle")),
        "table": str(folder / "pairs.csv"),
        "out": str(tmp_path / "out"),
    }
    started = time.perf_counter()
    done = crossmodal(*[a.format(**values) for a in args], check=False)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr
    assert time.perf_counter() - started < 5, "checked before loading or embedding anything"
    assert not (tmp_path / "out").exists()


def test_links_that_lead_nowhere_are_rejected_and_listed(tmp_path, pipeline_index, gallery):
    folder, test = gallery
    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(folder / f"{test['pair_id'].iloc[0]}.png", photos / "real.png")
    (photos / "dangling.png").symlink_to("nowhere.png")
    (photos / "loop.png").symlink_to("loop.png")
    out = tmp_path / "index"
    crossmodal("index", str(pipeline_index.output_path("bundle")), "--images", str(photos), "--out", str(out))
    rejects = pd.read_csv(out / "rejects.csv")
    assert dict(zip(rejects["pair_id"], rejects["reason"], strict=True)) == {
        "dangling.png": "missing_image",
        "loop.png": "missing_image",
    }
    assert len(GalleryIndex.open(out).items) == 1
