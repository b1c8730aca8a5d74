"""The fault table (issue 40), the run plan's rows: every value a run would refuse later is refused when it is
planned — ``python -m pipeline plan`` exits 2 with one line naming the setting and what it accepts, and writes
nothing — and the same value stops ``FullRun`` before any task runs. ``before`` is what each probe did at
d4a4466 (the issue's report). What depends on the data's counts is refused by Split, before any training; the
export rows read a finished smoke run. The shared parts are tests/fault_table.py."""

from __future__ import annotations

import json
import shutil

import luigi
import pytest

from pipeline.__main__ import main
from tests.fault_table import (
    Fault,
    assert_refused,
    assert_the_luigi_command_refuses,
    half_written,
    run_command,
)

PLAN_ROWS = [
    Fault("a wrong backbone", "plan", ["--set", "train.backbone=resnet5"], 2, "unknown backbone 'resnet5'; did you mean 'resnet50'?", before="plan went; TrunkFeatures KeyError traceback"),
    Fault("a misspelled trunk", "plan", ["--set", "train.trunk=frozn"], 2, "unknown trunk mode 'frozn'", before="plan went; Train ValueError traceback"),
    Fault("a misspelled neighbor mode", "plan", ["--set", "variants.ours.train.neighbor_mode=inbatch"], 2, "unknown neighbor mode 'inbatch'; did you mean 'in_batch'?", before="plan went; Train ValueError traceback"),
    Fault("a negative seed", "plan", ["--set", "seeds=[-1]"], 2, "seeds >= 0", before="plan went; numpy ValueError in Train"),
    Fault("a negative seed flag", "plan", ["--seeds", "[0,-2]"], 2, "--seeds: give distinct seeds >= 0", before="plan went; ValueError in Train"),
    Fault("a non-integer seed flag", "plan", ["--seeds", "[0,1.5]"], 2, "--seeds [0, 1.5]: give integers", before="exit 4, traceback"),
    Fault("a non-finite learning rate", "plan", ["--set", "train.learning_rate=NaN"], 2, "nan is not a finite number", before="plan went; FloatingPointError in epoch 1"),
    Fault("a non-finite weight decay", "plan", ["--set", "train.weight_decay=Infinity"], 2, "inf is not a finite number", before="plan went; FloatingPointError in epoch 1"),
    Fault("a zero vocabulary", "plan", ["--set", "word_vectors.max_vocab=0"], 2, "word_vectors.max_vocab: must be >= 1", before="plan went; TrainWordVectors failed"),
    Fault("a k of 0 among the preservation ks", "plan", ["--set", "eval.preservation_ks=[0,10]"], 2, "must be a list of k >= 1", before="exit 0, k 0 silently read as 1"),
    Fault("a label another variant has", "plan", ["--set", "variants.ours.label=Ang+NP+Sym"], 2, "variant labels ['Ang+NP+Sym'] name several variants", before="exit 0, 'Headline — Ang+NP+Sym vs Ang+NP+Sym'"),
    Fault("a zero selection cap", "plan", ["--set", "train.selection_max_pairs=0"], 2, "train.selection_max_pairs: must be >= 2", before="'this validation split has 0 pairs' after training began"),
    Fault("a selection cap below its n-way task", "plan", ["--set", "train.selection_max_pairs=3"], 2, "is below the n-way task it selects by", before="plan went; failed in Train"),
    Fault("Doc2Vec without an output layer", "plan", ["--set", "doc2vec.hs=0", "--set", "doc2vec.negative=0"], 2, "no output layer to train", before="plan went; gensim failed in TrainDoc2Vec"),
    Fault("a misspelled variant", "plan", ["--variants", '["ours","ourz"]'], 2, "unknown variant 'ourz'; did you mean 'ours'?", before="exit 2 (already one line)"),
    Fault("variant overrides that are not JSON", "plan", ["--variant-overrides", "{bad"], 2, "--variant-overrides '{bad': expected a JSON object", before="exit 4, 'Uncaught exception in luigi', traceback"),
    Fault("seeds that are not a JSON list", "plan", ["--seeds", "[0,x]"], 2, "--seeds '[0,x]': expected a JSON list", before="exit 4, traceback"),
    Fault("a reject budget that is not a number", "plan", ["--reject-budget", "abc"], 2, "--reject-budget 'abc': expected a number", before="exit 4, traceback"),
    Fault("a negative reject budget", "plan", ["--reject-budget", "-0.1"], 2, "--reject-budget: must be in [0, 1], got -0.1", before="exit 0; every row rejected later"),
    Fault("a data seed that is not an integer", "plan", ["--data-seed", "x"], 2, "--data-seed 'x': expected an integer", before="exit 4, traceback"),
    Fault("a sweep value of the wrong type", "plan", ["--sweep", "neighbors.k=10,x"], 2, "--sweep neighbors.k: 'x' is not an integer", before="exit 2, worded as --set"),
    Fault("an empty sweep value", "plan", ["--sweep", "neighbors.k=10,,20"], 2, "value 2 is empty", before="exit 0, the empty value dropped silently"),
    Fault("an empty last sweep value", "plan", ["--sweep", "neighbors.k=10,20,"], 2, "value 3 is empty", before="exit 0, the empty value dropped silently"),
    Fault("a raw folder that is not there", "plan", ["--dataset", "pairs", "--raw-dir", "/no/such/table.csv"], 2, "/no/such/table.csv does not exist", before="plan went; PrepareShard failed"),
]


