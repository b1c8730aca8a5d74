"""How numbers and lists read in every section, so all tables print a metric the same way."""

from __future__ import annotations

import numpy as np


def fmt(summary: dict[str, float], digits: int = 4) -> str:
    """A :func:`evaluation.statistics.mean_std` summary as "mean ± sd", or the mean alone for one seed."""
    if summary["n"] > 1:
        return f"{summary['mean']:.{digits}f} ± {summary['std']:.{digits}f}"
    return f"{summary['mean']:.{digits}f}"


def finite_or_none(value: float) -> float | None:
    """``value``, or ``None`` for inf / nan, which strict JSON cannot hold."""
    return float(value) if np.isfinite(value) else None


def fmt_number(value: float, digits: int = 4) -> str:
    """``value`` with ``digits`` decimals, or "n/a" for inf / nan."""
    return f"{value:.{digits}f}" if np.isfinite(value) else "n/a"


def direction_label(name: str) -> str:
    """``"i2t"`` as ``"I→T"``: the arrow form every table uses."""
    return name.upper().replace("2", "→")


def seeds_phrase(seeds: list[int]) -> str:
    """ "1 seed (0)" / "3 seeds (0, 1, 2)"."""
    return f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))})"


def and_list(items: list[str]) -> str:
    """``["a", "b", "c"]`` as "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
