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
    doc2vec_neighbor_table,
    proximity_study,
    retrieval_examples,
    snippet,
    write_thumbnails,
)
from evaluation.plots import (
    plot_pr_curves,
    plot_preservation_against_k,
    plot_proximity_ratios,
    plot_score_distributions,
)
from evaluation.protocol import full_ranking, retrieval_layout
from evaluation.report import (
    FIGURES_DIR,
    Qualitative,
    ReportInputs,
    ShownItem,
    VariantRun,
    build_report,
    cocos_rows,
    headline_comparison,
)
from evaluation.retrieval import full_ranking_metrics
from evaluation.statistics import paired_bootstrap_items_and_seeds
from models.batching import BatchSampler
from models.losses import build_loss
from models.training import PairData
from pipeline.tasks.cocos import collect_cocos
from task_engine.outputs import write_json
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
            "n_queries": 12,
        },
        "neighbor_preservation": {
            "image": {"mean": i2t / 2, "k_used": 3, "k_requested": 20},
            "text": {"mean": t2i / 2, "k_used": 3, "k_requested": 20},
        },
        # 12 test items: the paper's k = 3 here (hand-made), the headline k = 1 (chance 1/11)
        "neighbor_preservation_at_k": {
            "headline_k": 1,
            "paper_k": 3,
            "paper_ratio": 0.006,
            "n": 12,
            "ks": {
                "1": {
                    "chance": 1 / 11,
                    "image": {"mean": i2t / 4, "lift": i2t / 4 * 11},
                    "text": {"mean": t2i / 4, "lift": t2i / 4 * 11},
                },
                "3": {
                    "chance": 3 / 11,
                    "image": {"mean": i2t / 2, "lift": i2t / 2 * 11 / 3},
                    "text": {"mean": t2i / 2, "lift": t2i / 2 * 11 / 3},
                },
            },
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
    preservation = {"image": draw.integers(0, 2, size=12) * 1.0, "text": draw.integers(0, 2, size=12) * 1.0}
    losses = ["angular"] if variant == "ang_np_sym" else ["angular", "within_modality"]
    return VariantRun(
        variant,
        label,
        seed,
        metrics,
        {"mean_epoch_seconds": 1.5, "best_epoch": 2},
        hits,
        curves,
        losses,
        preservation,
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


def report_runs() -> list[VariantRun]:
    return [
        make_run("ang_np_sym", "Ang+NP+Sym", 0, 0.5, 0.25, 0.125),
        make_run("ang_np_sym", "Ang+NP+Sym", 1, 0.75, 0.5, 0.375),
        make_run("ours", "Ours", 0, 0.875, 0.625, 0.25),
        make_run("ours_minus_text", "Ours − L_text", 0, 0.625, 0.5, 0.2),
    ]


@pytest.fixture(scope="module")
def report(report_dir: Path, qualitative: Qualitative) -> tuple[Document, dict, Path]:
    """Built once for the module (drawing the figures is the slow part); tests only read it."""
    inputs = ReportInputs(
        title="test report",
        runs=report_runs(),
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
    # the seed count of every row: two seeds of the baseline, one of ours
    assert (
        table_1.splitlines()[2].startswith("| Method | I→T | T→I |")
        and "| seeds |" in table_1.splitlines()[2]
    )
    assert table_row(table_1, "Ang+NP+Sym")[-1] == "2" and table_row(table_1, "Ours")[-1] == "1"
    table_3 = section(md, "Table 3 — neighbor preservation")
    assert table_3.splitlines()[2].startswith(
        "| Method | Image @k=3 | Text @k=3 | Image @k=1 | Text @k=1 | seeds |"
    )
    # paper's k = 3: i2t / 2 and t2i / 2; headline k = 1: i2t / 4 and t2i / 4; one seed
    assert table_row(table_3, "Ours")[1:] == [
        "0.4375",
        "0.3125",
        f"{0.875 / 4:.4f}",
        f"{0.625 / 4:.4f}",
        "1",
        "angular+within_modality",
    ]
    # chance k / (n - 1) with n = 12 test items
    assert table_row(table_3, "chance k/(n−1)")[1:5] == ["0.2727", "0.2727", "0.0909", "0.0909"]
    assert (
        table_row(table_3, "Ang+NP+Sym")[1] == "0.3125 ± 0.0884"
        and table_row(table_3, "Ang+NP+Sym")[5] == "2"
    )
    assert payload["variants"]["ang_np_sym"]["i2t"]["std"] == pytest.approx(np.std([0.5, 0.75], ddof=1))


def test_report_opens_with_the_headline_comparison(report):
    doc, payload, _ = report
    # the title paragraph, the headline against the paper's own effect (docs/protocols.md), whether the models
    # learned, then the headline before the tables of every variant
    assert doc.blocks[0][0] == "p" and doc.blocks[1] == ("h2", "Against the paper's own effect")
    md = doc.to_markdown()
    assert (
        md.index("## Against the paper's own effect")
        < md.index("## Did the models learn?")
        < md.index("## Headline")
        < md.index("## Table 1")
    )
    assert "## Headline — Ours vs Ang+NP+Sym under each protocol" in md
    headline = section(md, "Headline details — Ours vs Ang+NP+Sym (shared protocol)")
    result = payload["headline"]
    assert result["available"] and result["method"] == "ours" and result["baseline"] == "ang_np_sym"
    assert (
        result["method_seeds"] == [0] and result["baseline_seeds"] == [0, 1] and result["paired_seeds"] == [0]
    )
    assert result["n_items"] == 12 and result["n_resamples"] == 2000 and result["skipped"] == []
    assert (
        "on 12 test items; 1 seed (0) of Ours and 2 seeds (0, 1) of Ang+NP+Sym, 1 paired by seed" in headline
    )
    assert "This run could detect differences of about" in headline
    assert "smaller ones are invisible to it" in headline
    metrics = ["5-way R@1 I→T", "5-way R@1 T→I", "NP image @k=1", "NP text @k=1"]
    assert [row["metric"] for row in result["rows"]] == metrics
    # every row is the item-and-seed bootstrap of the runs' per-item outcomes
    runs = {(r.variant, r.seed): r for r in report_runs()}
    outcomes = {
        "5-way R@1 I→T": lambda r: r.hits["i2t_hits"].mean(axis=0),
        "NP text @k=1": lambda r: r.preservation["text"],
    }
    for row in result["rows"]:
        if row["metric"] not in outcomes:
            continue
        get = outcomes[row["metric"]]
        expected = paired_bootstrap_items_and_seeds(
            {0: get(runs[("ours", 0)])},
            {0: get(runs[("ang_np_sym", 0)]), 1: get(runs[("ang_np_sym", 1)])},
            2000,
            seed=0,
        )
        assert {key: row[key] for key in expected} == expected
        assert row["mde"] == pytest.approx(2.8 * row["se"]) and row["mde"] > 0
        cells = table_row(headline, row["metric"])
        assert cells[1:7] == [
            f"{row['method_mean']:.4f}",
            f"{row['baseline_mean']:.4f}",
            f"{row['difference']:+.4f}",
            f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
            f"{row['mde']:.4f}",
            f"{row['p_value']:.4f}",
        ]
        assert f"{row['mde']:.4f} in {row['metric']}" in headline
    assert result["rows"][2]["k"] == 1 and result["rows"][2]["chance"] == pytest.approx(1 / 11)


def planted_runs(variant: str, label: str, shift: bool, seeds=(0, 1, 2), n: int = 2000) -> list[VariantRun]:
    """Runs whose per-item outcomes differ from the baseline's by a known amount.

    Baseline: hits with probability 0.6 over 2 redraws; with ``shift``, the method's hits are the
    baseline's with 10% of the items (all of them items the baseline missed in both redraws) turned into
    hits, so the method's R@1 is exactly 0.1 higher on every seed. Preservation: the method adds
    uniform(0, 0.2) noise (mean 0.1) to the baseline's per-sample values. Without ``shift`` the method is
    an independent draw from the baseline's distribution.
    """
    runs = []
    for seed in seeds:
        rng = np.random.default_rng(100 + seed)
        hits = {d: (rng.random((2, n)) < 0.6).astype(np.uint8) for d in ("i2t", "t2i")}
        preservation = {m: rng.random(n) * 0.5 for m in ("image", "text")}
        if variant != "ang_np_sym":
            other = np.random.default_rng(200 + seed)
            if shift:
                for d in hits:
                    missed = np.flatnonzero(hits[d].max(axis=0) == 0)
                    hits[d] = hits[d].copy()
                    hits[d][:, other.choice(missed, size=n // 10, replace=False)] = 1
                preservation = {m: v + other.uniform(0.0, 0.2, size=n) for m, v in preservation.items()}
            else:
                hits = {d: (other.random((2, n)) < 0.6).astype(np.uint8) for d in hits}
                preservation = {m: other.random(n) * 0.5 for m in preservation}
        run = make_run(variant, label, seed, 0.5, 0.5, 0.5)
        run.metrics["neighbor_preservation_at_k"]["headline_k"] = 3
        run.hits = {f"{d}_hits": h for d, h in hits.items()}
        run.preservation = preservation
        runs.append(run)
    return runs


def test_headline_finds_a_planted_shift_of_one_tenth():
    runs = planted_runs("ang_np_sym", "Ang+NP+Sym", False) + planted_runs("ours", "Ours", True)
    result = headline_comparison(runs, n_resamples=1000)
    assert result["paired_seeds"] == [0, 1, 2] and result["n_items"] == 2000
    for row in result["rows"]:
        assert row["ci_low"] > 0, row  # excludes 0
        assert row["ci_low"] <= 0.1 <= row["ci_high"], row  # covers the planted 0.1
        assert 0 < row["mde"] < 0.1
    # the hits were shifted by exactly 0.1 on every seed
    assert [row["difference"] for row in result["rows"][:2]] == [pytest.approx(0.1), pytest.approx(0.1)]
    doc, _ = build_report(ReportInputs("t", runs, bootstrap_resamples=1000), output_dir=None)
    assert table_row(section(doc.to_markdown(), "Headline details"), "5-way R@1 I→T")[-1] == "Ours higher"


def test_headline_without_a_true_difference_contains_zero_and_still_has_an_mde():
    runs = planted_runs("ang_np_sym", "Ang+NP+Sym", False) + planted_runs("ours", "Ours", False)
    result = headline_comparison(runs, n_resamples=1000)
    for row in result["rows"]:
        assert row["ci_low"] < 0 < row["ci_high"], row
        assert row["mde"] > 0
    doc, _ = build_report(ReportInputs("t", runs, bootstrap_resamples=1000), output_dir=None)
    assert table_row(section(doc.to_markdown(), "Headline details"), "NP text @k=3")[-1] == "not resolved"


def test_headline_says_in_one_line_when_a_variant_did_not_run():
    doc, payload = build_report(
        ReportInputs("t", [make_run("ours", "Ours", 0, 0.6, 0.3, 0.2)]), output_dir=None
    )
    at = doc.blocks.index(("h2", "Headline — Ours vs ang_np_sym under each protocol"))
    assert doc.blocks[at + 1] == (
        "p",
        "Not available: `ang_np_sym` did not run, so `ours` − `ang_np_sym` cannot be computed.",
    )
    assert doc.blocks[at + 2][0] == "h2"
    assert payload["headline"]["available"] is False and payload["headline"]["missing"] == ["ang_np_sym"]


def test_headline_compares_the_variants_the_inputs_name():
    inputs = ReportInputs(
        "t", report_runs(), method="ours_minus_text", baseline="ours", bootstrap_resamples=500
    )
    doc, payload = build_report(inputs, output_dir=None)
    assert ("h2", "Headline — Ours − L_text vs Ours under each protocol") in doc.blocks
    assert payload["headline"]["n_resamples"] == 500
    assert set(payload["significance"]) == {"ang_np_sym", "ours_minus_text"}
    assert "Paired bootstrap against Ours" in doc.to_markdown()


def test_headline_skips_preservation_when_runs_did_not_save_it():
    runs = report_runs()
    runs[0].preservation = {}
    result = headline_comparison(runs, n_resamples=200)
    assert [row["key"] for row in result["rows"]] == ["i2t", "t2i"]
    assert [s["key"] for s in result["skipped"]] == ["preservation_image", "preservation_text"]


def test_preservation_against_k_table_and_figure(report):
    doc, payload, out = report
    table = section(doc.to_markdown(), "Neighbor preservation against k")
    assert table.splitlines()[2].startswith("| Method | modality | k=1 | k=3 |")
    assert table_row(table, "chance k/(n−1)")[2:] == ["0.0909", "0.2727"]
    # ours: i2t / 4 at k = 1 (lift 11 x that), i2t / 2 at k = 3 (lift 11/3 x that)
    assert table_row(table, "Ours", "image")[2:] == [
        f"{0.875 / 4:.4f} ({0.875 / 4 * 11:.2f}×)",
        f"{0.875 / 2:.4f} ({0.875 / 2 * 11 / 3:.2f}×)",
    ]
    figure = payload["figures"]["preservation_against_k"]
    assert figure["curves"]["Ours"]["image"] == [0.875 / 4, 0.875 / 2]
    assert figure["chance"] == {"ks": [1, 3], "chance": [1 / 11, 3 / 11]}
    assert figure["file"] == f"{FIGURES_DIR}/preservation_against_k.png"


def test_topic_table_shows_within_modality_precision():
    runs = [
        make_run("ang_np_sym", "Ang+NP+Sym", 0, 0.5, 0.25, 0.1),
        make_run("ours", "Ours", 0, 0.6, 0.3, 0.2),
    ]
    for offset, run in enumerate(runs):
        run.metrics["topic_precision"] = {
            "k": 5,
            "i2t": 0.5 + offset / 8,
            "t2i": 0.375,
            "within_k": 5,
            "i2i": 0.25 + offset / 4,
            "t2t": 0.625,
        }
    doc, payload = build_report(ReportInputs("t", runs), output_dir=None)
    topics = section(doc.to_markdown(), "Topic precision")
    assert topics.splitlines()[2].startswith("| Method | I→T P@5 | T→I P@5 | I→I P@5 | T→T P@5 |")
    assert table_row(topics, "Ours")[1:] == ["0.6250", "0.3750", "0.5000", "0.6250"]
    assert payload["variants"]["ours"]["topic_i2i"]["mean"] == 0.5


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
    for name in (
        "pr_curve.png",
        "score_distribution.png",
        "proximity_ratios.png",
        "preservation_against_k.png",
    ):
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
            # a fraction the markdown shows as a percentage (the paper's relative effects, "+15.6%")
            shown_forms |= {f"{100 * number:.{digits}f}", f"{abs(100 * number):.{digits}f}"}
    markdown = doc.to_markdown()
    table_lines = [line for line in markdown.splitlines() if line.startswith("|")]
    decimals = re.findall(r"\d+\.\d+", "\n".join(table_lines))
    assert len(decimals) > 100
    missing = sorted({d for d in decimals if d not in shown_forms})
    where = [line for line in table_lines if any(d in line for d in missing)]
    assert not missing, f"numbers shown but not in report.json: {missing}, in: {where}"


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
    with pytest.raises(ValueError, match="at least one"):
        plot_preservation_against_k({}, {"ks": [1], "chance": [0.1]}, tmp_path / "d.png")
    with pytest.raises(ValueError, match="equal-length"):
        plot_preservation_against_k(
            {"m": {"ks": [1, 2], "image": [0.5], "text": [0.5, 0.6]}},
            {"ks": [1], "chance": [0.1]},
            tmp_path / "d.png",
        )


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


def test_doc2vec_neighbor_table_is_exact_and_drops_same_group_entries():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert doc2vec_neighbor_table(vectors, 1).tolist() == [[1], [0], [3], [2]]
    groups = np.array([0, 0, 1, 2])
    assert doc2vec_neighbor_table(vectors, 1, groups).tolist() == [[-1], [-1], [3], [2]]
    with pytest.raises(ValueError, match="lower k"):
        doc2vec_neighbor_table(vectors, 4)


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


def test_collect_cocos_summarises_every_loss_over_one_pass_with_neighbors():
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
    neighbors = np.array([[(i + 1) % n, (i + 2) % n] for i in range(n)])
    sampler = BatchSampler(np.arange(n), 4, np.random.default_rng(0), neighbors, "in_batch")
    losses = [
        build_loss("angular", form="smooth", alpha_degrees=45.0, symmetric=True),
        build_loss("within_modality", form="angular", text_weight=0.2, image_weight=0.3),
    ]
    summary = collect_cocos(TinyModel(), losses, data, sampler, 4, torch.device("cpu"))
    assert set(summary) == {"angular", "within_modality"}
    for keys in summary.values():
        assert all(stats["n_batches"] == sampler.batches_per_epoch for stats in keys.values())
    negatives = summary["angular"]["image_to_text_contributing_negatives"]
    # 4 rows per batch: at most 3 negatives per query, at most 12 per batch
    assert 0.0 <= negatives["per_query_mean"] <= 3.0 and 0.0 <= negatives["per_batch_sum_mean"] <= 12.0
    assert any(key.startswith("within_") for key in summary["within_modality"])


def test_neighbor_tables_show_the_same_topic_share_of_sampled_neighbors():
    table = {
        "annoy": {"n_items": 40, "k": 20, "dim": 8, "metric": "angular", "n_trees": 10, "search_k": -1},
        "recall_vs_exact": {"recall_at_k": 0.9, "n_queries": 10},
        "same_topic_share": {"all_k": 0.523, "sample_pool": 0.709, "sample_k": 10},
    }
    runs = [make_run("ours", "Ours", 0, 0.6, 0.3, 0.2)]
    doc, _ = build_report(ReportInputs("t", runs, neighbor_tables={"text": table}), output_dir=None)
    md = doc.to_markdown()
    assert "| text | 0.523 | 0.709 | 10 |" in md


def test_training_table_says_whether_the_trunk_started_from_imagenet_weights():
    run = make_run("ours", "Ours", 0, 0.6, 0.3, 0.2)
    run.training = {**run.training, "trunk": "frozen", "imagenet_weights_loaded": True, "epochs": 7}
    doc, _ = build_report(ReportInputs("t", [run]), output_dir=None)
    training = section(doc.to_markdown(), "Training")
    assert table_row(training, "Ours")[-3:] == ["0", "frozen", "true"]
    assert table_row(training, "Ours")[2] == "7"


def test_a_tuned_only_report_describes_the_training_of_its_tuned_runs():
    """Without the shared protocol the tables show the tuned runs: the Training table reads their training
    summaries too (it read the shared runs' and showed "?" for a demo-finetune run)."""
    tuned = []
    for run in report_runs()[:3]:
        run.training.update(trunk="top1", epochs=7 + run.seed, imagenet_weights_loaded=True)
        tuned.append(run)
    inputs = ReportInputs(title="tuned only", runs=[], tuned_runs=tuned, protocols=("tuned",), run_info={})
    doc, _ = build_report(inputs)
    training = section(doc.to_markdown(), "Training")
    assert table_row(training, "Ang+NP+Sym")[2:] == ["7,8", "0,1", "top1", "true"]
    assert table_row(training, "Ours")[4:] == ["top1", "true"]
