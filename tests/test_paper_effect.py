"""The report's reading of a comparison against the paper's own effect (issues 45 and 50): where the paper's
point estimate lies against hand-built intervals, "at the line", Holm's adjustment against its definition, the
paper's figures, the variance split behind the seeds-or-items projection against a loop reference and its range,
and the tie rule on hand-built runs ("tie not tested" when the other side was not trained)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.paper_effect import (
    CONFIRMED,
    CONSISTENT,
    RULED_OUT,
    VarianceParts,
    items_needed,
    paper_effects,
    paper_readings,
    reading,
    seeds_needed,
    variance_parts,
)
from evaluation.report import ReportInputs, build_report
from evaluation.report.paper_section import (
    DEPENDS,
    HOLDS,
    NO_TIE,
    NOT_TESTED,
    _power_phrase,
    compare_with_paper,
)
from evaluation.statistics import holm
from tests.test_report import planted_runs


@pytest.mark.parametrize(
    ("effect", "low", "high", "expected"),
    [
        (0.020, -0.005, 0.019, RULED_OUT),  # the paper's gain lies above the upper bound
        (0.020, -0.005, 0.020, CONSISTENT),  # on the upper bound: inside the interval
        (0.015, -0.005, 0.019, CONSISTENT),
        (0.015, 0.015, 0.030, CONFIRMED),  # the lower bound reaches the paper's gain
        (0.015, 0.016, 0.030, CONFIRMED),
        (0.015, 0.001, 0.030, CONSISTENT),  # resolved above 0 but not above the paper's gain
        (0.015, -0.030, -0.010, RULED_OUT),  # the baseline better: the gain is ruled out
    ],
)
def test_the_paper_effect_is_read_against_the_interval(effect, low, high, expected):
    assert reading(effect, low, high) == expected


def test_the_papers_figures_are_table_1_and_table_3():
    politics, goodnews = paper_effects("ours", "ang_np_sym", "i2t", n_way=5)
    assert (politics.dataset, politics.table, politics.scale) == ("Politics", "Table 1", "absolute")
    assert politics.effect == pytest.approx(0.6467 - 0.6270) and goodnews.effect == pytest.approx(0.8849 - 0.8704)
    assert paper_effects("ours_trip", "trip_np_sym", "t2i", 5)[0].effect == pytest.approx(0.4877 - 0.4801)
    # another n-way task than the paper's 5-way: compared as a relative gain
    assert paper_effects("ours", "ang_np_sym", "i2t", n_way=20)[0].scale == "relative"
    text = paper_effects("ours", "ang_np_sym", "preservation_text", 5)
    assert [e.scale for e in text] == ["relative", "relative"]
    assert text[0].effect == pytest.approx(0.1703 / 0.1544 - 1)
    assert paper_effects("pvse_ours", "pvse", "i2t", 5) == [] and paper_effects("ours", "ang_np_sym", "x", 5) == []


def test_a_relative_reading_divides_the_interval_by_the_baselines_mean():
    row = {"key": "preservation_text", "difference": 0.01, "ci_low": 0.005, "ci_high": 0.015, "baseline_mean": 0.1}
    politics = paper_readings(row, "ours", "ang_np_sym", 5)[0]
    assert (politics["ours"], politics["ci_low"], politics["ci_high"]) == pytest.approx((0.1, 0.05, 0.15))
    assert politics["paper_effect"] == pytest.approx(0.103, abs=1e-3) and politics["reading"] == CONSISTENT


def planted_differences(seed_sd: float, item_sd: float, noise_sd: float, seeds: int, items: int):
    """Paired outcomes whose difference is 0.01 + seed part + item part + noise."""
    rng = np.random.default_rng(7)
    seed_part, item_part = rng.normal(0, seed_sd, seeds), rng.normal(0, item_sd, items)
    baseline = {s: rng.normal(0.5, 0.1, items) for s in range(seeds)}
    method = {s: baseline[s] + 0.01 + seed_part[s] + item_part + rng.normal(0, noise_sd, items) for s in range(seeds)}
    return method, baseline


def test_the_variance_split_recovers_planted_parts():
    method, baseline = planted_differences(0.02, 0.3, 0.2, seeds=40, items=3000)
    parts = variance_parts(method, baseline)
    assert parts.seeds == pytest.approx(0.02**2, rel=0.5)
    assert parts.items == pytest.approx(0.3**2, rel=0.1)
    assert parts.residual == pytest.approx(0.2**2, rel=0.05)
    # calibrated to a reported standard error, the model gives that error at the run's own design
    calibrated = variance_parts(method, baseline, bootstrap_se=0.01)
    assert calibrated.se(40, 3000) == pytest.approx(0.01)
    assert variance_parts({0: np.zeros(5)}, {0: np.zeros(5)}) is None, "one paired seed: the seed part is unknown"


def test_seeds_and_items_needed_match_a_loop_over_designs():
    parts = VarianceParts(seeds=4e-4, items=0.09, residual=0.04, n_seeds=3, n_items=2000)
    for target in (0.05, 0.03, 0.022, 0.012):
        expected = next((s for s in range(1, 1001) if 2.8 * math.sqrt(4e-4 / s + 0.09 / 2000 + 0.04 / (s * 2000)) <= target), None)
        assert seeds_needed(parts, target) == expected
        loop = next((n for n in range(1, 10**6) if 2.8 * math.sqrt(4e-4 / 3 + 0.09 / n + 0.04 / (3 * n)) <= target), None)
        assert items_needed(parts, target) == loop
    assert seeds_needed(parts, 0.022) is not None and items_needed(parts, 0.05) is not None
    # below what the items' spread allows at this test size, no number of seeds is enough; and vice versa
    assert seeds_needed(parts, 2.8 * math.sqrt(0.09 / 2000) * 0.99) is None
    assert items_needed(parts, 2.8 * math.sqrt(4e-4 / 3) * 0.99) is None


def selection(variant: str, label: str, tie: bool) -> dict:
    """A tuned variant's selection.json as Tune writes it: two finished trials, the first chosen."""
    run = {"score": 0.6, "best_epoch": 3, "epochs": 5, "max_epochs": 20, "capped": False, "val_rsum": None}
    trials = [
        {"point": {"train.learning_rate": lr}, "rungs": [], "stopped_at_rung": None, "score": 0.6, "seeds": {"0": run}}
        for lr in (0.001, 0.003)
    ]
    return {
        "variant": variant,
        "label": label,
        "trials": trials,
        "chosen": 0,
        "runner_up": 1,
        "chosen_point": trials[0]["point"],
        "tie": tie,
        "comparison": {"difference": 0.001, "ci_low": -0.01 if tie else 0.0005, "ci_high": 0.012},
        "decided_by": "a tie" if tie else "a resolved difference",
        "metric": {"name": "val_nway_r1", "label": "expected 5-way R@1", "higher_is_better": True},
        "budget": 2,
        "draw_seed": 0,
        "trial_seeds": [0],
        "halving": {"rung_epochs": [], "reduction_factor": 3, "rule": "none"},
        "extended_epochs": 40,
        "rule": "the best mean",
        "tie_rule": "the higher mean",
    }


