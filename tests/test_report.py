"""The report builder, its figures and galleries, and the evaluation pieces behind them, on small
hand-made inputs: tables show the right numbers, figures are valid PNGs, every image the HTML names
exists, and report.json carries every number the Markdown shows.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from evaluation.document import Document, GalleryItem
from evaluation.gallery import (
    doc2vec_neighbour_table,
    proximity_study,
    retrieval_examples,
    snippet,
    write_thumbnails,
)
from evaluation.metrics import full_ranking_metrics
from evaluation.plots import plot_pr_curves, plot_proximity_ratios, plot_score_distributions
from evaluation.report import (
    FIGURES_DIR,
    Qualitative,
    ReportInputs,
    ShownItem,
    VariantRun,
    build_report,
    cocos_rows,
)
from models.batching import BatchSampler
from models.losses import build_loss
from models.training import PairData
from pipeline.io import write_json
from pipeline.tasks.cocos import collect_cocos
from pipeline.tasks.evaluation import full_ranking, retrieval_layout
from tests.markdown_tables import section, table_row

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def full_ranking_result(r1: float, medr: float) -> dict:
    """A hand-made full-ranking result with distinct, recognisable numbers per direction."""
    out = {"n_images": 4, "n_texts": 4, "rsum": 0.0}
    for offset, direction in ((0.0, "i2t"), (0.01, "t2i")):
        out.update(
            {
                f"{direction}_r@1": r1 + offset,
                f"{direction}_r@5": r1 + 0.2 + offset,
                f"{direction}_r@10": r1 + 0.3 + offset,
                f"{direction}_medr": medr + 10 * offset,
                f"{direction}_meanr": medr + 1.5,
                f"{direction}_map@5": r1 + 0.05 + offset,
            }
        )
    return out


def make_run(variant: str, label: str, seed: int, i2t: float, t2i: float, pr_auc: float) -> VariantRun:
    metrics = {
        "retrieval": {
            "i2t": i2t,
            "t2i": t2i,
            "i2t_std": 0.01,
            "t2i_std": 0.02,
            "n_way": 5,
            "redraws": 2,
            "n_queries": 4,
        },
        "neighbour_preservation": {
            "image": {"mean": i2t / 2, "k_used": 3, "k_requested": 20},
            "text": {"mean": t2i / 2, "k_used": 3, "k_requested": 20},
        },
        "full_ranking": {"protocol": "pairs", "all": full_ranking_result(i2t / 5, 2.0 + seed)},
        "pr": {"pr_auc": pr_auc, "n_positives": 4, "n_scores": 16, "n_pairs": 4},
    }
    counts = np.array([[0, 1, 2, 1], [1, 2, 1, 0], [0, 0, 3, 1]])
    curves = {
        "pr_recall": np.array([0.25, 0.5, 1.0]),
        "pr_precision": np.array([1.0, 0.5, pr_auc]),
        "score_bin_centres": np.array([-0.75, -0.25, 0.25, 0.75]),
        "score_counts": counts,
        "score_p5": np.percentile(counts, 5, axis=0),
        "score_p95": np.percentile(counts, 95, axis=0),
    }
    # per-query hits that differ between runs, so the bootstrap table has numbers of its own
    draw = np.random.default_rng(int(pr_auc * 1000) + seed)
    hits = {
        "i2t_hits": draw.integers(0, 2, size=(2, 12)),
        "t2i_hits": draw.integers(0, 2, size=(2, 12)),
    }
    losses = ["angular"] if variant == "ang_np_sym" else ["angular", "within_modality"]
    return VariantRun(
        variant, label, seed, metrics, {"mean_epoch_seconds": 1.5, "best_epoch": 2}, hits, curves, losses
    )


def make_cocos(variant: str, label: str) -> dict:
    stats = {
        "per_query_mean": 2.375,
        "per_query_std": 0.321,
        "per_batch_sum_mean": 41.5,
        "per_batch_sum_std": 4.7,
    }
    zero = {
        "per_query_mean": 0.1375,
        "per_query_std": 0.0625,
        "per_batch_sum_mean": 2.3,
        "per_batch_sum_std": 1.3,
    }
    return {
        "variant": variant,
        "label": label,
        "seed": 0,
        "eps": 0.01,
        "batch_size": 16,
        "losses": {
            "angular": {
                "image_to_text_contributing_negatives": {**stats, "n_batches": 3},
                "image_to_text_no_gradient": {**zero, "n_batches": 3},
            }
        },
    }


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report")


@pytest.fixture(scope="module")
def qualitative(report_dir: Path) -> Qualitative:
    rng = np.random.default_rng(0)
    n = 8
    ours = (unit_rows(rng, n, 4), unit_rows(rng, n, 4))
    baseline = (unit_rows(rng, n, 4), unit_rows(rng, n, 4))
    doc_vectors = rng.normal(size=(n, 3))
    groups = np.arange(n)
    proximity = proximity_study(ours, baseline, doc_vectors, k=2, n_pairs=100, seed=0, n_show=2)
    examples = retrieval_examples(ours, baseline, np.arange(n), np.arange(n), groups, 2, 3, seed=0)
    cache = rng.integers(0, 255, size=(n, 6, 6, 3), dtype=np.uint8)
    thumbnails = write_thumbnails(
        cache, np.arange(n), range(n), report_dir / FIGURES_DIR / "thumbs", report_dir
    )
    items = {p: ShownItem(text=f"story {p} about policy", thumbnail=thumbnails[p]) for p in range(n)}
    return Qualitative(0, "Ours", "Ang+NP+Sym", items, proximity, examples)


@pytest.fixture(scope="module")
def report(report_dir: Path, qualitative: Qualitative) -> tuple[Document, dict, Path]:
    """Built once for the module (drawing the figures is the slow part); tests only read it."""
    runs = [
        make_run("ang_np_sym", "Ang+NP+Sym", 0, 0.5, 0.25, 0.125),
        make_run("ang_np_sym", "Ang+NP+Sym", 1, 0.75, 0.5, 0.375),
        make_run("ours", "Ours", 0, 0.875, 0.625, 0.25),
        make_run("ours_minus_text", "Ours − L_text", 0, 0.625, 0.5, 0.2),
    ]
    inputs = ReportInputs(
        title="test report",
        runs=runs,
        cocos=[make_cocos("ours", "Ours")],
        qualitative=qualitative,
        tasks=[{"task": "Train[variant=ours]", "signature": "abc", "wall_time_s": 12.25}],
        run_info={"dataset": "embedded", "profile": "smoke", "seeds": [0, 1]},
    )
    doc, payload = build_report(inputs, report_dir)
    return doc, payload, report_dir


def test_table_1_and_3_show_mean_and_std_over_seeds(report):
    doc, payload, _ = report
    md = doc.to_markdown()
    table_1 = section(md, "Table 1 — cross-modal retrieval (n-way Recall@1)")
    # two seeds of the baseline: mean of 0.5 / 0.75 and sample sd sqrt(0.03125)
    assert table_row(table_1, "Ang+NP+Sym")[1:3] == ["0.6250 ± 0.1768", "0.3750 ± 0.1768"]
    assert table_row(table_1, "Ours")[1:3] == ["0.8750", "0.6250"]
    table_3 = section(md, "Table 3 — neighbour preservation")
    assert table_row(table_3, "Ours")[1:] == ["0.4375", "0.3125", "angular+within_modality"]
    assert payload["variants"]["ang_np_sym"]["i2t"]["std"] == pytest.approx(np.std([0.5, 0.75], ddof=1))


def test_full_ranking_and_pr_auc_tables(report):
    doc, payload, _ = report
    md = doc.to_markdown()
    full = section(md, "Full-ranking retrieval")
    assert full.splitlines()[2].startswith("| Method | Direction | R@1 | R@5 | R@10 | medR | meanR | mAP@5 |")
    # ours: R@1 = 0.875 / 5; T→I adds 0.01 to the fractions and 0.1 to medR
    assert table_row(full, "Ours", "I→T")[2:] == ["0.1750", "0.3750", "0.4750", "2.0", "3.5", "0.2250"]
    assert table_row(full, "Ours", "T→I")[2:] == ["0.1850", "0.3850", "0.4850", "2.1", "3.5", "0.2350"]
    # the baseline's medR differs by seed (2 and 3): mean ± sd
    assert table_row(full, "Ang+NP+Sym", "I→T")[5] == "2.5 ± 0.7"
    calibration = section(md, "Global calibration")
    assert table_row(calibration, "Ang+NP+Sym")[1] == "0.2500 ± 0.1768"
    assert table_row(calibration, "Ours")[1] == "0.2500"
    assert payload["variants"]["ours"]["full_ranking"]["t2i_map@5"]["mean"] == pytest.approx(0.235)


def test_table_4_lists_the_ablations_that_ran_with_differences_to_ours(report):
    doc, payload, _ = report
    table_4 = section(doc.to_markdown(), "Table 4")
    assert table_row(table_4, "Ours")[1:] == ["0.8750", "0.6250", "", ""]
    assert table_row(table_4, "Ours − L_text")[1:] == ["0.6250", "0.5000", "-0.2500", "-0.1250"]
    assert "Ours − L_img" not in table_4
    assert [row["label"] for row in payload["ablation"]] == ["Ours", "Ours − L_text"]


def test_no_table_4_and_no_figures_without_their_inputs():
    runs = [
        make_run("ang_np_sym", "Ang+NP+Sym", 0, 0.5, 0.25, 0.1),
        make_run("ours", "Ours", 0, 0.6, 0.3, 0.2),
    ]
    doc, payload = build_report(ReportInputs("t", runs), output_dir=None)
    md = doc.to_markdown()
    assert "Table 4" not in md and payload["ablation"] == []
    assert doc.image_paths() == [] and "file" not in payload["figures"]["pr_curve"]
    assert "Fig. 5" not in md and "COCOS" not in md and payload["qualitative"] is None


def test_cocos_table_has_one_row_per_direction_with_its_quantities(report):
    doc, payload, _ = report
    cocos = section(doc.to_markdown(), "COCOS")
    assert table_row(cocos, "Ours")[2:] == [
        "angular",
        "image_to_text",
        "2.375 ± 0.321",
        "41.50 ± 4.70",
        "2.30 ± 1.30",
        "3",
    ]
    quantities, rows = cocos_rows(payload["cocos"])
    assert quantities == ["C^q", "C^B", "C^0"] and len(rows) == 1


def test_figures_are_valid_pngs_embedded_in_markdown_and_html(report):
    doc, payload, out = report
    md, page = doc.to_markdown(), doc.to_html()
    for name in ("pr_curve.png", "score_distribution.png", "proximity_ratios.png"):
        path = out / FIGURES_DIR / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        with Image.open(path) as image:
            image.verify()
        assert f"({FIGURES_DIR}/{name})" in md and f'src="{FIGURES_DIR}/{name}"' in page
    assert payload["figures"]["pr_curve"]["file"] == f"{FIGURES_DIR}/pr_curve.png"


class ImageSources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def test_every_image_the_html_references_exists(report, qualitative):
    doc, _, out = report
    parser = ImageSources()
    parser.feed(doc.to_html())
    thumbnails = [src for src in parser.sources if "/thumbs/" in src]
    # Fig. 5: 2 image pairs; Fig. 6: 2 image queries + 2 text queries x 3 images x 2 models
    assert len(thumbnails) == 2 * 2 + 2 + 2 * 3 * 2
    for src in parser.sources:
        assert (out / src).is_file(), src
    assert sorted(set(parser.sources)) == sorted(set(doc.image_paths()))


def test_gallery_shows_each_models_top_results_and_marks_the_paired_item(report, qualitative):
    doc, payload, _ = report
    md = section(doc.to_markdown(), "Fig. 6")
    first = qualitative.examples["t2i"][0]
    row = next(
        line for line in md.splitlines() if line.startswith(f"| {qualitative.items[first['query']].text}")
    )
    cells = row.strip("|").split("|")
    for cell, model in zip(cells[1:], ("ours", "baseline"), strict=True):
        for position, score, correct in first[model]:
            thumbnail = qualitative.items[position].thumbnail
            assert f"{'✓ ' if correct else ''}![thumbnail]({thumbnail}) _(#" in cell
            assert f"{score:.3f}" in cell
    assert payload["qualitative"]["examples"]["t2i"][0]["query"] == first["query"]


def numbers_in(value) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in numbers_in(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in numbers_in(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def test_report_json_is_strict_json_and_carries_every_number_the_markdown_shows(report, tmp_path):
    doc, payload, _ = report
    write_json(tmp_path / "report.json", payload)
    loaded = json.loads((tmp_path / "report.json").read_text(), parse_constant=pytest.fail)
    shown_forms = set()
    for number in numbers_in(loaded):
        for digits in range(1, 5):
            shown_forms |= {f"{number:.{digits}f}", f"{abs(number):.{digits}f}"}
    markdown = doc.to_markdown()
    table_lines = [line for line in markdown.splitlines() if line.startswith("|")]
    decimals = re.findall(r"\d+\.\d+", "\n".join(table_lines))
    assert len(decimals) > 100
    missing = sorted({d for d in decimals if d not in shown_forms})
    assert not missing, f"numbers shown but not in report.json: {missing}"


def test_plots_refuse_empty_or_mismatched_input(tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        plot_pr_curves({}, tmp_path / "a.png")
    with pytest.raises(ValueError, match="equal-length"):
        plot_pr_curves({"m": {"recall": [0.5, 1.0], "precision": [1.0], "pr_auc": 0.5}}, tmp_path / "a.png")
    with pytest.raises(ValueError, match="bins"):
        plot_score_distributions(
            {"m": {"bin_centres": [0.0, 0.5], "counts": [[1, 2, 3]], "p5": [0, 0], "p95": [1, 1]}},
            tmp_path / "b.png",
        )
    with pytest.raises(ValueError, match="finite"):
        plot_proximity_ratios({"image": np.array([np.nan, np.inf])}, tmp_path / "c.png")


def test_document_tables_must_match_their_headers():
    doc = Document("t")
    with pytest.raises(ValueError, match="2 cells"):
        doc.table(["a", "b"], [["1"]])
    with pytest.raises(ValueError, match="2 cells"):
        doc.gallery(["a", "b"], [[[GalleryItem(text="x")]]])


def test_markdown_gallery_cells_escape_pipes_and_html_escapes_text():
    doc = Document("t")
    doc.gallery(["q"], [[[GalleryItem(text="a | b <i>", note="n", marked=True)]]])
    assert "✓ a \\| b <i> _(n)_" in doc.to_markdown()
    assert "a | b &lt;i&gt;" in doc.to_html() and "<i>" not in doc.to_html().split("<body>")[1]


# ------------------------------------------------------------------------------ qualitative pieces


def test_doc2vec_neighbour_table_is_exact_and_drops_same_group_entries():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert doc2vec_neighbour_table(vectors, 1).tolist() == [[1], [0], [3], [2]]
    groups = np.array([0, 0, 1, 2])
    assert doc2vec_neighbour_table(vectors, 1, groups).tolist() == [[-1], [-1], [3], [2]]
    with pytest.raises(ValueError, match="lower k"):
        doc2vec_neighbour_table(vectors, 4)


def test_proximity_study_ratios_and_smallest_pairs():
    # four items; ours keeps items 0 and 1 at half the baseline's distance, everything else unchanged
    base_image = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    ours_image = base_image.copy()
    ours_image[1] = [np.sqrt(0.5), np.sqrt(0.5)]  # halfway towards item 0
    text = base_image[::-1].copy()
    doc_vectors = np.array([[1.0, 0.0], [0.95, 0.05], [0.0, 1.0], [0.05, 0.95]])
    study = proximity_study((ours_image, text), (base_image, text), doc_vectors, 1, 100, 0, n_show=1)
    assert study["pairs"].tolist() == [[0, 1], [2, 3]]
    expected = np.linalg.norm(ours_image[0] - ours_image[1]) / np.linalg.norm(base_image[0] - base_image[1])
    assert study["image"]["ratios"][0] == pytest.approx(expected)
    assert study["image"]["smallest"] == [(0, 1, pytest.approx(expected))]
    assert study["text"]["ratios"].tolist() == pytest.approx([1.0, 1.0])
    assert study["text"]["share_closer"] == 0.0


def test_retrieval_examples_rank_by_similarity_and_mark_the_pair():
    image = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    text = np.array([[0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
    groups = np.arange(3)
    examples = retrieval_examples((image, text), (text, image), np.arange(3), np.arange(3), groups, 3, 2, 0)
    first = examples["i2t"][0]
    assert first["query"] == 0
    assert [(p, c) for p, _, c in first["ours"]] == [(0, True), (1, False)]
    assert first["ours"][0][1] == pytest.approx(0.8)
    assert {e["query"] for e in examples["t2i"]} == {0, 1, 2}


def test_snippet_and_thumbnails(tmp_path):
    assert snippet("a  b\nc", 10) == "a b c"
    assert snippet("one two three four", 12) == "one two…"
    cache = np.zeros((3, 4, 4, 3), dtype=np.uint8)
    cache[2, :, :, 0] = 200
    paths = write_thumbnails(cache, np.array([2, 2, 0]), [0, 1], tmp_path / "t", tmp_path)
    assert paths == {0: "t/img_2.png", 1: "t/img_2.png"}
    with Image.open(tmp_path / "t" / "img_2.png") as image:
        assert np.asarray(image)[0, 0].tolist() == [200, 0, 0]


# ------------------------------------------------------------------------- evaluation protocol


def test_retrieval_layout_detects_the_protocol():
    pairs = retrieval_layout(np.arange(3), np.arange(3), np.array(["a", "b", "c"]))
    assert pairs.protocol == "pairs"
    captions = retrieval_layout(np.array([5, 5, 7]), np.array([0, 0, 1]), np.array(["a", "b", "c"]))
    assert captions.protocol == "captions_per_image"
    assert captions.image_positions.tolist() == [0, 2] and captions.image_index.tolist() == [0, 0, 1]
    articles = retrieval_layout(np.array([5, 5, 7]), np.array([0, 1, 2]), np.array(["a", "a", "c"]))
    assert articles.protocol == "images_per_text" and articles.text_positions.tolist() == [0, 2]


def test_full_ranking_with_several_captions_per_image_uses_distinct_images():
    rng = np.random.default_rng(1)
    image, text = unit_rows(rng, 6, 5), unit_rows(rng, 6, 5)
    image[1], image[3] = image[0], image[2]  # pairs 0,1 and 2,3 share an image
    layout = retrieval_layout(
        np.array([0, 0, 1, 1, 2, 3]), np.array([0, 0, 1, 1, 2, 3]), np.arange(6).astype(str)
    )
    result = full_ranking(image, text, layout)
    expected = full_ranking_metrics(image[[0, 2, 4, 5]], text, [0, 0, 1, 1, 2, 3])
    assert result["protocol"] == "captions_per_image" and result["all"] == expected
    assert result["all"]["n_images"] == 4 and "folds_1k" not in result


def test_full_ranking_with_several_images_per_text_swaps_the_directions():
    rng = np.random.default_rng(2)
    image, text = unit_rows(rng, 5, 4), unit_rows(rng, 5, 4)
    text[1] = text[0]
    layout = retrieval_layout(np.array([0, 0, 1, 2, 3]), np.arange(5), np.array(["x", "x", "y", "z", "w"]))
    result = full_ranking(image, text, layout)["all"]
    swapped = full_ranking_metrics(text[[0, 2, 3, 4]], image, [0, 0, 1, 2, 3])
    assert result["t2i_r@1"] == swapped["i2t_r@1"] and result["i2t_medr"] == swapped["t2i_medr"]
    assert result["n_texts"] == 4 and result["n_images"] == 5
    # by hand: an image query is right when its article's text scores highest among the 4 distinct texts
    owner = [0, 0, 1, 2, 3]
    hits = [np.argmax(image[q] @ text[[0, 2, 3, 4]].T) == owner[q] for q in range(5)]
    assert result["i2t_r@1"] == pytest.approx(np.mean(hits))


# -------------------------------------------------------------------------------------------- COCOS


class TinyModel(nn.Module):
    """A small real two-stream model (linear image and text encoders), fast enough for a unit test."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Linear(3 * 4 * 4, 8)
        self.words = nn.Embedding(10, 8)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        image = nn.functional.normalize(self.image(images.flatten(1).float() / 255), dim=-1)
        text = nn.functional.normalize(self.words(tokens).sum(dim=1), dim=-1)
        return {"image": image, "text": text}