@pytest.mark.parametrize("fault", PLAN_ROWS, ids=Fault.id)
def test_plan_refuses_what_the_run_would_refuse_later(fault, tmp_path):
    root = tmp_path / "runs"
    done = run_command(main, ["plan", "--profile", "smoke", "--run-root", str(root), *fault.args])
    assert_refused(done, fault)
    assert done.stderr.startswith("error: ")
    assert not root.exists(), "planning writes nothing"


def test_a_run_root_that_is_a_file_is_refused_when_planned(tmp_path):
    root = tmp_path / "runs"
    root.write_text("not a folder")
    fault = Fault("a run root that is a file", "plan", [], 2, "is a file, not a folder", before="plan went; the first task failed")
    assert_refused(run_command(main, ["plan", "--profile", "smoke", "--run-root", str(root)]), fault)


@pytest.mark.slow
@pytest.mark.parametrize("fault", [PLAN_ROWS[0], PLAN_ROWS[15]], ids=Fault.id)
def test_the_same_value_stops_the_luigi_command_before_any_task(fault, tmp_path):
    assert_the_luigi_command_refuses(fault, tmp_path / "runs")


@pytest.mark.slow
def test_an_n_way_task_larger_than_its_split_stops_at_split_before_any_training(tmp_path):
    """The test split's size is known once the data is split: a 500-way task on the smoke test split is refused
    there, in one line, and no model is trained."""
    from pipeline import FullRun

    root = tmp_path / "runs"
    run = FullRun(profile="smoke", run_root=str(root), set=("eval.n_way=500",), variants=["ang_np_sym"], seeds=[0], protocol="shared")
    errors: list[BaseException] = []
    luigi.Task.event_handler(luigi.Event.FAILURE)(lambda task, error: errors.append(error))
    try:
        assert not luigi.build([run], local_scheduler=True, workers=1, log_level="CRITICAL")
    finally:
        luigi.Task._event_callbacks[luigi.Task][luigi.Event.FAILURE].clear()
    assert len(errors) == 1 and "too few for the 500-way task it is scored by" in str(errors[0])
    assert "\n" not in str(errors[0])
    assert not (root / "Train").exists(), "no model was trained"
    assert half_written(root) == [], "a failed Split leaves no partial output"


EXPORT_ROWS = [
    Fault("export into a path that is a file", "export", "file", 2, "exists and is a file; export into a new folder", before="exit 1, NotADirectoryError traceback"),
    Fault("export a Train folder as another variant", "export", "variant", 2, "trained variant", before="exit 0, --variant ignored"),
    Fault("export from a report whose metadata is damaged", "export", "damaged", 2, "_meta.json is damaged", before="exit 1, JSONDecodeError traceback"),
    Fault("export from a report whose metadata lacks finished_at", "export", "finished_at", 2, "_meta.json is damaged (it has no finished_at)", before="exit 1, KeyError: 'finished_at' traceback"),
    Fault("export from a report whose metadata lacks its headline", "export", "config", 2, "_meta.json is damaged (it has no config.headline.method)", before="exit 1, KeyError: 'config' traceback"),
    Fault("export from a report whose run index is damaged", "export", "run_index", 2, "run_index.json is damaged", before="exit 1, JSONDecodeError traceback"),
]


