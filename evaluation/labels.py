"""How a tuning trial's settings read in tables and figures: ``lr 0.001, angle 36, within × 0.5``."""

from __future__ import annotations

from typing import Any


def knob_label(knob: str) -> str:
    """A search-space knob as the report names it: ``lr``, ``angle``, ``margin``, ``within ×``."""
    name = knob.split("+")[0].split(".")[1]
    return {"learning_rate": "lr", "alpha_degrees": "angle", "margin": "margin", "weight_scale": "within ×"}.get(name, knob)


def point_label(point: dict[str, Any]) -> str:
    return ", ".join(f"{knob_label(knob)} {value:g}" if isinstance(value, float) else f"{knob_label(knob)} {value}" for knob, value in sorted(point.items()))
