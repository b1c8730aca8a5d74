"""``crossmodal audit`` (issue 33): the score's components against a loop reference on hand-built vectors,
the command on the smoke run's bundle and test split (ranked CSV, report with thumbnails, filtered table,
one-line errors), and the benchmark's corruption and metrics against naive references."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serving.audit import COMPONENTS, AuditSettings, audit_components, audit_score, nearest_others
from serving.cli import main
from serving.table_evaluation import EvaluationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_audit import auroc, corruption, paired_difference, precision_at, run_share  # noqa: E402


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def loop_components(image, text, doc, groups, k):
    """The definition, one pair at a time: neighbors of other groups by cosine, ties to the lower row."""
    n = len(image)
    out = {name: np.zeros(n) for name in COMPONENTS}
    for i in range(n):
        others = [j for j in range(n) if groups[j] != groups[i]]
        by_image = sorted(others, key=lambda j: (-cosine(image[i], image[j]), j))[:k]
        by_doc = sorted(others, key=lambda j: (-cosine(doc[i], doc[j]), j))[:k]
        out["cross_modal"][i] = 1 - cosine(image[i], text[i])
        out["image_neighborhood"][i] = np.mean([1 - cosine(text[i], text[j]) for j in by_image])
        out["text_neighborhood"][i] = np.mean([1 - cosine(image[i], image[j]) for j in by_doc])
    return out


def test_components_equal_the_loop_definition_and_a_mismatched_pair_ranks_first():
    rng = np.random.default_rng(3)
    n, d = 24, 6
    topics = rng.normal(size=(4, d))
    topic = np.arange(n) % 4
    image = topics[topic] + 0.3 * rng.normal(size=(n, d))
    text = topics[topic] + 0.3 * rng.normal(size=(n, d))
    doc = topics[topic] + 0.3 * rng.normal(size=(n, d))
    groups = np.arange(n)
    groups[5] = groups[4]  # one image with two captions: never each other's neighbor
    image[7] = topics[(topic[7] + 1) % 4] + 0.3 * rng.normal(size=d)  # pair 7 shows another topic's photo
    got = audit_components(image, text, doc, groups, k=3)
    want = loop_components(image, text, doc, groups, k=3)
    for name in COMPONENTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12)
    score = audit_score(got, (1.0, 1.0, 1.0))
    assert int(np.argmax(score)) == 7
    for name in COMPONENTS:  # each component on its own ranks it high too
        assert 7 in np.argsort(-got[name])[:3], name
    neighbors = nearest_others(image, groups, 3)
    assert 5 not in neighbors[4] and 4 not in neighbors[5]


def test_settings_and_tables_that_cannot_be_audited_are_errors():
    with pytest.raises(EvaluationError, match="--k"):
        AuditSettings(k=0)
    with pytest.raises(EvaluationError, match="--weights"):
        AuditSettings(weights=(0.0, 0.0, 0.0))
    one_group = np.zeros((3, 2)) + 1.0
    with pytest.raises(EvaluationError, match="one group"):
        audit_components(one_group, one_group, one_group, np.zeros(3, dtype=int), k=2)


def test_corruption_is_a_derangement_of_the_chosen_share():
    for share, n in ((0.01, 500), (0.1, 200), (0.5, 9)):
        shown, swapped = corruption(n, share, np.random.default_rng(0))
        assert swapped.sum() == max(2, round(share * n))
        assert sorted(shown[swapped]) == sorted(np.flatnonzero(swapped))  # the chosen rows' images, moved
        assert (shown[~swapped] == np.flatnonzero(~swapped)).all()


def test_auroc_and_precision_equal_naive_counts():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 40).astype(float)  # many ties
    positive = rng.random(40) < 0.3
    pos, neg = scores[positive], scores[~positive]
    pairs = [(1.0 if p > q else 0.5 if p == q else 0.0) for p, q in itertools.product(pos, neg)]
    assert auroc(scores, positive) == pytest.approx(np.mean(pairs))
    order = sorted(range(40), key=lambda i: (-scores[i], i))[:7]
    assert precision_at(scores, positive, 7) == pytest.approx(positive[order].mean())
    difference = paired_difference([0.1, 0.3, 0.2])
    assert difference["mean"] == pytest.approx(0.2) and difference["low"] < 0.2 < difference["high"]


def test_on_planted_swaps_the_audit_beats_random():
    rng = np.random.default_rng(4)
    topics = rng.normal(size=(8, 16))
    topic = np.arange(400) % 8
    image = topics[topic] + 0.8 * rng.normal(size=(400, 16))
    text = topics[topic] + 0.8 * rng.normal(size=(400, 16))
    result = run_share(image, text, text, np.arange(400), 0.1, 0, AuditSettings(k=5))
    assert result["_swapped"] == 40
    assert result["audit (LEMoN-style)"]["auroc"] > 0.8 > 0.65 > result["random"]["auroc"]


@pytest.fixture(scope="module")
def audited(smoke_test_table, tmp_path_factory):
    folder, search_index, n_valid = smoke_test_table
    out = tmp_path_factory.mktemp("audit")
    bundle = str(search_index.output_path("bundle"))
    code = main(
        [
            "audit",
            bundle,
            "--table",
            str(folder / "pairs.csv"),
            "--out",
            str(out),
            "--flag-share",
            "0.1",
            "--top",
            "5",
        ]
    )
    return code, out, n_valid


def test_audit_writes_the_ranked_csv_report_and_filtered_table(audited):
    code, out, n_valid = audited
    assert code == 0
    frame = pd.read_csv(out / "audit.csv")
    assert len(frame) == n_valid and list(frame["rank"]) == list(range(1, n_valid + 1))
    assert frame["score"].is_monotonic_decreasing
    assert {"pair_id", "image_path", "text", *COMPONENTS}.issubset(frame.columns)
    rejects = pd.read_csv(out / "rejects.csv")
    assert set(rejects["pair_id"]) == {"html", "blank"}
    summary = json.loads((out / "summary.json").read_text())
    flagged = round(0.1 * n_valid)
    assert summary["n_flagged"] == flagged and summary["n_kept"] == n_valid - flagged
    kept = pd.read_csv(out / "filtered_pairs.csv")
    assert len(kept) == n_valid - flagged
    assert not set(kept["pair_id"]) & set(frame["pair_id"].head(flagged))
    report = (out / "report.md").read_text()
    assert "LEMoN" in report and report.count("](thumbs/") == 5
    assert len(list((out / "thumbs").glob("*.png"))) == 5


def test_audit_reruns_to_the_same_ranking(audited, smoke_test_table, tmp_path):
    _, out, _ = audited
    folder, search_index, _ = smoke_test_table
    assert (
        main(
            [
                "audit",
                str(search_index.output_path("bundle")),
                "--table",
                str(folder / "pairs.csv"),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert (tmp_path / "audit.csv").read_bytes() == (out / "audit.csv").read_bytes()


@pytest.mark.parametrize("problem", ["flag share", "missing table", "no bundle", "k"])
def test_audit_mistakes_are_one_line_and_exit_2(problem, smoke_test_table, tmp_path, capsys):
    folder, search_index, _ = smoke_test_table
    bundle, table, extra = str(search_index.output_path("bundle")), str(folder / "pairs.csv"), []
    if problem == "flag share":
        extra = ["--flag-share", "1.5"]
    elif problem == "missing table":
        table = str(tmp_path / "nope.csv")
    elif problem == "no bundle":
        bundle = str(tmp_path / "nothing")
    else:
        extra = ["--k", "0"]
    assert main(["audit", bundle, "--table", table, "--out", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
