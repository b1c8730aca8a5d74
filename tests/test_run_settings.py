"""``--set path=value``: every setting reached by one path, resolved into one plan, checked once, one line when
wrong (no Luigi here)."""

import pytest

from pipeline.config.changes import apply_changes, sweep_values
from pipeline.config.checks import RunConfigurationError
from pipeline.config.flags import flag_changes
from pipeline.config.plan import RunPlan, resolve_plan
from pipeline.config.profiles import PROFILES
from pipeline.config.run_settings import summary_tree

SMOKE = PROFILES.get("smoke").settings()


def test_each_group_of_settings_is_reached_by_its_path():
    settings = apply_changes(
        SMOKE,
        [
            "doc2vec.window=10",
            "neighbors.k=50",
            "neighbors.sample_k=null",
            "split.test=0.3",
            "tuning.budget=2",
            "eval.n_way=10",
            "dedup.threshold=0.8",
            "data.image_cache_size=48",
            "data.options.n_pairs=500",
            "train.learning_rate=3e-4",
            "tuning.trial_seeds=[0,1,2]",
            "seeds=[3,4]",
        ],
    )
    assert settings.doc2vec.window == 10 and settings.neighbors.k == 50 and settings.neighbors.sample_k is None
    assert settings.split.fractions() == {"train": 0.6, "val": 0.1, "test": 0.3}, "train takes what the others leave"
    assert settings.tuning.budget == 2 and settings.tuning.trial_seeds == (0, 1, 2)
    assert settings.eval.n_way == 10 and settings.dedup.threshold == 0.8 and settings.data.image_cache_size == 48
    assert settings.data.options["n_pairs"] == 500 and settings.train.learning_rate == 3e-4
    assert settings.seeds_for("ours") == (3, 4), "seeds= replaces the per-variant seeds too"
    assert SMOKE.neighbors.k == 20, "the profile's settings are not changed"
    tree = summary_tree(settings)
    assert tree["neighbors"]["k"] == 50 and tree["split"]["test"] == 0.3 and tree["data"]["options"]["n_pairs"] == 500


def test_variant_changes_reach_one_variant_or_every_variant_with_that_loss():
    plan = resolve_plan(
        "demo",
        [
            "variants.*.train.learning_rate=3e-4",
            "variants.*.within_modality.text_weight=0.5",
            "variants.ours.within_modality.image_weight=0.1",
        ],
    )
    ours = plan.variant("ours")
    params = ours.losses[1].params
    assert params["text_weight"] == 0.5 and params["image_weight"] == 0.1
    assert plan.train_settings("ours").learning_rate == 3e-4
    assert plan.train_settings("ang_np_sym").learning_rate == 3e-4
    assert "within_modality" not in plan.variant("ang_np_sym").loss_names(), "a loss change skips the variants without that loss"
    trip = plan.variant("ours_trip")
    assert trip.losses[1].params["text_weight"] == 0.5 and trip.losses[1].params["image_weight"] == 0.1


def test_a_star_change_is_checked_on_every_variant_even_beside_a_named_one():
    with pytest.raises(RunConfigurationError, match=r"variants.\w+: .*must be >= 0"):
        resolve_plan("smoke", ["variants.*.within_modality.text_weight=-1", "variants.pvse.train.epochs=3"])


def test_a_change_of_a_variant_outside_the_grid_is_still_checked():
    with pytest.raises(RunConfigurationError, match=r"variants.ours_trip: .*must be >= 0"):
        resolve_plan("smoke", ["variants.ours_trip.within_modality.text_weight=-1"], grid=["ang_np_sym"])


def test_the_paper_s_symbols_are_no_spelling_of_the_weights():
    """alpha and beta were renamed before any release: they are unknown names now, with the new one offered."""
    with pytest.raises(RunConfigurationError, match=r"unknown parameter\(s\) of loss 'within_modality' \['alpha'\]"):
        resolve_plan("demo", ["variants.ours.within_modality.alpha=0.5"])


def test_every_flag_is_one_change_and_a_flag_wins_over_a_set_of_the_same_setting():
    changes = flag_changes(
        dataset="pairs",
        raw_dir="/data/x.csv",
        dataset_options={"n_pairs": 9},
        data_seed=3,
        reject_budget=0.5,
        seeds=[4, 5],
        protocol="tuned",
        variant_overrides={"ours": {"train": {"learning_rate": 0.01}, "label": "Mine"}},
    )
    assert changes == [
        'data.recipe="pairs"',
        'data.raw_dir="/data/x.csv"',
        "data.options.n_pairs=9",
        "data.seed=3",
        "data.reject_budget=0.5",
        "seeds=[4, 5]",
        'tuning.protocol="tuned"',
        "variants.ours.train.learning_rate=0.01",
        'variants.ours.label="Mine"',
    ]
    plan = resolve_plan("smoke", ["seeds=[0]", *flag_changes(seeds=[7])])
    assert plan.seeds_for("ours") == (7,)


