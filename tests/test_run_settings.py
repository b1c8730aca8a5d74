"""``--set path=value``: every setting reached by one path, checked once, one line when wrong (no Luigi here)."""

import pytest

from pipeline.profiles import DEMO, SMOKE
from pipeline.run_settings import (
    apply_changes,
    resolved_profile,
    settings_tree,
    sweep_values,
    variant_changes_for,
)
from pipeline.validation import RunConfigurationError
from pipeline.variants import resolve_variant


def test_each_group_of_settings_is_reached_by_its_path():
    profile = apply_changes(
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
    assert profile.doc2vec.window == 10 and profile.neighbors.k == 50 and profile.neighbors.sample_k is None
    assert profile.split_fractions == {"train": 0.6, "val": 0.1, "test": 0.3}, "train takes what the others leave"
    assert profile.tuning.budget == 2 and profile.tuning.trial_seeds == (0, 1, 2)
    assert profile.eval.n_way == 10 and profile.dedup_threshold == 0.8 and profile.image_cache_size == 48
    assert profile.recipe_option_changes["n_pairs"] == 500 and profile.train.learning_rate == 3e-4
    assert profile.seeds_for("ours") == (3, 4), "seeds= replaces the per-variant seeds too"
    assert SMOKE.neighbors.k == 20, "the profile itself is not changed"
    tree = settings_tree(profile)
    assert tree["neighbors"]["k"] == 50 and tree["split"]["test"] == 0.3 and tree["data"]["options"]["n_pairs"] == 500


def test_variant_changes_reach_one_variant_or_every_variant_with_that_loss():
    profile = apply_changes(
        DEMO,
        [
            "variants.*.train.learning_rate=3e-4",
            "variants.*.within_modality.text_weight=0.5",
            "variants.ours.within_modality.image_weight=0.1",
        ],
    )
    ours = resolve_variant("ours", variant_changes_for(profile, "ours"), profile.loss_defaults)
    params = ours.losses[1].params
    assert params["text_weight"] == 0.5 and params["image_weight"] == 0.1
    assert ours.train_settings(profile.train).learning_rate == 3e-4
    baseline = resolve_variant("ang_np_sym", variant_changes_for(profile, "ang_np_sym"), profile.loss_defaults)
    assert baseline.train_settings(profile.train).learning_rate == 3e-4
    assert "within_modality" not in baseline.loss_names(), "a loss change skips the variants without that loss"
    trip = resolve_variant("ours_trip", variant_changes_for(profile, "ours_trip"), profile.loss_defaults)
    assert trip.losses[1].params["text_weight"] == 0.5 and trip.losses[1].params["image_weight"] == 0.1


def test_a_star_change_is_checked_on_every_variant_even_beside_a_named_one():
    with pytest.raises(RunConfigurationError, match=r"variants.\* \(variant .*\): .*must be >= 0"):
        apply_changes(SMOKE, ["variants.*.within_modality.text_weight=-1", "variants.pvse.train.epochs=3"])


def test_a_later_change_of_a_renamed_parameter_wins_whatever_its_spelling():
    with pytest.warns(FutureWarning):
        profile = apply_changes(
            DEMO, ["variants.ours.within_modality.alpha=0.5", "variants.ours.within_modality.text_weight=0.7"]
        )
    ours = resolve_variant("ours", variant_changes_for(profile, "ours"), profile.loss_defaults)
    assert ours.losses[1].params["text_weight"] == 0.7


def test_an_option_the_recipe_does_not_take_is_refused_naming_the_valid_ones():
    from pipeline.validation import check_recipe_options

    check_recipe_options("embedded", {"n_pairs": 10, "seed": 0})
    with pytest.raises(RunConfigurationError, match=r"recipe 'embedded' has no option\(s\) \['n_pair'\]; valid: n_pairs, seed"):
        check_recipe_options("embedded", {"n_pair": 10})


def test_the_old_spelling_of_a_within_modality_weight_still_works_with_a_warning():
    with pytest.warns(FutureWarning, match="use 'text_weight'"):
        profile = apply_changes(DEMO, ["variants.ours.within_modality.alpha=0.5"])
        ours = resolve_variant("ours", variant_changes_for(profile, "ours"), profile.loss_defaults)
    assert ours.losses[1].params["text_weight"] == 0.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("doc2vec.windw=5", r"^doc2vec has no setting 'windw' \(did you mean 'window'\?\); valid: dm, epochs, hs, "),
        ("neighbor.k=5", r"^the run has no setting 'neighbor' \(did you mean 'neighbors'\?\); valid: data, "),
        ("neighbors.k=ten", r"^--set neighbors.k: 'ten' is not an integer$"),
        ("neighbors.k", r"^--set 'neighbors.k': expected path=value"),
        ("split.val=1.5", r"between 0 and 1"),
        ("split.tset=0.2", r"^split has no setting 'tset' \(did you mean 'test'\?\)"),
        ("train.selection=val_r1", r"^--set train.selection: selection must be one of"),
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
        ("tuning.budget=0", r"at least 1 trial"),
    ],
)
def test_a_wrong_change_is_one_line_naming_what_is_valid(change, message):
    with pytest.raises(RunConfigurationError, match=message) as raised:
        apply_changes(SMOKE, [change])
    assert "\n" not in str(raised.value)


def test_the_resolved_profile_is_cached_and_unchanged_without_changes():
    assert resolved_profile("smoke") is SMOKE
    assert resolved_profile("smoke", ("neighbors.k=10",)) is resolved_profile("smoke", ("neighbors.k=10",))


def test_sweep_values_keep_bracketed_lists_whole():
    assert sweep_values("neighbors.k=10,20,50") == ("neighbors.k", ["10", "20", "50"])
    assert sweep_values("tuning.trial_seeds=[0],[0,1]") == ("tuning.trial_seeds", ["[0]", "[0,1]"])
    with pytest.raises(RunConfigurationError, match="two or more distinct values"):
        sweep_values("neighbors.k=10")
