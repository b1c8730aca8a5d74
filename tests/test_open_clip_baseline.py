"""CLIP-family baselines in ``crossmodal evaluate`` (issue 33): a tiny randomly initialised open_clip model
registered here (no download) embeds exactly as open_clip's own ``encode_image`` / ``encode_text``, is scored
beside a bundle with the same functions, gets a CLIP_benchmark-shaped JSON, and a baseline whose weights
cannot be found is one line and exit 2 before any work — never random weights."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

open_clip = pytest.importorskip("open_clip")

from data_recipes.validate import load_image_rgb  # noqa: E402
from evaluation.clip_benchmark import benchmark_filename, retrieval_recalls  # noqa: E402
from evaluation.protocol import retrieval_layout  # noqa: E402
from serving.cli import main  # noqa: E402
from serving.open_clip_baseline import OpenClipModel, OpenClipSpec, resolve_weights  # noqa: E402

TINY = "tiny-test-clip"
TINY_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    """A tiny open_clip architecture registered for this process, and its (random, seeded) weights saved as a
    file: the local-file form a user gives for their own checkpoint."""
    folder = tmp_path_factory.mktemp("tiny_clip")
    (folder / f"{TINY}.json").write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(folder / f"{TINY}.json")
    torch.manual_seed(0)
    model = open_clip.create_model(TINY, pretrained=None)
    torch.save(model.state_dict(), folder / "tiny.pt")
    return folder / "tiny.pt"


def test_the_wrapper_gives_open_clips_own_normalised_embeddings(tiny_weights, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(3):
        path = tmp_path / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (40 + 8 * i, 48, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    texts = ["a court ruling on immigration", "a rally outside the capitol", "中文文本"]
    wrapper = OpenClipModel(OpenClipSpec(TINY, str(tiny_weights)), str(tiny_weights))
    reference, _, preprocess = open_clip.create_model_and_transforms(TINY, pretrained=str(tiny_weights))
    reference.eval()
    with torch.no_grad():
        pixels = torch.stack([preprocess(load_image_rgb(p)) for p in paths])
        image = F.normalize(reference.encode_image(pixels), dim=-1).numpy()
        text = F.normalize(reference.encode_text(open_clip.get_tokenizer(TINY)(texts)), dim=-1).numpy()
    np.testing.assert_allclose(wrapper.embed_images(paths), image, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wrapper.embed_texts(texts), text, rtol=1e-5, atol=1e-6)
    assert wrapper.label == f"{TINY} (tiny.pt)"


def test_clip_benchmark_recall_counts_a_query_when_any_correct_item_is_in_the_top_k():
    """Two images with two captions each: image 0's captions rank 1st and 4th for it, image 1's 2nd and 3rd;
    a loop over queries as CLIP_benchmark's recall_at_k(...) > 0 gives the same recalls."""
    image = np.array([[1.0, 0.0], [0.0, 1.0]])
    text = np.array([[1.0, 0.0], [0.6, -0.8], [0.8, 0.6], [0.6, 0.8]])  # captions 0, 1 of image 0; 2, 3 of image 1
    groups = np.array([0, 0, 1, 1])
    image_ids = np.array(["a", "a", "b", "b"])
    rows = np.array([0, 0, 1, 1])  # each caption row carries its image
    layout = retrieval_layout(groups, image_ids, np.array(["t0", "t1", "t2", "t3"]))
    metrics = retrieval_recalls(image[rows], text, layout, ks=(1, 2))
    scores = text @ image.T  # texts x images
    for k in (1, 2):
        by_text = [int(rows[t] in np.argsort(-scores[t])[:k]) for t in range(4)]
        by_image = [int(bool(set(np.argsort(-scores[:, i])[:k]) & set(np.flatnonzero(rows == i)))) for i in range(2)]
        assert metrics[f"image_retrieval_recall@{k}"] == pytest.approx(np.mean(by_text))
        assert metrics[f"text_retrieval_recall@{k}"] == pytest.approx(np.mean(by_image))


