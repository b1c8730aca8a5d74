"""A Train folder's model record checked against what the model was trained with, where the run folder is at hand
(``crossmodal export``): the training settings its Train hashed (``_meta.json``'s ``config``, which names the
folder), the settings its run plan resolved for it (the plan file's summary of the variant, with the Train's
tuning point on top) and the variant's model and options.

Why, beyond the record's own checks: a record forged consistently — a field changed, its checksum recomputed and
the copy in ``_meta.json`` rewritten — passes them all, and was exported and served with other preprocessing
than the model learned (an image side of 64 for a model trained at 32, 4 text tokens for 32). What the record says
the settings decide (the encoder's sizes and trunk, the image side, the text's tokens, the normalisation, what of
the trunk trained) must be what they decide; a record that also rewrites ``_meta.json``'s config and the run plan
consistently is a forgery of the whole run, which no check of the folder can tell (docs/faults.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.bounded_json import RECORD, BoundedJsonError, loads_bounded
from common.settings import SettingValueError, significant
from models.record import ModelRecord
from models.record_settings import settings_disagreement, settings_of
from serving.bundle import BundleError


def planned_train(meta: Mapping[str, Any], plan_summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The training settings the run plan resolved for the Train of ``meta``: its variant's (the plan's summary)
    with the Train's point on top (a tuning trial's ``train`` changes); None when the plan does not list the
    variant (a variant outside its grid, or the plan file missing: derived, written again by the next run)."""
    params = meta.get("params") if isinstance(meta.get("params"), Mapping) else {}
    variants = plan_summary.get("variants")
    name = params.get("variant")
    if not isinstance(variants, Mapping) or not isinstance(variants.get(name), Mapping):
        return None
    planned = variants[name].get("train")
    if not isinstance(planned, Mapping):
        return None
    point = params.get("point") or "{}"
    try:
        point = loads_bounded(point, "_meta.json's params.point", RECORD) if isinstance(point, str) else point
    except BoundedJsonError:
        return None
    changes = point.get("train", {}) if isinstance(point, Mapping) else {}
    return {**planned, **(changes if isinstance(changes, Mapping) else {})}


def check_trained_as_recorded(
    train_dir: Path, meta: Mapping[str, Any], record: ModelRecord, plan_summary: Mapping[str, Any]
) -> None:
    """A :class:`BundleError` in one line when ``record`` (the Train folder's ``model.json``) contradicts the
    settings its Train hashed, the run plan's settings for it, or its variant's model and options."""
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    variant = config.get("variant") if isinstance(config.get("variant"), Mapping) else {}
    record_file = Path(train_dir) / "model.json"
    if record.model != variant.get("model") or dict(record.model_options) != dict(variant.get("model_options") or {}):
        raise BundleError(
            f"{record_file}: model {record.model!r} with options {dict(record.model_options)}, but its Train trained "
            f"{variant.get('model')!r} with {variant.get('model_options')}: the record contradicts its run; train again"
        )
    sources = [("the settings its Train hashed (_meta.json)", config.get("train"))]
    planned = planned_train(meta, plan_summary)
    if planned is not None:
        sources.append((f"its run plan ({meta['params'].get('plan')})", planned))
    for where, train in sources:
        given = train if isinstance(train, Mapping) else {}
        try:
            settings = settings_of(given)
        except (SettingValueError, ValueError) as error:
            raise BundleError(f"{train_dir}: {where}: {error}") from None
        # only what this source states: a setting missing from it (left out of an older Train's hash at what was
        # then its default) is not read as today's default
        problem = settings_disagreement(record, settings, stated=set(given) & set(significant(settings)))
        if problem:
            raise BundleError(
                f"{record_file}: {problem} ({where}): the record contradicts what the model was trained with; "
                "export an intact copy of the Train folder, or train again"
            )