@pytest.mark.parametrize("fault", EXPORT_ROWS, ids=Fault.id)
def test_export_refuses_in_one_line(fault, smoke_run, tmp_path):
    from serving.cli import main as crossmodal
    from tests.luigi_runs import copied_root

    task, _, _, _ = smoke_run
    root = copied_root(smoke_run, tmp_path)
    report = root / "Report" / task.report().signature()
    train = next((root / "Train").iterdir())
    out = tmp_path / "bundle"
    argv = ["export", str(root), str(out), "--protocol", "shared"]
    meta = json.loads((report / "_meta.json").read_text())
    if fault.args == "file":
        out.write_text("taken")
        argv = ["export", str(root), str(out), "--variant", "ours", "--protocol", "shared", "--report", report.name]
    elif fault.args == "variant":
        trained = json.loads((train / "_meta.json").read_text())["config"]["variant"]["name"]
        argv = ["export", str(train), str(out), "--variant", "pvse" if trained != "pvse" else "ours"]
    elif fault.args in ("finished_at", "config"):  # a field the export reads, gone (an edit, another writer)
        (report / "_meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != fault.args}))
    elif fault.args == "run_index":
        (report / meta["outputs"]["run_index"]).write_text('{"runs": [1')
    else:
        (report / "_meta.json").write_text("{not json")
        argv = ["export", str(root), str(out), "--variant", "ours", "--protocol", "shared"]
    done = run_command(crossmodal, argv)
    assert_refused(done, fault)
    assert half_written(tmp_path) == [] and (out.is_file() or not out.exists())
    shutil.rmtree(root)


TASK_ROWS = [
    Fault("a negative seed of a task started alone", "task", ["Evaluate", "--seed", "-3"], 2, "--seed -3: a seed is >= 0", before="exit 30 after upstream work"),
    Fault("a point out of range", "task", ["Evaluate", "--point", '{"train": {"learning_rate": -1}}'], 2, "--point train.learning_rate: must be > 0", before="exit 30 after work"),
    Fault("a point that is not JSON", "task", ["Evaluate", "--point", "x"], 2, "--point 'x': expected a JSON object", before="exit 4, traceback"),
    Fault("a space NeighborTables has not", "task", ["NeighborTables", "--space", "foo"], 2, "--space 'foo': expected one of text, image", before="exit 4, traceback"),
    Fault("a trunk that does not exist", "task", ["TrunkFeatures", "--backbone", "nope", "--image-size", "32"], 2, "unknown backbone 'nope'", before="exit 30 after PrepareDataset ran"),
    Fault("a trade-off of a variant without the term", "task", ["WithinModalityTradeoff", "--variant", "ang_np_sym"], 2, "has no within_modality loss to scale", before="exit 4, ValueError traceback"),
    Fault("a trade-off from settings that do not exist", "task", ["WithinModalityTradeoff", "--settings-from", "foo"], 2, "--settings-from 'foo': expected one of tuned, shared", before="exit 4, traceback"),
    Fault("flags beside a given plan", "task", ["FullRun", "--plan", "0123456789ab", "--set", "neighbors.k=3"], 2, "holds the run's settings: drop --profile, --set", before="exit 0, the flags ignored"),
]

#: a task given a plan's id: no flag of the settings beside it (the given ones, not only those off their default)
PLAN_ID_ROWS = [
    Fault("the default profile beside a given plan", "task", ["FullRun", "--plan", "0123456789ab", "--profile", "demo"], 2, "holds the run's settings: drop --profile", before="exit 0, --profile demo silently ignored (it equals the default)"),
    Fault("the default profile beside a given plan of a task started alone", "task", ["Split", "--plan", "0123456789ab", "--profile", "demo"], 2, "holds the run's settings: drop --profile", before="--profile demo not refused; exit 35, a traceback (the unknown plan)"),
    Fault("a task started alone with an unknown plan", "task", ["Train", "--plan", "ffffffffffff", "--variant", "ours", "--seed", "0"], 2, "run plan ffffffffffff: ", before="exit 35, a traceback ending in RunConfigurationError"),
]


@pytest.mark.parametrize("fault", PLAN_ID_ROWS, ids=Fault.id)
def test_a_task_given_a_plan_s_id_takes_no_flag_and_needs_the_plan(fault, tmp_path):
    root = tmp_path / "runs"
    done = run_command(main, [*fault.args, "--run-root", str(root)])
    assert_refused(done, fault)
    assert "start the run again from the command that made it" in done.stderr or "drop --" in done.stderr
    assert not root.exists(), "nothing ran, nothing was written"


@pytest.mark.parametrize("fault", TASK_ROWS, ids=Fault.id)
def test_a_task_started_alone_checks_what_identifies_it(fault, tmp_path):
    root = tmp_path / "runs"
    done = run_command(main, [*fault.args, "--profile", "smoke", "--run-root", str(root)])
    assert_refused(done, fault)
    assert not root.exists(), "nothing ran, nothing was written"


def test_a_task_luigi_rebuilds_from_every_parameter_is_no_flag_beside_its_plan(tmp_path):
    """Luigi rebuilds a task a forked worker yields (a tuning step's Trains) from every parameter, the flags at
    their defaults included: only flags typed on the command line count as given beside ``--plan``."""
    from luigi.cmdline_parser import CmdlineParser

    from pipeline import Train

    root = tmp_path / "runs"
    with CmdlineParser.global_instance(["--module", "pipeline", "FullRun", "--profile", "smoke", "--run-root", str(root)]) as parser:
        run = parser.get_task_obj()
        params = run.clone(Train, variant="ours", seed=0).to_str_params()
        assert {"profile", "set", "seeds"} <= set(params) and params["plan"] == run.plan_id
        luigi.task_register.Register.clear_instance_cache()  # as in the scheduling process, which never saw it
        assert Train.from_str_params(params).plan == run.plan_id
    assert not root.exists()
