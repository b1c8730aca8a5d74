"""How a tuned variant's trials are compared and one is chosen: by the validation rsum at each trial's own
selected checkpoint (the validation split only), ties going to the trial listed first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SELECTION_RULE = "highest validation rsum (full ranking, at each trial's selected checkpoint); ties: the trial listed first"


def trial_record(settings: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """What ``selection.json`` keeps of a trial: its settings (a search-space point) and its Train summary's
    validation results."""
    if summary.get("best_val_rsum") is None:
        raise ValueError(
            "a tuning trial was trained without the validation rsum (its selection is "
            f"{summary.get('selection')}): tuning compares trials by it, set TrainSettings.selection='val_rsum'"
        )
    return {
        "settings": dict(settings),
        "val_rsum": float(summary["best_val_rsum"]),
        "val_loss": summary.get("best_val_loss"),
        "best_epoch": int(summary["best_epoch"]),
        "epochs": int(summary["epochs"]),
        "max_epochs": int(summary["max_epochs"]),
        "capped": capped(summary),
    }


def capped(summary: Mapping[str, Any]) -> bool:
    """Whether a run's best epoch was its last allowed one: still improving when the epoch cap stopped it."""
    return int(summary["best_epoch"]) >= int(summary["max_epochs"])


def choose(trials: Sequence[Mapping[str, Any]]) -> int:
    """Index of the trial with the highest validation rsum; the first listed among equals."""
    if not trials:
        raise ValueError("no trial to choose from: the tuning budget must be at least 1")
    best = 0
    for index, trial in enumerate(trials):
        if trial["val_rsum"] > trials[best]["val_rsum"]:
            best = index
    return best