def test_collect_cocos_summarises_every_loss_over_one_pass_with_neighbours():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n = 12
    data = PairData(
        images=rng.integers(0, 255, size=(n, 4, 4, 3), dtype=np.uint8),
        image_rows=np.arange(n),
        tokens=rng.integers(1, 10, size=(n, 3)),
        lengths=np.full(n, 3),
        group_ids=np.arange(n),
    )
    neighbours = np.array([[(i + 1) % n, (i + 2) % n] for i in range(n)])
    sampler = BatchSampler(np.arange(n), 4, np.random.default_rng(0), neighbours, "in_batch")
    losses = [
        build_loss("angular", form="smooth", alpha_degrees=45.0, symmetric=True),
        build_loss("within_modality", form="angular", alpha=0.2, beta=0.3),
    ]
    summary = collect_cocos(TinyModel(), losses, data, sampler, 4, torch.device("cpu"))
    assert set(summary) == {"angular", "within_modality"}
    for keys in summary.values():
        assert all(stats["n_batches"] == sampler.batches_per_epoch for stats in keys.values())
    negatives = summary["angular"]["image_to_text_contributing_negatives"]
    # 4 rows per batch: at most 3 negatives per query, at most 12 per batch
    assert 0.0 <= negatives["per_query_mean"] <= 3.0 and 0.0 <= negatives["per_batch_sum_mean"] <= 12.0
    assert any(key.startswith("within_") for key in summary["within_modality"])
