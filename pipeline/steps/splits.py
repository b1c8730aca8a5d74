"""Train/val/test assignment by a hash of pair_id: adding data later never moves an existing pair."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import pandas as pd

from common.settings import between, check_declared, setting

SPLIT_SALT = "split"
_SHARE = between(0, 1, high_open=True)


@dataclass(frozen=True)
class SplitSettings:
    """The shares of the hashed split, in the order a pair's hash falls among them (a split the dataset gives,
    e.g. Karpathy's, is kept). They sum to 1; a run's change of ``val`` or ``test`` alone is balanced by ``train``."""

    train: float = setting(0.8, "share of the pairs (or caption groups) trained on", _SHARE)
    val: float = setting(0.1, "share validated on: checkpoint selection, early stopping, tuning", _SHARE)
    test: float = setting(0.1, "share the report evaluates on", _SHARE)

    def __post_init__(self) -> None:
        check_declared(self)

    def fractions(self) -> dict[str, float]:
        """``{"train": ..., "val": ..., "test": ...}`` in this order (the order a hash falls among them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_FRACTIONS = SplitSettings().fractions()


def hash_unit_interval(key: str, salt: str = SPLIT_SALT) -> float:
    """A deterministic number in [0, 1) from ``salt:key`` (independent of process and input order)."""
    digest = hashlib.sha1(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(key: str, fractions: dict[str, float] = DEFAULT_FRACTIONS, salt: str = SPLIT_SALT) -> str:
    position = hash_unit_interval(key, salt)
    cumulative = 0.0
    for name, share in fractions.items():
        cumulative += share
        if position < cumulative:
            return name
    return list(fractions)[-1]


def assign_splits(
    manifest: pd.DataFrame, fractions: dict[str, float] = DEFAULT_FRACTIONS, salt: str = SPLIT_SALT
) -> pd.DataFrame:
    """Add a ``split`` column. A split given by the dataset (e.g. Karpathy's) is kept; other rows are
    hashed by ``group_id`` when present (all captions of one image land in the same split), else pair_id.
    """
    if abs(sum(fractions.values()) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must sum to 1, got {fractions}")
    out = manifest.copy()
    keys = out["group_id"].astype(str) if "group_id" in out.columns else out["pair_id"]
    keys = keys.where(keys.notna() & (keys != "None") & (keys != "nan"), out["pair_id"])
    hashed = [split_of(key, fractions, salt) for key in keys]
    if "split" in out.columns:
        given = out["split"].where(out["split"].isin(list(fractions)), None)
        out["split"] = [g if isinstance(g, str) else h for g, h in zip(given, hashed, strict=True)]
    else:
        out["split"] = hashed
    return out
