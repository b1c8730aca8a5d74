"""One model config (issue 52, items 1 and 2; issue 53, item 2): the config a model is built from is declared once
and shared by the settings tree, the model builder and model.json, which is read back through the same
declarations; a record's parts must agree with each other; the trunk mode is parsed once and its stage count
checked in one place; each loss declares its settings once, and a default changed there changes the listing, the
loss built and what a run records and hashes. Records written by the code before this change (tests/fixtures/
model_records, formats 1 and 2) still load."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from common.hashing import file_sha256
from common.settings import REQUIRED, SettingValueError, info_of, redeclared, significant
from models.backbones import BACKBONES, build_trunk, stage_count
from models.config import SETTINGS_FIELDS, ModelConfig, trunk_mode
from models.losses import LOSSES, build_loss
from models.losses.angular import Angular, AngularSettings
from models.record_check import ModelRecordError, record_checksum
from models.record_settings import settings_disagreement
from models.registry import build_model
from models.settings import TrainSettings
from models.trained import ModelRecord, build_from_record, load_trained, read_record
from pipeline.__main__ import main
from pipeline.config.plan import resolve_plan
from pipeline.config.run_settings import RunSettings, setting_rows
from pipeline.config.variant_spec import LossSpec
from tests.fault_table import run_command

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "model_records"
RECORDS = ("frozen_vse", "top1_vse", "finetune_pvse", "format1_frozen_vse")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "model.json").read_text())


def resealed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its checksum recomputed: a forgery consistent with its own seal."""
    return {**record, "checksum": record_checksum(record)}


# ------------------------------------------------------------------------------------------- earlier records
@pytest.mark.parametrize("name", RECORDS)
def test_records_written_before_the_declarations_still_load_and_read_back_unchanged(name):
    record = read_record(FIXTURES / name / "model.json")
    assert record.to_json() == fixture(name), "read and written again, the record is the same JSON (its seal holds)"
    assert record.format == (1 if name.startswith("format1") else 2)
    model = build_model(record.model, dataclasses.replace(record.encoder, pretrained=False), None, **record.model_options)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_a_fixture_model_loads_its_weights_and_embeds(tmp_path):
    """The 7295e00 record's model, built from it, saved as its Train saves a checkpoint (made here: no binary in
    git) and sealed into a copy of the record, loads through the seal check and embeds."""
    torch.manual_seed(0)
    built = build_from_record(read_record(FIXTURES / "frozen_vse" / "model.json"))
    checkpoint = tmp_path / "model_best.pt"
    torch.save({"epoch": 3, "model": built.state_dict()}, checkpoint)
    old = fixture("frozen_vse")
    with pytest.raises(ModelRecordError, match="not the checkpoint its model record was sealed with"):
        load_trained(ModelRecord.from_json(old), checkpoint)
    record = ModelRecord.from_json(resealed({**old, "weights": {**old["weights"], "sha256": file_sha256(checkpoint)}}))
    model, epoch = load_trained(record, checkpoint)
    assert epoch == 3
    features = torch.randn(2, record.encoder.feature_dim)
    image = model.encode_image(features)
    assert image.shape == (2, record.encoder.embed_dim) and torch.allclose(image.norm(dim=1), torch.ones(2))


def test_a_format_1_record_reads_its_vocabulary_from_the_run_root_and_nothing_else_outside_its_folder():
    """The one conversion of format 1: its vocabulary is the run root's TrainWordVectors output; any other path
    leading out of the folder is refused, in either format."""
    old = fixture("format1_frozen_vse")
    assert ModelRecord.from_json(old).vocabulary["file"].startswith("../../TrainWordVectors/")
    for path in ("../../Evaluate/0123456789ab/metrics.json", "/etc/passwd", "..", "sub/vocab.json"):
        with pytest.raises(ModelRecordError, match="vocabulary.file"):
            ModelRecord.from_json({**old, "vocabulary": {**old["vocabulary"], "file": path}})
    sealed = fixture("frozen_vse")
    moved = resealed({**sealed, "vocabulary": {**sealed["vocabulary"], "file": old["vocabulary"]["file"]}})
    with pytest.raises(ModelRecordError, match="vocabulary.file: .*a format 2 record's vocabulary is a file in its folder"):
        ModelRecord.from_json(moved)


