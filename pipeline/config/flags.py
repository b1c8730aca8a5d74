"""The command line's flags as the ``--set`` changes they stand for: one way to change a setting, several
spellings. A flag's change is applied after the ``--set`` ones (a flag wins), and an error in it names the flag.

    --dataset pairs                   data.recipe="pairs"
    --raw-dir D / --shards [...]      data.raw_dir / data.shards
    --dataset-options '{"n": 2}'      data.options.n=2
    --data-seed 3                     data.seed=3
    --reject-budget 0.1               data.reject_budget=0.1
    --seeds '[0,1]'                   seeds=[0, 1]
    --protocol tuned                  tuning.protocol="tuned"
    --variant-overrides '{"ours": {"train": {"learning_rate": 0.001}}}'
                                      variants.ours.train.learning_rate=0.001
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.config.changes import flag_change
from pipeline.config.checks import RunConfigurationError
from pipeline.config.variants import VARIANTS


def flag_changes(
    *,
    dataset: str | None = None,
    raw_dir: str | None = None,
    shards: Sequence[str] = (),
    dataset_options: Mapping[str, Any] | None = None,
    data_seed: int | None = None,
    reject_budget: float | None = None,
    seeds: Sequence[int] = (),
    protocol: str = "",
    variant_overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """The ``--set`` changes the command line's flags stand for (a flag left at its default changes nothing);
    an error in one names its flag."""
    out: list[str] = []
    if dataset is not None:
        out.append(flag_change("data.recipe", dataset, "--dataset"))
    if raw_dir:
        out.append(flag_change("data.raw_dir", raw_dir, "--raw-dir"))
    if shards:
        out.append(flag_change("data.shards", list(shards), "--shards"))
    for name, value in (dataset_options or {}).items():
        out.append(flag_change(f"data.options.{name}", value, f"--dataset-options {name}"))
    if data_seed is not None:
        out.append(flag_change("data.seed", data_seed, "--data-seed"))
    if reject_budget is not None:
        out.append(flag_change("data.reject_budget", reject_budget, "--reject-budget"))
    if seeds:
        out.append(flag_change("seeds", list(seeds), "--seeds"))
    if protocol:
        out.append(flag_change("tuning.protocol", protocol, "--protocol"))
    for variant, targets in (variant_overrides or {}).items():
        if variant not in VARIANTS:
            raise RunConfigurationError(f"--variant-overrides: {VARIANTS.unknown_message(variant)}")
        if not isinstance(targets, Mapping):
            raise RunConfigurationError(
                f"--variant-overrides {variant}: expected an object of changes, e.g. "
                '\'{"ours": {"train": {"learning_rate": 0.001}}}\''
            )
        for target, value in targets.items():
            where = f"--variant-overrides {variant}.{target}"
            if isinstance(value, Mapping):
                out += [flag_change(f"variants.{variant}.{target}.{name}", item, f"{where}.{name}") for name, item in value.items()]
            else:
                out.append(flag_change(f"variants.{variant}.{target}", value, where))
    return out
