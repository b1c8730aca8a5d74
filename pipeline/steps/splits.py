"""Train/val/test assignment by a hash of pair_id: adding data later never moves an existing pair."""

from __future__ import annotations

import hashlib

import pandas as pd

DEFAULT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}
SPLIT_SALT = "split"


def hash_unit_interval(key: str, salt: str = "split") -> float:
    """A deterministic number in [0, 1) from ``salt:key`` (independent of process and input order)."""
    digest = hashlib.sha1(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(key: str, fractions: dict[str, float] = DEFAULT_FRACTIONS, salt: str = "split") -> str:
    position = hash_unit_interval(key, salt)
    cumulative = 0.0
    for name, share in fractions.items():
        cumulative += share
        if position < cumulative:
            return name
    return list(fractions)[-1]


def assign_splits(
    manifest: pd.DataFrame, fractions: dict[str, float] = DEFAULT_FRACTIONS, salt: str = "split"
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