# ------------------------------------------------------------------------------------- one declaration each
def test_the_training_settings_share_the_model_configs_declarations():
    model_fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name: f for f in dataclasses.fields(TrainSettings)}
    for name in SETTINGS_FIELDS:
        assert info_of(train_fields[name]) is info_of(model_fields[name]), name
        assert train_fields[name].default == model_fields[name].default, name
    record_fields = {f.name: f for f in dataclasses.fields(ModelRecord)}
    for name in ("image_size", "max_text_tokens"):
        assert info_of(record_fields[name]) is info_of(train_fields[name]), name
    assert info_of(record_fields["image_size"]).limit.describe() == "in [8, 8192]"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("encoder.embed_dim", 0),
        ("encoder.embed_dim", 1 << 17),
        ("encoder.gru_hidden", -3),
        ("encoder.word_dim", True),
        ("encoder.vocab_size", 1),
        ("encoder.feature_dim", 0),
        ("encoder.pretrained", "yes"),
        ("image_size", 4),
        ("image_size", 9000),
        ("max_text_tokens", 0),
        ("tokenizer_version", 99),
        ("features", "mapped"),
        ("std", [0.5, 0.5]),
        ("vocabulary.size", 1),
        ("vocabulary.sha256", "abc"),
        ("frozen_trunk.seed", -1),
    ],
)
def test_the_model_config_round_trips_through_model_json_with_its_declared_ranges(path, value):
    """A value out of a field's declared range (the settings' own ranges, where the field is a setting) is refused
    when read back, naming the field, though the record's seal was recomputed; the same number is refused when
    the settings or the config are made."""
    record = fixture("frozen_vse")
    assert ModelRecord.from_json(record).to_json() == record
    forged = copy.deepcopy(record)
    *parents, last = path.split(".")
    target = forged
    for key in parents:
        target = target[key]
    target[last] = value
    with pytest.raises(ModelRecordError, match=rf"^{path.replace('.', chr(92) + '.')}"):
        ModelRecord.from_json(resealed(forged))
    name = path.split(".")[-1]
    out_of_range = isinstance(value, int) and not isinstance(value, bool)  # a wrong type is refused when read
    if out_of_range and (path.startswith("encoder.") or name in ("image_size", "max_text_tokens")):
        owner = ModelConfig if path.startswith("encoder.") else TrainSettings
        with pytest.raises((SettingValueError, ValueError)):
            owner(**{**({"trunk": "frozen", "feature_dim": 8} if owner is ModelConfig else {}), name: value})


def test_a_record_field_the_model_does_not_declare_is_refused_in_one_line():
    record = fixture("frozen_vse")
    for forged, said in (
        ({**record, "model_options": {"bogus": 1}}, "model_options: unknown field(s) ['bogus']; it holds none"),
        ({**record, "encoder": {**record["encoder"], "depth": 3}}, "encoder: unknown field(s) ['depth']"),
        ({**record, "surprise": 1}, "unknown field(s) ['surprise']"),
    ):
        with pytest.raises(ModelRecordError) as refused:
            ModelRecord.from_json(resealed(forged))
        assert said in str(refused.value) and "\n" not in str(refused.value)
    pvse = fixture("finetune_pvse")
    with pytest.raises(ModelRecordError, match=r"model_options.num_embeds: must be in \[1, 64\], got 0"):
        ModelRecord.from_json(resealed({**pvse, "model_options": {"num_embeds": 0}}))


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda r: r["trunk_training"].update(trained_stages=2), "trunk_training.trained_stages: 2, but trunk 'top1' trains 1"),
        (lambda r: r["trunk_training"].update(trained_stages="all"), "trunk_training.trained_stages: 'all', but trunk 'top1' trains 1"),
        (lambda r: r["trunk_training"].update(trained_stages=3, stages=7), "trunk_training.trained_stages: 3"),
        (lambda r: r["trunk_training"].update(stages=4), "trunk_training.stages: 4, but backbone 'efficientnet_lite0' has 7"),
        (lambda r: r.pop("trunk_training"), "trunk_training: missing for trunk 'top1', which trains"),
        (lambda r: r["encoder"].update(trunk="top8"), "encoder.trunk: 'top8': backbone 'efficientnet_lite0' has 7 stages"),
        (lambda r: r["encoder"].update(trunk="frozen"), "trunk_training: given for trunk 'frozen', which trains none of it"),
        (lambda r: r.update(frozen_trunk=None), "frozen_trunk: missing for a trunk 'top1'"),
        (lambda r: r.update(mean=[0.485, 0.456, 0.406]), "mean: [0.485, 0.456, 0.406], but backbone 'efficientnet_lite0' normalises by [0.5, 0.5, 0.5]"),
        (lambda r: r["vocabulary"].update(size=13), "vocabulary.size: 13 words, but encoder.vocab_size is 12"),
        (lambda r: r.update(features="spatial"), "features: 'spatial', but model 'vse' takes 'pooled' features"),
    ],
)
def test_a_record_whose_parts_contradict_each_other_is_refused_though_its_seal_holds(edit, said):
    record = fixture("top1_vse")
    edit(record)
    with pytest.raises(ModelRecordError) as refused:
        ModelRecord.from_json(resealed(record))
    assert str(refused.value).startswith(said), str(refused.value)


