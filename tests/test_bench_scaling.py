"""The scaling benchmark's fitting, projections and JSON shape on hand-made measurements; its stages' tasks
(one run plan for all of them); and a run of its first two stages at toy sizes through its child processes."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_scaling import (
    PROJECTION_SIZES,
    STAGES,
    Measurement,
    fit_power_law,
    format_table,
    main,
    parse_sizes,
    project,
    stage_tasks,
    summarize,
)


def test_a_power_law_is_recovered_exactly():
    sizes = [2_000, 8_000, 32_000, 128_000]
    a, b = fit_power_law(sizes, [3 * n**1.5 for n in sizes])
    assert b == pytest.approx(1.5, abs=1e-12)
    assert a == pytest.approx(3.0, rel=1e-9)
    assert project(a, b, 246_000) == pytest.approx(3 * 246_000**1.5, rel=1e-9)


def test_two_sizes_give_the_slope_between_them():
    # 10 s at 2k, 40 s at 8k: 4x the time for 4x the pairs, b = 1; at 1M, 40 * 125 = 5,000 s
    a, b = fit_power_law([2_000, 8_000], [10.0, 40.0])
    assert b == pytest.approx(1.0)
    assert project(a, b, 1_000_000) == pytest.approx(5_000.0)


def test_noisy_points_are_fitted_by_least_squares_on_logs():
    # log2-spaced sizes with values 1, 4, 4, 16 (in log2: 0, 2, 2, 4 against 0, 1, 2, 3): slope 6 / 5
    a, b = fit_power_law([1, 2, 4, 8], [1, 4, 4, 16])
    assert b == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("sizes", "values"),
    [([2_000], [1.0]), ([2_000, 2_000], [1.0, 2.0]), ([2_000, 8_000], [0.0, 1.0]), ([1, 2], [1.0])],
)
def test_a_fit_that_cannot_be_made_says_so(sizes, values):
    with pytest.raises(ValueError):
        fit_power_law(sizes, values)


def fake_measurements() -> list[Measurement]:
    """A linear stage (seconds = 0.01 n, 100 MB before the work + 0.05 n MB) and a quadratic one."""
    rows = []
    for n in (8_000, 2_000):  # out of order on purpose
        rows.append(Measurement("dedup", n, 0.01 * n, 100 + 0.05 * n, 100.0))
        rows.append(
            Measurement("evaluate", n, 1e-6 * n**2, 200 + 1e-5 * n**2, 200.0, {"epoch_seconds": n / 1000})
        )
    return rows


def test_the_summary_has_the_issue_s_json_shape():
    summary = json.loads(json.dumps(summarize(fake_measurements())))
    assert list(summary["stages"]) == ["dedup", "evaluate"]
    for entry in summary["stages"].values():
        assert entry["sizes"] == [2_000, 8_000]
        assert len(entry["seconds"]) == len(entry["peak_rss_mb"]) == 2
        assert {"time_exponent", "memory_exponent", "projected"} <= set(entry)
        assert (
            set(entry["projected"]) == {str(n) for n in PROJECTION_SIZES} == {"246000", "466000", "1000000"}
        )
        for projection in entry["projected"].values():
            assert set(projection) == {"seconds", "peak_rss_mb"}
    assert summary["stages"]["evaluate"]["epoch_seconds"] == [2.0, 8.0]


def test_memory_is_fitted_above_the_rss_before_the_work():
    stages = summarize(fake_measurements())["stages"]
    dedup, evaluate = stages["dedup"], stages["evaluate"]
    assert dedup["time_exponent"] == pytest.approx(1.0)
    assert dedup["memory_exponent"] == pytest.approx(1.0)
    assert evaluate["time_exponent"] == pytest.approx(2.0)
    assert evaluate["memory_exponent"] == pytest.approx(2.0)
    # GoodNews: 0.01 * 466k = 4,660 s; 100 MB + 0.05 * 466k = 23,400 MB
    assert dedup["projected"]["466000"]["seconds"] == pytest.approx(4_660.0)
    assert dedup["projected"]["466000"]["peak_rss_mb"] == pytest.approx(23_400.0)
    assert evaluate["projected"]["1000000"]["seconds"] == pytest.approx(1e6)
    assert evaluate["projected"]["1000000"]["peak_rss_mb"] == pytest.approx(200 + 1e7)


def test_the_table_has_a_row_per_stage_and_the_projections():
    table = format_table(summarize(fake_measurements()))
    lines = table.splitlines()
    assert lines[0].startswith("| stage | 2k s | 8k s | 2k MB | 8k MB | b time | b mem | 246k")
    assert "1M (projected)" in lines[0]
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| dedup", "| evaluate"]
    assert "| 1.00 | 1.00 |" in lines[2] and "| 2.00 | 2.00 |" in lines[3]


def test_sizes_parse_with_suffixes():
    assert parse_sizes("8k, 2000,1M,2k") == [2_000, 8_000, 1_000_000]


def test_an_unknown_stage_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        main(["--sizes", "300,600", "--stages", "dedup,nonsense"])
    assert "nonsense" in capsys.readouterr().err
    assert "dedup" in STAGES


def test_one_size_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        main(["--sizes", "32k,32000", "--stages", "dedup"])
    assert "at least two different sizes" in capsys.readouterr().err


# --- the stages' tasks and a run through the child processes ------------------------------------------------


def test_every_stage_requires_only_what_it_or_an_earlier_stage_builds(tmp_path):
    """The stages run one per process, each finding its upstream on disk: every task a stage builds must
    require only tasks of an earlier stage or earlier in its own list, which holds when all of them carry one
    run plan (at 7285da5 validate_cache's PrepareDataset required a PrepareShard of another plan than the
    one the stage built, and the first stage failed)."""
    import luigi

    built: set[str] = set()
    plans = set()
    for stage in STAGES:
        for task in stage_tasks(stage, 300, tmp_path / "runs", "smoke"):
            missing = [u.task_id for u in luigi.task.flatten(task.requires()) if u.task_id not in built]
            assert not missing, f"{stage}: {task.task_id} requires {missing}, which no earlier stage builds"
            built.add(task.task_id)
            plans.add(task.plan_id)
    assert len(plans) == 1
    assert not (tmp_path / "runs").exists()  # planning alone writes nothing


@pytest.mark.slow
def test_the_first_stages_run_in_their_own_processes(tmp_path, capsys):
    """``bench_scaling.py`` end to end at toy sizes (~45 s on two busy cores: four child processes): the two
    stages at two sizes each, the second stage finding the first's outputs from another process."""
    out = tmp_path / "scaling.json"
    main(["--profile", "smoke", "--sizes", "150,300", "--stages", "validate_cache,dedup", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert list(summary["stages"]) == ["validate_cache", "dedup"] and summary["run"]["sizes"] == [150, 300]
    tasks = {"validate_cache": {"PrepareShard", "PrepareDataset"}, "dedup": {"Deduplicate", "Split"}}
    for stage, entry in summary["stages"].items():
        assert entry["sizes"] == [150, 300] and all(seconds > 0 for seconds in entry["seconds"])
        assert all(set(timed) == tasks[stage] for timed in entry["task_seconds"])
        assert all(peak >= base for peak, base in zip(entry["peak_rss_mb"], entry["baseline_rss_mb"], strict=True))
    assert all(seconds > 0 for seconds in summary["stages"]["validate_cache"]["generator_seconds"])
    assert "| validate_cache |" in capsys.readouterr().out
