"""Names a run is built from (profile, dataset, variants, overrides), checked when FullRun is created, so a
typo stops the command at once with one line naming the bad value and the valid ones, before any work."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any


class RunConfigurationError(ValueError):
    """A run's parameters name something that does not exist; the message says what would."""


def check_run_names(
    profile: str, dataset: str, variants: Iterable[str], overrides: Mapping[str, Any]
) -> None:
    """Raise :class:`RunConfigurationError` for an unknown profile, dataset, variant or override target."""
    from data_recipes import RECIPES
    from pipeline.profiles import PROFILES
    from pipeline.variants import VARIANTS, resolve_variant

    if profile not in PROFILES:
        raise RunConfigurationError(
            f"unknown profile {profile!r}; valid profiles: {', '.join(sorted(PROFILES))}"
        )
    if dataset not in RECIPES:
        raise RunConfigurationError(
            f"unknown dataset {dataset!r}; valid datasets: {', '.join(sorted(RECIPES))}"
        )
    unknown = [name for name in [*variants, *overrides] if name not in VARIANTS]
    if unknown:
        raise RunConfigurationError(
            f"unknown variant(s) {', '.join(map(repr, unknown))}; valid variants: {', '.join(sorted(VARIANTS))}"
        )
    for name, changes in overrides.items():
        try:
            resolve_variant(name, dict(changes))
        except KeyError as error:
            raise RunConfigurationError(f"bad override for variant {name!r}: {error.args[0]}") from None


def exit_or_raise(error: RunConfigurationError) -> None:
    """On the ``luigi`` command line: print ``error: ...`` as one line and exit with status 2 (luigi would
    log a traceback and, for an error met while scheduling, exit 0). Called from code (``luigi.build``): raise."""
    from luigi.cmdline_parser import CmdlineParser

    if CmdlineParser.get_instance() is not None:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    raise error