def test_export_reads_a_setting_an_older_train_left_out_of_its_hash_as_unstated_not_as_today_s_default():
    """A Train made while ``trunk_batchnorm="batch"`` was the default hashed no ``trunk_batchnorm``; read back
    today it must not be taken for ``"frozen"`` (today's default) and its intact record refused."""
    from serving.bundle import BundleError
    from serving.trained_as_recorded import check_trained_as_recorded

    old = fixture("top1_vse")
    record = ModelRecord.from_json(resealed({**old, "trunk_training": {**old["trunk_training"], "batchnorm": "batch"}}))
    then = TrainSettings(
        backbone="efficientnet_lite0", trunk="top1", trunk_batchnorm="batch", trunk_learning_rate_scale=0.1,
        embed_dim=8, gru_hidden=8, max_text_tokens=16, image_size=32, horizontal_flip=False, trunk_warm_start=False,
    )
    hashed_then = {k: v for k, v in significant(then).items() if k not in {"trunk_batchnorm", "trunk_warm_start"}}
    meta = {"config": {"train": hashed_then, "variant": {"model": record.model, "model_options": dict(record.model_options)}},
            "params": {}}
    check_trained_as_recorded(Path("Train/old"), meta, record, {})
    stated_frozen = {**meta, "config": {**meta["config"], "train": {**hashed_then, "trunk_batchnorm": "frozen"}}}
    with pytest.raises(BundleError, match="trunk_training.batchnorm: 'batch' in the record, 'frozen' in the settings"):
        check_trained_as_recorded(Path("Train/old"), stated_frozen, record, {})


def test_a_record_agrees_with_the_settings_it_was_trained_with_and_names_the_first_difference():
    record = ModelRecord.from_json(fixture("top1_vse"))
    settings = TrainSettings(
        backbone="efficientnet_lite0", trunk="top1", trunk_batchnorm="frozen", trunk_learning_rate_scale=0.1,
        embed_dim=8, gru_hidden=8, max_text_tokens=16, image_size=32, horizontal_flip=False, trunk_warm_start=False,
    )
    assert settings_disagreement(record, settings) is None, "a record written before cached views existed holds none"
    assert settings_disagreement(record, dataclasses.replace(settings, trunk_views=4)) is None, "nor is it compared"
    warm = dataclasses.replace(settings, trunk_warm_start=True)
    assert settings_disagreement(record, warm) == "trunk_training.warm_start: False in the record, True in the settings"
    assert settings_disagreement(record, warm, stated=set(significant(settings)) - {"trunk_warm_start"}) is None, (
        "a setting its Train did not state (made before it existed) decides nothing compared"
    )
    for change, said in (
        ({"image_size": 64}, "image_size: 32 in the record, 64 in the settings"),
        ({"max_text_tokens": 4}, "max_text_tokens: 16 in the record, 4 in the settings"),
        ({"embed_dim": 16}, "encoder.embed_dim: 8 in the record, 16 in the settings"),
        ({"trunk": "top2"}, "encoder.trunk: 'top1' in the record, 'top2' in the settings"),
        ({"trunk_learning_rate_scale": 0.5}, "trunk_training.learning_rate_scale: 0.1 in the record, 0.5 in the settings"),
        ({"backbone": "resnet18", "trunk": "top1"}, "encoder.backbone: 'efficientnet_lite0' in the record, 'resnet18'"),
    ):
        assert (settings_disagreement(record, dataclasses.replace(settings, **change)) or "").startswith(said), change