def test_a_plan_read_back_from_its_json_is_the_same_plan():
    plan = resolve_plan("smoke", ["neighbors.k=10", "variants.ours.within_modality.text_weight=0.4", "split.test=0.2"])
    again = RunPlan.from_json(plan.as_json())
    assert again == plan and again.id == plan.id
    assert again.settings.neighbors.k == 10 and again.settings.seeds_by_variant["ours"] == (0, 1)
    assert again.variant("ours", {"train": {"learning_rate": 0.5}}).train == {"learning_rate": 0.5}


def test_an_option_the_recipe_does_not_take_is_refused_naming_the_valid_ones():
    from pipeline.config.checks import check_recipe_options

    check_recipe_options("embedded", {"n_pairs": 10, "seed": 0})
    with pytest.raises(RunConfigurationError, match=r"recipe 'embedded' has no option\(s\) \['n_pair'\]; valid: n_pairs, seed"):
        check_recipe_options("embedded", {"n_pair": 10})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("doc2vec.windw=5", r"^doc2vec has no setting 'windw' \(did you mean 'window'\?\); valid: dm, epochs, hs, "),
        ("neighbor.k=5", r"^the run has no setting 'neighbor' \(did you mean 'neighbors'\?\); valid: data, "),
        ("neighbors.k=ten", r"^--set neighbors.k: 'ten' is not an integer$"),
        ("neighbors.k", r"^--set 'neighbors.k': expected path=value"),
        ("split.val=1.5", r"^--set split.val: must be in \(0, 1\), got 1.5$"),
        ("split.tset=0.2", r"^split has no setting 'tset' \(did you mean 'test'\?\)"),
        ("train.selection=val_r1", r"^--set train.selection: unknown selection metric 'val_r1'; did you mean"),
        ("variants.oure.train.epochs=3", r"unknown variant 'oure' \(did you mean 'ours'\?\)"),
        ("variants.*.train.learnig_rate=1", r"^train has no setting 'learnig_rate' \(did you mean 'learning_rate'\?\)"),
        ("variants.ours.within_modality.text_wieght=1", r"unknown parameter\(s\) of loss 'within_modality' \['text_wieght'\]"),
        ("variants.ang_np_sym.within_modality.text_weight=1", r"does not match variant 'ang_np_sym'"),
        ("variants.*.within_modality.text_weight=-1", r"must be >= 0"),
        ("neighbors.sample_k=500", r"cannot exceed neighbors.k"),
        ("seeds=[1,1]", r"distinct seeds"),
        ("train.epochs=0", r"^--set train.epochs: must be >= 1, got 0$"),
        ("variants.ours.train.epochs=-3", r"^--set variants.ours.train.epochs: must be >= 1, got -3$"),
        ("dedup.threshold=5", r"must be in \(0, 1\]"),
        ("eval.n_way=1", r"must be >= 2"),
        ("variants.ours.angular.alpha_degrees=abc", r"'abc' is not a number"),
        ("variants.*.label=x", r"one label for every variant"),
        ("tuning.budget=0", r"^--set tuning.budget: must be >= 1, got 0$"),
        ("tuning.protocol=tunned", r"^--set tuning.protocol: must be one of shared, tuned, both, got 'tunned'$"),
        ("grid=[\"ours\",\"oure\"]", r"^--set grid: unknown variant 'oure'; did you mean 'ours'\?"),
        ("seeds_by_variant.ours=[1]", r"^the run has no setting 'seeds_by_variant'"),
        ("data.generated_options.n_pairs=5", r"^data has no setting 'generated_options'"),
    ],
)
def test_a_wrong_change_is_one_line_naming_what_is_valid(change, message):
    with pytest.raises(RunConfigurationError, match=message) as raised:
        resolve_plan("smoke", [change])
    assert "\n" not in str(raised.value)


def test_sweep_values_keep_bracketed_lists_whole():
    assert sweep_values("neighbors.k=10,20,50") == ("neighbors.k", ["10", "20", "50"])
    assert sweep_values("tuning.trial_seeds=[0],[0,1]") == ("tuning.trial_seeds", ["[0]", "[0,1]"])
    with pytest.raises(RunConfigurationError, match="two or more distinct values"):
        sweep_values("neighbors.k=10")