def tuned_inputs(tie: bool, runner_up_better: bool) -> ReportInputs:
    """Tuned runs where Ours is a planted +0.1 over Ang+NP+Sym; Ours's choice a tie (or not) whose runner-up's runs
    have no such gain (``runner_up_better`` False) or the same gain."""
    baseline = planted_runs("ang_np_sym", "Ang+NP+Sym", False)
    ours = planted_runs("ours", "Ours", True)
    runner_up = planted_runs("ours", "Ours", runner_up_better)
    return ReportInputs(
        "t",
        [],
        protocols=("tuned",),
        tuned_runs=baseline + ours,
        selections={"ours": selection("ours", "Ours", tie), "ang_np_sym": selection("ang_np_sym", "Ang+NP+Sym", False)},
        runner_up_runs=runner_up if tie else [],
        bootstrap_resamples=300,
    )


def test_a_conclusion_is_read_under_both_tied_choices():
    holds = compare_with_paper(tuned_inputs(tie=True, runner_up_better=True), "tuned")
    depends = compare_with_paper(tuned_inputs(tie=True, runner_up_better=False), "tuned")
    alone = compare_with_paper(tuned_inputs(tie=False, runner_up_better=False), "tuned")
    assert {e["tie"] for e in holds} == {HOLDS} and {e["tie"] for e in alone} == {NO_TIE}
    assert {e["tie"] for e in depends if e["key"] in ("i2t", "t2i")} == {DEPENDS}
    entry = next(e for e in depends if e["key"] == "i2t")
    assert [(u["method_choice"], u["baseline_choice"]) for u in entry["under_choices"]] == [("chosen", "chosen"), ("runner-up", "chosen")]
    assert entry["under_choices"][0]["conclusion"][0] == "Ours higher"
    assert entry["under_choices"][1]["conclusion"][0] == "not resolved"
    doc, payload = build_report(tuned_inputs(tie=True, runner_up_better=False), output_dir=None)
    md = doc.to_markdown()
    assert md.index("## Against the paper's own effect") < md.index("## Did the models learn?")
    assert "**This depends on the tie**: it is not a finding." in md
    assert payload["paper_effect"]["tuned"][0]["readings"][0]["dataset"] == "Politics"


def test_the_projection_is_in_the_report_for_each_comparison():
    entries = compare_with_paper(tuned_inputs(tie=False, runner_up_better=False), "tuned")
    for entry in entries:
        power = entry["power"]
        assert power["available"] and power["mde_now"] == pytest.approx(entry["mde"])
        assert power["target_mde"] > 0 and power["paper_dataset"] in ("Politics", "GoodNews")


