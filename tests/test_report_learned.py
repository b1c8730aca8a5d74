"""The report's opening verdict: each method's n-way R@1 against chance, and the sentence that comes first
when no method is distinguishable from chance (issue 30, item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.document import Document
from evaluation.report.inputs import VariantRun
from evaluation.report.learned import against_chance, chance_table_section, learned_section, verdict


def run(variant: str, seed: int, hit_rate: float, n: int = 400, n_way: int = 5) -> VariantRun:
    """A run whose per-query hits over 4 redraws are drawn at ``hit_rate``."""
    rng = np.random.default_rng([seed, int(hit_rate * 1000)])
    hits = {f"{d}_hits": (rng.random((4, n)) < hit_rate).astype(np.uint8) for d in ("i2t", "t2i")}
    return VariantRun(variant, variant.upper(), seed, {"retrieval": {"n_way": n_way}}, {}, hits)


def test_a_method_at_chance_is_not_called_learned_and_one_well_above_it_is():
    rows = against_chance([run("good", s, 0.6) for s in (0, 1)] + [run("flat", s, 0.2) for s in (0, 1)], 500)
    good, flat = rows
    assert good["chance"] == 0.2 and good["i2t"]["r1"] == pytest.approx(0.6, abs=0.03)
    assert good["learned"] and good["i2t"]["ci_low"] > 0.3
    assert not flat["learned"] and flat["within_mde_of_chance"]
    assert flat["i2t"]["ci_low"] < 0 < flat["i2t"]["ci_high"]
    assert verdict({"shared": rows}).startswith("FLAT is not clearly above chance")
    assert verdict({"tuned": rows, "shared": rows}).startswith("FLAT (tuned) and FLAT (shared) are not clearly")


def test_when_every_method_is_within_its_mde_of_chance_that_sentence_comes_first():
    rows = against_chance([run(name, s, 0.2) for name in ("a", "b") for s in (0, 1)], 500)
    doc = Document("t")
    learned_section(doc, {"tuned": rows})
    chance_table_section(doc, {"tuned": rows})
    markdown = doc.to_markdown()
    first_paragraph = markdown.split("## Did the models learn?")[1].strip().splitlines()[0]
    assert first_paragraph.startswith("**No method learned anything this run can detect**")
    assert "Tuned protocol, 5-way R@1 − chance (I→T / T→I, 95% CI): A " in markdown
    assert markdown.index("Tuned protocol, 5-way") < markdown.index("| tuned | A |")