@pytest.mark.slow
def test_a_bundle_and_a_clip_baseline_are_scored_side_by_side_with_clip_benchmark_jsons(smoke_test_table, tiny_weights, tmp_path):
    folder, search_index, n_test = smoke_test_table
    out = tmp_path / "out"
    bundle = str(search_index.output_path("bundle"))
    spec = f"{TINY}:{tiny_weights}"
    assert main(["evaluate", bundle, "--open-clip", spec, "--table", str(folder / "pairs.csv"), "--out", str(out),
                 "--recall-k", "1", "5", "--dataset-name", "smoke_test"]) == 0
    scored = json.loads((out / "metrics.json").read_text())
    ours, clip = scored["bundles"]
    assert ours["kind"] == "bundle" and clip["kind"] == "open_clip"
    assert clip["open_clip"] == {"model": TINY, "pretrained": str(tiny_weights)} and clip["n_pairs"] == n_test
    # the same metric functions, neighbor preservation against the bundle's Doc2Vec, the paired difference
    assert set(clip["metrics"]) == set(ours["metrics"]) and "NP text @10" in clip["metrics"]
    difference = clip["difference_from_first"]["5-way R@1 I→T"]
    assert difference["mean_difference"] == pytest.approx(clip["metrics"]["5-way R@1 I→T"]["mean"] - ours["metrics"]["5-way R@1 I→T"]["mean"])
    # one CLIP_benchmark JSON per model, its recalls the full ranking's R@k
    assert len(scored["clip_benchmark"]) == 2
    for name, model in zip(scored["clip_benchmark"], (ours, clip), strict=True):
        record = json.loads((out / "clip_benchmark" / name).read_text())
        assert set(record) == {"dataset", "model", "pretrained", "task", "metrics", "language"}
        assert record["task"] == "zeroshot_retrieval" and record["dataset"] == "smoke_test"
        assert set(record["metrics"]) == {f"{kind}_retrieval_recall@{k}" for kind in ("image", "text") for k in (1, 5)}
        assert record["metrics"]["image_retrieval_recall@1"] == model["metrics"]["R@1 T→I"]["mean"]
        assert record["metrics"]["text_retrieval_recall@5"] == model["metrics"]["R@5 I→T"]["mean"]
        assert name == benchmark_filename(record)
    report = (out / "report.md").read_text()
    assert f"{TINY} (tiny.pt) − Ours (bundle) (the first model)" in report and "clip_benchmark/" in report


@pytest.mark.parametrize(
    "spec, message",
    [
        ("ViT-B-32:laion2b_s34b_b79k", "its weights are not in the local cache and huggingface.co cannot be reached"),
        ("ViT-B-32:no_such_tag", "has no pretrained tag 'no_such_tag'; its tags: openai"),
        ("No-Such-Model:openai", "open_clip knows no model 'No-Such-Model'"),
        ("ViT-B-32:/nowhere/weights.pt", "no weights file at /nowhere/weights.pt"),
        ("ViT-B-32", "give MODEL:PRETRAINED"),
    ],
)
def test_a_baseline_without_its_weights_is_one_line_and_exit_2_before_any_work(spec, message, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as offline as CI, even on a machine that is not
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty cache
    table = tmp_path / "pairs.csv"
    table.write_text("image_path,text\n")
    started = time.perf_counter()
    assert main(["evaluate", "--open-clip", spec, "--table", str(table), "--out", str(tmp_path / "out")]) == 2
    assert time.perf_counter() - started < 30
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("crossmodal evaluate: ") and message in err, err
    assert not (tmp_path / "out").exists(), "nothing is written before the models are found"


def test_resolving_a_local_weights_file_needs_no_network(tiny_weights, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_weights(OpenClipSpec(TINY, str(tiny_weights))) == str(tiny_weights)