def test_holm_matches_its_definition_on_hand_built_p_values():
    # m = 4: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> made non-decreasing
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []
    rng = np.random.default_rng(1)
    for _ in range(50):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 12)).tolist()
        # the step-down procedure as Holm states it: reject in order while p_(i) <= alpha / (m - i + 1)
        for alpha in (0.01, 0.05, 0.1):
            order, rejected = sorted(range(len(p)), key=lambda i: p[i]), set()
            for rank, index in enumerate(order):
                if p[index] > alpha / (len(p) - rank):
                    break
                rejected.add(index)
            assert {i for i, adjusted in enumerate(holm(p)) if adjusted <= alpha} == rejected


def test_a_bound_within_a_tenth_of_the_mde_of_the_papers_value_is_at_the_line():
    row = {"key": "i2t", "difference": -0.01, "ci_low": -0.02, "ci_high": 0.0105, "baseline_mean": 0.6, "se": 0.01, "mde": 0.028}
    politics = paper_readings(row, "ours", "ang_np_sym", 5)[0]  # the paper's Politics effect: +0.0197
    assert politics["reading"] == RULED_OUT and not politics["at_the_line"]
    close = paper_readings({**row, "ci_high": 0.0197 - 0.002}, "ours", "ang_np_sym", 5)[0]
    assert close["reading"] == RULED_OUT and close["at_the_line"], "0.002 from the paper's value: under 0.1 x 0.028"
    inside = paper_readings({**row, "ci_high": 0.0197 + 0.001}, "ours", "ang_np_sym", 5)[0]
    assert inside["reading"] == CONSISTENT and inside["at_the_line"]
    assert politics["p_value"] == pytest.approx(math.erfc(abs(-0.01 - 0.0197) / 0.01 / math.sqrt(2)), rel=1e-3)


def test_a_tie_whose_other_side_was_not_trained_reads_not_tested():
    inputs = tuned_inputs(tie=True, runner_up_better=True)
    inputs.runner_up_runs = []
    entries = compare_with_paper(inputs, "tuned")
    assert {e["tie"] for e in entries} == {NOT_TESTED}
    assert "its runner-up (trial 1) was not trained" in entries[0]["untested_ties"][0]
    # a trial stopped at a rung and not resolved below the choice there: a tie no run tested
    stopped = tuned_inputs(tie=False, runner_up_better=False)
    stopped.selections["ours"] = {**stopped.selections["ours"], "rung_ties": [4], "rung_comparisons": {"4": {"epochs": 3}}}
    entries = compare_with_paper(stopped, "tuned")
    assert {e["tie"] for e in entries} == {NOT_TESTED} and "stopped at the rung of 3 epochs" in entries[0]["untested_ties"][0]
    md = build_report(stopped, output_dir=None)[0].to_markdown()
    assert "**A tie was not tested**" in md and "no tie" not in md.split("## Against the paper's own effect")[1].split("\n## ")[0].replace(NO_TIE, "")


def test_the_section_counts_its_readings_and_gives_holm_beside_the_raw_ones():
    entries = compare_with_paper(tuned_inputs(tie=False, runner_up_better=False), "tuned")
    readings = [r for e in entries for r in e["readings"]]
    assert all("holm_p" in r and r["holm_p"] >= r["p_value"] for r in readings)
    md = build_report(tuned_inputs(tie=False, runner_up_better=False), output_dir=None)[0].to_markdown()
    assert f"makes **{len(readings)} readings**" in md and "Holm-adjusted" in md
    assert "point estimate" in md and "on this data" in md and "ruled out" not in md


def test_the_projection_gives_the_range_its_seed_spread_allows():
    for entry in compare_with_paper(tuned_inputs(tie=False, runner_up_better=False), "tuned"):
        power = entry["power"]
        low, high = power["seeds_needed_range"]
        shown = [n for n in (low, power["seeds_needed"], high) if n is not None]
        assert shown == sorted(shown), "more seed spread never needs fewer seeds"
        assert power["variance"]["seeds_range"][0] <= power["variance"]["seeds"] <= power["variance"]["seeds_range"][1]


@pytest.mark.parametrize(
    ("seed_range", "said"),
    [
        ((None, None), "at either end of its 95% range no number of seeds would reach it"),
        ((5, None), "between 5 and no number of seeds"),
        ((4, 36), "between 4 and 36"),
    ],
)
def test_the_seed_range_reads_as_words_never_none_and_none(seed_range, said):
    power = {"available": True, "seeds_needed": seed_range[0], "items_needed": None, "n_items": 2089, "n_seeds": 3,
             "seeds_needed_range": list(seed_range), "target_mde": 0.0073, "paper_dataset": "GoodNews"}
    text = _power_phrase(power)
    assert said in text and "none" not in text and "rests on 3 seeds (2 degrees of freedom" in text