# --------------------------------------------------------------------------------------------- trunk modes
@pytest.mark.parametrize("bad", ["top²", "top٣", "top01", "top0", " top1", "top1 ", "TOP1", "top", "frozen!"])
def test_a_bad_trunk_mode_lists_the_valid_ones(bad):
    with pytest.raises(ValueError, match=r"unknown trunk mode .*available: finetune, frozen, or top<k>"):
        trunk_mode(bad)
    if bad != bad.strip():
        return  # --set strips a value's ends (the run then has top1)
    done = run_command(main, ["settings", "--set", f"train.trunk={bad}"])
    assert done.status == 2 and done.stderr.count("\n") == 1 and "available: finetune, frozen, or top<k>" in done.stderr


def test_settings_refuses_a_trunk_its_backbone_cannot_train_as_plan_does(tmp_path):
    listed = run_command(main, ["settings", "--set", "train.trunk=top99"])
    planned = run_command(main, ["plan", "--set", "train.trunk=top99", "--run-root", str(tmp_path / "runs")])
    assert listed.status == planned.status == 2
    assert listed.stderr == planned.stderr == (
        "error: train.trunk=top99: backbone 'efficientnet_lite0' has 7 stages: train 1 to 7 of them, not 99\n"
    )
    later = run_command(main, ["settings", "--set", "train.trunk=top4", "--set", "train.backbone=resnet50"])
    assert later.status == 0, "the changes are checked together: the backbone set after the trunk counts"


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "efficientnet_lite0"])
def test_a_backbone_declares_the_stage_count_its_built_trunk_has(name):
    assert name in BACKBONES
    assert stage_count(name) == BACKBONES[name].stage_count == build_trunk(name, False).stage_count


# ---------------------------------------------------------------------------------------------- loss settings
def test_every_loss_declares_each_of_its_parameters_once_and_the_listing_shows_them():
    rows = {row.path: row for row in setting_rows(RunSettings())}
    for loss in LOSSES.names():
        declared = LOSSES[loss].settings_class
        for field in dataclasses.fields(declared):
            row = rows[f"variants.<variant or *>.{loss}.{field.name}"]
            assert row.description == info_of(field).description and row.accepts and row.kind == "significant"
            assert field.default is not REQUIRED or field.default_factory is not dataclasses.MISSING
        built = build_loss(loss)
        assert dataclasses.asdict(built.settings) == {f.name: rows[f"variants.<variant or *>.{loss}.{f.name}"].value for f in dataclasses.fields(declared)}


def test_a_loss_default_changed_in_one_place_changes_the_listing_the_build_and_the_record(monkeypatch):
    """The angle of the angular loss, declared in one place (here a settings class redeclaring it at 30°), is
    what ``python -m pipeline settings`` lists, what the loss is built with, and what the run plan and a Train's
    hashed config hold for a variant that leaves it unset."""
    before_plan = resolve_plan("smoke")
    assert before_plan.variant("ang_np_sym").as_dict()["losses"][0]["params"]["alpha_degrees"] == 45.0
    changed = dataclasses.make_dataclass(
        "AngularSettings", [("alpha_degrees", float, redeclared(AngularSettings, "alpha_degrees", 30.0))],
        bases=(AngularSettings,), frozen=True,
    )
    monkeypatch.setattr(Angular, "settings_class", changed)
    rows = {row.path: row.value for row in setting_rows(RunSettings())}
    assert rows["variants.<variant or *>.angular.alpha_degrees"] == 30.0
    built = build_loss("angular")
    assert built.alpha_degrees == 30.0 and math.isclose(built.term.tan_sq, math.tan(math.radians(30.0)) ** 2)
    plan = resolve_plan("smoke")
    hashed = plan.variant("ang_np_sym").as_dict()["losses"][0]["params"]
    assert hashed["alpha_degrees"] == 30.0, "what Train hashes (its config's variant) holds the new default"
    assert plan.summary()["variants"]["ang_np_sym"]["losses"][0]["params"]["alpha_degrees"] == 30.0
    assert LossSpec("angular", {"alpha_degrees": 30.0}).as_dict() == LossSpec("angular").as_dict()
    with pytest.raises(ValueError, match=r"angular.alpha_degrees: must be in \(0, 90\), got 90"):
        build_loss("angular", alpha_degrees=90)
